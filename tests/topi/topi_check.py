"""Shared check of the compute-declaration tests: an op's ComputeDAG, evaluated with
NumPy by `evaluate_dag`, equals the op's graph reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.graph.ir import Attrs, NoAttrs, TensorType
from ember.graph.ops import evaluate, infer_types
from ember.te import ComputeDAG, placeholder
from ember.te.evaluate import evaluate_dag
from ember.topi import declare

RTOL = 1e-4
ATOL = 1e-5


def op_dag(op: str, inputs: Sequence[np.ndarray], attrs: Attrs) -> ComputeDAG:
    """The ComputeDAG of one graph op on placeholders shaped like `inputs`."""
    types = [TensorType.of(np.asarray(a)) for a in inputs]
    placeholders = [placeholder(t.shape, t.dtype) for t in types]
    outputs = declare(op, placeholders, attrs, infer_types(op, types, attrs))
    return ComputeDAG(outputs, placeholders)


def run_check(
    op: str,
    inputs: Sequence[np.ndarray],
    attrs: Attrs | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> ComputeDAG:
    """Assert the DAG of `op` computes what its reference does; returns the DAG."""
    attrs = attrs if attrs is not None else NoAttrs()
    dag = op_dag(op, inputs, attrs)
    got = evaluate_dag(dag, inputs)
    want = evaluate(op, inputs, attrs)
    assert len(got) == len(want)
    for k, (actual, expected) in enumerate(zip(got, want, strict=True)):
        message = f"{op} output {k}\n{dag}"
        assert actual.shape == expected.shape, message
        assert actual.dtype == expected.dtype, message
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=message)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=message)
    return dag


def random(shape: Sequence[int], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    """Standard-normal floats, small integers, or random bools."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(np.dtype(dtype), np.integer):
        low = 0 if dtype.startswith("uint") else -9
        return rng.integers(low, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
