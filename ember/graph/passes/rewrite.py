"""Small helpers the graph passes share for building rewritten graphs.

Passes never mutate a graph: they assemble new node tuples. These helpers build nodes
with inferred output types and answer small questions about values and permutations;
fresh names come from `NameSupply.for_graph(graph)` (in `ember.graph.ir`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ember.graph.ir import Attrs, NoAttrs, Node, Value
from ember.graph.ops import infer_types


def make_node(
    op: str,
    inputs: Sequence[Value],
    attrs: Attrs | None = None,
    *,
    name: str,
    output_names: Sequence[str] | None = None,
) -> Node:
    """A node of `op` whose output types come from type inference.

    Output values are named `output_names`, or after the node (`name`, or `name:i` for
    several outputs), the convention `GraphBuilder` follows."""
    attrs = attrs if attrs is not None else NoAttrs()
    types = infer_types(op, [value.type for value in inputs], attrs)
    if output_names is None:
        output_names = [name] if len(types) == 1 else [f"{name}:{i}" for i in range(len(types))]
    outputs = tuple(Value(n, t) for n, t in zip(output_names, types, strict=True))
    return Node(op, tuple(inputs), outputs, attrs, name)


def defined_by_nodes(nodes: Iterable[Node]) -> set[str]:
    """Names of the values that `nodes` produce."""
    return {value.name for node in nodes for value in node.outputs}


def keeps_element_order(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """Whether `numpy.transpose(x, perm)` of a `shape` array lists its elements in the
    same row-major order as `x` (only axes of length 1 move), so a reshape can do it."""
    moved = [axis for axis in perm if shape[axis] != 1]
    return moved == sorted(moved)
