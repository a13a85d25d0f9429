"""`verify(graph)`: structural and type checks, run after every pass in the tests."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ember.errors import EmberError, GraphError
from ember.graph.ir import Graph, TensorType
from ember.graph.ops import infer_types


def verify(graph: Graph, params: Mapping[str, np.ndarray] | None = None) -> None:
    """Raise `GraphError` unless every value is defined once before use, every node has
    a name of its own, every node's output types equal what its op infers, and (if
    given) params match their types."""
    defined: dict[str, TensorType] = {}
    node_names: dict[str, int] = {}

    def define(name: str, type_: TensorType, where: str) -> None:
        if name in defined:
            raise GraphError(f"value {name!r} is defined twice ({where})")
        defined[name] = type_

    for value in graph.inputs:
        define(value.name, value.type, "graph input")
    for value in graph.params:
        define(value.name, value.type, "param")
    for index, node in enumerate(graph.nodes):
        where = f"node #{index} {node.name!r} ({node.op})"
        if node.name in node_names:
            # Passes (fuse above all) and messages identify nodes by name.
            raise GraphError(f"{where} has the name of node #{node_names[node.name]}")
        node_names[node.name] = index
        for value in node.inputs:
            if value.name not in defined:
                raise GraphError(f"{where} reads {value.name!r} before it is defined")
            if defined[value.name] != value.type:
                raise GraphError(
                    f"{where} reads {value.name!r} as {value.type}, "
                    f"but it was defined as {defined[value.name]}"
                )
        try:
            expected = infer_types(node.op, [v.type for v in node.inputs], node.attrs)
        except EmberError as error:
            raise GraphError(f"{where}: {error}") from error
        actual = tuple(v.type for v in node.outputs)
        if expected != actual:
            raise GraphError(
                f"{where} declares outputs {', '.join(map(str, actual))} but its op infers "
                f"{', '.join(map(str, expected))}"
            )
        for value in node.outputs:
            define(value.name, value.type, where)
    for value in graph.outputs:
        if defined.get(value.name) != value.type:
            raise GraphError(f"graph output {value.name!r} ({value.type}) is not defined")
    if params is not None:
        for value in graph.params:
            if value.name not in params:
                raise GraphError(f"param {value.name!r} has no array")
            actual_type = TensorType.of(np.asarray(params[value.name]))
            if actual_type != value.type:
                raise GraphError(
                    f"param {value.name!r} array is {actual_type}, the graph says {value.type}"
                )
