"""Greedy delta debugging: the smallest model that still shows a failure.

A fuzzed failure arrives as a 20-node graph of which two nodes matter. ``shrink`` tries one small
step at a time and keeps it whenever the model still fails:

- drop a graph output;
- promote a node's output to be the only graph output (everything after it goes);
- bypass a node: its readers read one of its inputs of the same type and shape instead;
- cut a node: its outputs become new graph inputs of their inferred types;

- drop the initializers and graph inputs nobody reads (all at once, else one at a time: an unread
  input can be the trigger, e.g. one of a type the input generator mishandles);
- drop the dead nodes and unread initializers inside If/Loop/Scan bodies (all bodies at once: a control-flow
  failure is otherwise kept with every body in full);

after each step, nodes that no longer reach an output are removed. It stops when no single step keeps
the failure, so every remaining piece is needed.
``still_fails`` decides what "the failure" is; a candidate that is invalid should make it return
False (the differential checker says "invalid", not "failed", for those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx

from onnxsat.proto_fields import subgraph_captures

Predicate = Callable[[onnx.ModelProto], bool]


def _reads(node: onnx.NodeProto) -> list[str]:
    return [name for name in [*node.input, *subgraph_captures(node)] if name]


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    result = onnx.ModelProto()
    result.CopyFrom(model)
    return result


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without the nodes that reach no graph output, nor value_info of tensors gone with them."""
    result = _copy(model)
    graph = result.graph
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    live: set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        index = stack.pop()
        if index not in live:
            live.add(index)
            stack.extend(producer[name] for name in _reads(graph.node[index]) if name in producer)
    kept = [node for i, node in enumerate(graph.node) if i in live]
    del graph.node[:]
    graph.node.extend(kept)
    produced = {name for node in kept for name in node.output}
    _keep(graph.value_info, lambda v: v.name in produced)
    return result


def _prune_body(graph: onnx.GraphProto) -> bool:
    """Remove ``graph``'s dead nodes and unread initializers, and its nested bodies'; True if anything went."""
    changed = False
    for node in graph.node:
        for attr in node.attribute:
            for body in [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]:
                changed |= _prune_body(body)
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    live: set[int] = set()
    stack = [producer[o.name] for o in graph.output if o.name in producer]
    while stack:
        index = stack.pop()
        if index not in live:
            live.add(index)
            stack.extend(producer[name] for name in _reads(graph.node[index]) if name in producer)
    if len(live) < len(graph.node):
        kept = [node for i, node in enumerate(graph.node) if i in live]
        del graph.node[:]
        graph.node.extend(kept)
        changed = True
    needed = {name for node in graph.node for name in _reads(node)} | {o.name for o in graph.output}
    if any(t.name not in needed for t in graph.initializer):
        _keep(graph.initializer, lambda t: t.name in needed)
        changed = True
    return changed


