"""The reference interpreter: runs a graph node by node with the ops' NumPy references.

It is the correctness oracle for every later layer, so it checks as it goes: inputs
against the graph's types, and each node's results against its inferred types.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ember.errors import ResourceError, ShapeError
from ember.graph.ir import Graph, TensorType, Value
from ember.graph.ops import evaluate


def interpret(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Run `graph`; returns a dict from output name to array."""
    env: dict[str, np.ndarray] = {}
    for value in graph.params:
        if value.name not in params:
            raise ShapeError(f"param {value.name!r} is missing from the params dict")
        env[value.name] = _checked(value, np.asarray(params[value.name]), "param")
    for value in graph.inputs:
        if value.name not in inputs:
            names = ", ".join(v.name for v in graph.inputs)
            raise ShapeError(f"input {value.name!r} was not given (graph inputs: {names})")
        env[value.name] = _checked(value, np.asarray(inputs[value.name]), "input")
    for node in graph.nodes:
        try:
            results = evaluate(node.op, [env[v.name] for v in node.inputs], node.attrs)
        except ResourceError as error:  # evaluate's, naming the op and the result
            raise ResourceError(f"node {node.name!r}: {error}") from None
        for value, result in zip(node.outputs, results, strict=True):
            env[value.name] = _checked(value, result, f"output of node {node.name!r}")
    return {value.name: env[value.name] for value in graph.outputs}


def _checked(value: Value, array: np.ndarray, what: str) -> np.ndarray:
    actual = TensorType.of(array)
    if actual != value.type:
        raise ShapeError(f"{what} {value.name!r} is {actual}, the graph expects {value.type}")
    return array
