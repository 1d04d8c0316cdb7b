"""Names across a graph and the bodies nested in it.

ONNX (the checker and ONNX Runtime alike) refuses a body that defines a name an enclosing scope already
defines, so every name the optimizer makes or moves between scopes is checked against all of them.
"""

from __future__ import annotations

import onnx

from onnxsat.proto_fields import bodies_of


def defined_names(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` itself defines: inputs, initializers and node outputs (not its bodies')."""
    names = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    names |= {tensor.values.name for tensor in graph.sparse_initializer}
    names |= {name for node in graph.node for name in node.output if name}
    return names


def all_names(graph: onnx.GraphProto) -> set[str]:
    """Every name defined in ``graph`` or in any body nested in it."""
    names = defined_names(graph)
    for node in graph.node:
        for body in bodies_of(node):
            names |= all_names(body)
    return names


class NameSource:
    """Fresh names: a name is handed out once and never equals one the model already has."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name, counter = base, 0
        while name in self.taken or not name:
            counter += 1
            name = f"{base}_{counter}"
        self.taken.add(name)
        return name


def rename(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Rename tensors of ``graph`` by ``mapping`` everywhere, in the bodies nested in it too.

    Valid models never shadow a name in a body, so a name means the same tensor in every nested scope.
    """
    if not mapping:
        return
    for node in graph.node:
        node.input[:] = [mapping.get(name, name) for name in node.input]
        node.output[:] = [mapping.get(name, name) for name in node.output]
        for body in bodies_of(node):
            rename(body, mapping)
    for item in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        item.name = mapping.get(item.name, item.name)
    for sparse in graph.sparse_initializer:
        sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)


def shadowed_names(
    graph: onnx.GraphProto, outer: frozenset[str] = frozenset(), initializers_only: bool = False
) -> set[str]:
    """Names some body defines (as an input or initializer; ``initializers_only``: as an initializer) that an
    enclosing scope defines too."""
    names: set[str] = set()
    here = outer | defined_names(graph)
    for node in graph.node:
        for body in bodies_of(node):
            own = {t.name for t in body.initializer} if initializers_only else defined_names(body)
            names |= own & here
            names |= shadowed_names(body, here, initializers_only)
    return names


def unshadow(graph: onnx.GraphProto, keep: frozenset[str] = frozenset(), outer: frozenset[str] = frozenset()) -> int:
    """Rename every name a body defines that an enclosing scope defines too; returns how many were renamed.

    Rewriting a body and its enclosing graph separately can give both the same fresh name (two folds both
    named ``onnxsat_constant``); positions, not names, tie a body's inputs and outputs to its node, so
    renaming inside the body changes nothing it computes. ``keep``: shadowing the input model already had
    (a body input named like an outer tensor, which the checker allows), left as it was, since ONNX
    Runtime resolves such a name its own way.
    """
    renamed = 0
    here = outer | defined_names(graph)
    for node in graph.node:
        for body in bodies_of(node):
            clashes = (defined_names(body) & here) - keep
            if clashes:
                names = NameSource(here | all_names(body))
                rename(body, {name: names.fresh(name) for name in sorted(clashes)})
                renamed += len(clashes)
            renamed += unshadow(body, keep, here)
    return renamed
