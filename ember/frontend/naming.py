"""Giving a converted graph's outputs the names the model gave them (shared by the
frontends)."""

from __future__ import annotations

from collections.abc import Sequence

from ember.graph.builder import GraphBuilder
from ember.graph.ir import Graph, Params, Value, rename_values


def build_with_output_names(
    builder: GraphBuilder, outputs: Sequence[tuple[str, Value]], input_names: set[str]
) -> tuple[Graph, Params]:
    """Build the graph computing `outputs` (name, value) so that each output carries
    its name. A node output is renamed; an output that is a param, another output's
    value, or a graph input under a different name gets an `identity` node to carry its
    name. The names must have been reserved in the builder (`fresh_name`) before any
    node could take one."""
    builder.fold_constants = False  # an identity of a constant must stay a node
    values: list[Value] = []
    renames: dict[str, str] = {}
    named: dict[str, Value] = {}  # an output listed twice is the same value twice
    for name, value in outputs:
        if name in named:
            values.append(named[name])
            continue
        if value.name == name:
            values.append(value)
            named[name] = value
            continue
        if value.name in renames or value.name in input_names or builder.is_constant(value):
            value = builder.add("identity", [value], name=f"{name}_identity")
        renames[value.name] = name
        values.append(value)
        named[name] = value
    graph, params = builder.build(values)
    return rename_values(graph, renames), params
