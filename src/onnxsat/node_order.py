"""Topological node order that counts what control-flow bodies read.

An If, Loop or Scan body reads outer tensors by name without listing them as the node's inputs. A sort
over listed inputs only (ONNX Runtime's quantizer sorts that way) can put such a node before the producer
of a tensor its body reads, and the checker then refuses the model. Every order here waits for those
producers too.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import onnx

from onnxsat.proto_fields import all_graphs, subgraph_captures


def topological_order(nodes: Sequence[onnx.NodeProto], keys: Sequence[tuple[int, ...]] | None = None) -> list[int]:
    """Indices of ``nodes`` in an order where every node comes after the producers of its inputs and of
    the outer tensors its bodies read; among ready nodes the smallest key (default: the index) goes
    first, so an order that is already valid is kept. Nodes in a cycle are left out."""
    keys = [(index,) for index in range(len(nodes))] if keys is None else list(keys)
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    waiting = [0] * len(nodes)
    consumers: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        deps = {producer[n] for n in [*node.input, *subgraph_captures(node)] if n in producer} - {index}
        waiting[index] = len(deps)
        for dep in deps:
            consumers[dep].append(index)
    ready = [(keys[i], i) for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(index)
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, (keys[consumer], consumer))
    return order


def sort_graph(graph: onnx.GraphProto) -> bool:
    """Reorder ``graph``'s nodes in place (``topological_order``) when they are out of order; False when
    a cycle leaves some unorderable (the graph is then left as it was)."""
    nodes = list(graph.node)
    order = topological_order(nodes)
    if len(order) != len(nodes):
        return False
    if order != list(range(len(nodes))):
        sorted_nodes = [nodes[i] for i in order]
        copies = [onnx.NodeProto() for _ in sorted_nodes]
        for copy, node in zip(copies, sorted_nodes, strict=True):
            copy.CopyFrom(node)
        del graph.node[:]
        graph.node.extend(copies)
    return True


def sort_model(model: onnx.ModelProto) -> int:
    """Put the nodes of the graph and of every body in topological order, in place; how many graphs
    were out of order. Some converters append nodes at the end (ONNX Runtime's and onnxconverter-common's
    float16 converters add their input Casts last): ONNX Runtime runs such models, the checker refuses
    them. A graph with a cycle is left as it is, for the checker to name."""
    return sum(_out_of_order(graph) and sort_graph(graph) for graph in all_graphs(model.graph))


def _out_of_order(graph: onnx.GraphProto) -> bool:
    order = topological_order(list(graph.node))
    return len(order) == len(graph.node) and order != list(range(len(graph.node)))
