"""Constant folding: evaluate every node that reads only params, ahead of time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ember.errors import GraphError
from ember.graph.ir import Graph, Node, Params, TensorType, Value, prune_params
from ember.graph.ops import evaluate

# A folded result is a param: held in memory at import, stored in the artifact. Results
# up to this size fold whatever their inputs; larger ones only when they are at most
# `_MAX_GROWTH` times their inputs (a dequantized int8 weight, a transposed one), so an
# Expand or a ConstantOfShape to a huge shape stays a node computed at run time.
MAX_GROWN_BYTES = 16 << 20
_MAX_GROWTH = 4


def worth_folding(inputs: Sequence[np.ndarray], outputs: Sequence[TensorType]) -> bool:
    """Whether a node with constant `inputs` should become params of its `outputs`."""
    made = sum(output.nbytes for output in outputs)
    return made <= max(MAX_GROWN_BYTES, _MAX_GROWTH * sum(array.nbytes for array in inputs))


def fold_constants(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Replace each node whose inputs are all params by params holding its results.

    An empty tensor (a dimension of 0) holds no data, so it is a constant whatever
    computes it: a node whose outputs are all empty becomes empty params, and an empty
    graph input counts as a constant operand (MatMul over K = 0 folds to zeros, a
    reduction over nothing to its identity). No kernel ever runs on an empty tensor.

    Pre: `params` holds an array for every param of `graph`.
    Post: no node reads only params but those `worth_folding` declines; each
    folded output keeps its name and type and becomes a param, so readers and graph
    outputs are unchanged; params nothing reads any more are dropped. The inputs are
    not modified; results are computed with the ops' reference implementations, so
    they are exactly what the interpreter would compute.
    """
    missing = [v.name for v in graph.params if v.name not in params]
    if missing:
        raise GraphError(
            f"fold_constants needs the arrays of every param; missing: {', '.join(missing)}"
        )
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    new_params: list[Value] = list(graph.params)
    kept: list[Node] = []
    for value in graph.inputs:
        if value.type.size == 0:
            arrays[value.name] = np.empty(value.shape, value.dtype)
    for node in graph.nodes:
        if all(value.type.size == 0 for value in node.outputs):
            results = tuple(np.empty(value.shape, value.dtype) for value in node.outputs)
        elif all(value.name in arrays for value in node.inputs) and worth_folding(
            [arrays[v.name] for v in node.inputs], [v.type for v in node.outputs]
        ):
            results = evaluate(node.op, [arrays[v.name] for v in node.inputs], node.attrs)
        else:
            kept.append(node)
            continue
        for value, result in zip(node.outputs, results, strict=True):
            # evaluate() already checked the result against the op's inferred type.
            assert TensorType.of(result) == value.type, (value, result.shape)
            # Results may be views of other params (reshape, transpose); a param of
            # its own, contiguous as GraphBuilder stores them, is safer to hand on.
            arrays[value.name] = np.asarray(result, order="C")  # keeps 0-d arrays 0-d
            new_params.append(value)
    folded = graph.replace(nodes=tuple(kept), params=tuple(new_params))
    return prune_params(folded, arrays)  # keeps params only: empty inputs stay inputs
