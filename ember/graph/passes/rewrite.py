"""Small helpers the graph passes share for building rewritten graphs.

Passes never mutate a graph: they assemble new node tuples. These helpers make fresh
names that cannot collide with the graph's, build nodes with inferred output types,
and rename values throughout a graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ember.graph.ir import Attrs, Graph, NoAttrs, Node, Value
from ember.graph.ops import infer_types


class NameSupply:
    """Hands out value and node names not used anywhere in a graph (nor handed out)."""

    def __init__(self, graph: Graph) -> None:
        self._taken = {value.name for value in graph.values()}
        self._taken |= {node.name for node in graph.nodes}

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.:/-]", "_", hint) or "v"
        name, counter = base, 0
        while name in self._taken:
            counter += 1
            name = f"{base}_{counter}"
        self._taken.add(name)
        return name


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