def prune_bodies(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy whose control-flow bodies lost their dead nodes and unread initializers (None if none had any)."""
    result = _copy(model)
    changed = False
    for node in result.graph.node:
        for attr in node.attribute:
            for body in [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]:
                changed |= _prune_body(body)
    return result if changed else None


def unread(model: onnx.ModelProto) -> list[str]:
    """Initializers and graph inputs no node reads and no graph output returns."""
    graph = model.graph
    needed = {name for node in graph.node for name in _reads(node)} | {o.name for o in graph.output}
    names = dict.fromkeys([*(t.name for t in graph.initializer), *(v.name for v in graph.input)])
    return [name for name in names if name not in needed]


def drop_tensors(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """A copy without the initializers and graph inputs called ``names``."""
    result = _copy(model)
    _keep(result.graph.initializer, lambda t: t.name not in names)
    _keep(result.graph.input, lambda v: v.name not in names)
    return result


def cleanup(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without dead nodes and without the initializers and inputs nobody reads."""
    pruned = prune(model)
    return drop_tensors(pruned, set(unread(pruned)))


def _keep(field: object, wanted: Callable[[object], bool]) -> None:
    """Keep only the entries of a repeated protobuf field that ``wanted`` accepts, in order."""
    kept = [item for item in field if wanted(item)]  # type: ignore[attr-defined]
    del field[:]  # type: ignore[index]
    field.extend(kept)  # type: ignore[attr-defined]


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every tensor type shape inference knows, fully shaped ones only (new graph inputs need a shape)."""
    try:
        typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference failing just means fewer cut candidates
        typed = model
    types = {}
    for info in [*typed.graph.input, *typed.graph.value_info, *typed.graph.output]:
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.elem_type and tensor.HasField("shape"):
            types[info.name] = info.type
    for tensor in model.graph.initializer:
        types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _rename_reads(model: onnx.ModelProto, old: str, new: str) -> bool:
    """Point every reader of ``old`` (nodes and graph outputs) at ``new``; False if outputs would collide."""
    outputs = [o.name for o in model.graph.output]
    if old in outputs and new in outputs:
        return False
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    for output in model.graph.output:
        if output.name == old:
            output.name = new
    return True


def _without_node(model: onnx.ModelProto, index: int) -> onnx.ModelProto:
    result = _copy(model)
    del result.graph.node[index]
    return result


def _bypass(model: onnx.ModelProto, index: int, types: dict[str, onnx.TypeProto]) -> onnx.ModelProto | None:
    """Remove node ``index``; each output it had is replaced by an input of the node with its type."""
    node = model.graph.node[index]
    if subgraph_captures(node):
        return None
    result = _without_node(model, index)
    for output in (o for o in node.output if o):
        same = [i for i in node.input if i and output in types and types.get(i) == types[output]]
        if not same or not _rename_reads(result, output, same[0]):
            return None
    return result


def _cut(model: onnx.ModelProto, index: int, types: dict[str, onnx.TypeProto]) -> onnx.ModelProto | None:
    """Remove node ``index``; the outputs others still need become graph inputs of their inferred types."""
    node = model.graph.node[index]
    result = _without_node(model, index)
    needed = {name for other in result.graph.node for name in _reads(other)} | {o.name for o in result.graph.output}
    for output in (o for o in node.output if o and o in needed):
        if output not in types:
            return None
        value = onnx.ValueInfoProto(name=output)
        value.type.CopyFrom(types[output])
        result.graph.input.append(value)
    return result


def _promote(model: onnx.ModelProto, index: int, types: dict[str, onnx.TypeProto]) -> onnx.ModelProto | None:
    """Make node ``index``'s first output the only graph output (if its type is known)."""
    name = model.graph.node[index].output[0]
    if name not in types or [o.name for o in model.graph.output] == [name]:
        return None
    result = _copy(model)
    del result.graph.output[:]
    value = result.graph.output.add()
    value.name = name
    value.type.CopyFrom(types[name])
    return result


def _node_candidates(model: onnx.ModelProto, key: str) -> Iterator[onnx.ModelProto]:
    """Reductions at the node whose first output is ``key``: the biggest cut first."""
    index = next((i for i, node in enumerate(model.graph.node) if node.output and node.output[0] == key), None)
    if index is None:
        return
    types = _types(model)
    for reduce in (_promote, _bypass, _cut):
        candidate = reduce(model, index, types)
        if candidate is not None:
            yield from _tidied(candidate)


def _tidied(model: onnx.ModelProto) -> Iterator[onnx.ModelProto]:
    """``model`` cleaned up, then (if that differs) with only its dead nodes removed."""
    pruned = prune(model)
    names = set(unread(pruned))
    yield drop_tensors(pruned, names)
    if names:
        yield pruned


def _candidates(model: onnx.ModelProto, kind: str, name: str) -> Iterator[onnx.ModelProto]:
    """Candidates of one step on the current ``model`` (none if what it names is already gone)."""
    if kind == "unread":
        names = set(unread(model))
        if names:
            yield drop_tensors(model, names)
    elif kind == "bodies":
        pruned = prune_bodies(model)
        if pruned is not None:
            yield pruned
    elif kind == "output":
        positions = [i for i, o in enumerate(model.graph.output) if o.name == name]
        if positions and len(model.graph.output) > 1:
            result = _copy(model)
            del result.graph.output[positions[0]]
            yield from _tidied(result)
    elif kind == "node":
        yield from _node_candidates(model, name)
    elif name in unread(model):
        yield drop_tensors(model, {name})


def _steps(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """One pass: unread tensors at once, dead body nodes, each output, each node (last first), each unread tensor."""
    return [
        ("unread", ""),
        ("bodies", ""),
        *(("output", o.name) for o in model.graph.output),
        *(("node", n.output[0]) for n in reversed(model.graph.node) if n.output),
        *(("tensor", name) for name in unread(model)),
    ]


def shrink(model: onnx.ModelProto, still_fails: Predicate, max_checks: int = 2000) -> onnx.ModelProto:
    """The smallest model reachable by single steps from ``model`` for which ``still_fails`` holds.

    ``model`` itself must fail (else it is returned unchanged); at most ``max_checks`` candidates are
    tried, which bounds the time a pathological case can take. Steps are named (output, node output,
    tensor name) and looked up in the current model, so a pass goes on after a step succeeds.
    """
    checks = 0
    if not still_fails(model):
        return model
    current = model
    changed = True
    while changed:
        changed = False
        for kind, name in _steps(current):
            for candidate in _candidates(current, kind, name):
                if checks >= max_checks:
                    return current
                checks += 1
                if still_fails(candidate):
                    current, changed = candidate, True
                    break
    return current
