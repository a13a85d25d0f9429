"""Reductions, argmax/argmin and topk: references against independent computations
(Python loops, math.fsum, np.linalg.norm), type inference and error messages."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from onnx_node_runner import F32, type_error

from ember.graph.ir import TensorType
from ember.graph.ops import OpPattern, evaluate, get_op
from ember.graph.ops.attrs import ArgReduceAttrs, ReduceAttrs, TopKAttrs
from ember.testing.oracle import ATOL, RTOL

RNG = np.random.default_rng(1)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _rows(x: np.ndarray) -> list[list[float]]:
    """The lists a reduction over axes (0, 2) of a rank-3 array sees, one per axis-1 index."""
    return [[float(x[i, j, k]) for i in range(x.shape[0]) for k in range(x.shape[2])]
            for j in range(x.shape[1])]  # fmt: skip


# Each reduce_* op as a function of a plain Python list of floats.
BY_HAND = {
    "reduce_sum": math.fsum,
    "reduce_mean": lambda v: math.fsum(v) / len(v),
    "reduce_max": max,
    "reduce_min": min,
    "reduce_prod": math.prod,
    "reduce_sum_square": lambda v: math.fsum(t * t for t in v),
    "reduce_l1": lambda v: math.fsum(abs(t) for t in v),
    "reduce_l2": lambda v: math.sqrt(math.fsum(t * t for t in v)),
    "reduce_log_sum_exp": lambda v: math.log(math.fsum(math.exp(t) for t in v)),
}


@pytest.mark.parametrize("name", sorted(BY_HAND))
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce_over_two_axes_matches_python(name: str, keepdims: bool) -> None:
    x = _random(2, 3, 4)
    (out,) = evaluate(name, [x], ReduceAttrs(axes=(0, 2), keepdims=keepdims))
    assert out.shape == ((1, 3, 1) if keepdims else (3,))
    assert out.dtype == np.float32
    expected = np.array([BY_HAND[name](row) for row in _rows(x)], dtype=np.float32)
    np.testing.assert_allclose(out.reshape(3), expected, rtol=RTOL, atol=ATOL)


def test_empty_axes_reduce_everything() -> None:
    x = _random(2, 3)
    (kept,) = evaluate("reduce_sum", [x], ReduceAttrs(axes=()))
    (dropped,) = evaluate("reduce_sum", [x], ReduceAttrs(axes=(), keepdims=False))
    assert kept.shape == (1, 1) and dropped.shape == ()
    assert math.isclose(float(dropped), math.fsum(x.flatten().tolist()), rel_tol=1e-6)


def test_float32_sum_is_rounded_once() -> None:
    # 1 + 2^-24 repeated: a float32 running sum loses every small term, the exact sum does not.
    x = np.array([1.0] + [2.0**-24] * 8, dtype=np.float32)
    (out,) = evaluate("reduce_sum", [x], ReduceAttrs(axes=(0,), keepdims=False))
    assert out == np.float32(1.0 + 8 * 2.0**-24)


def test_log_sum_exp_does_not_overflow() -> None:
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], dtype=np.float32)
    (out,) = evaluate("reduce_log_sum_exp", [x], ReduceAttrs(axes=(1,), keepdims=False))
    assert out[0] == pytest.approx(1000.0 + math.log(2.0))
    assert out[1] == -np.inf


def test_log_sum_exp_of_integers_computes_in_floating_point() -> None:
    # log(e^1 + e^2 + e^3) = 3.4076..., truncated to the input's integer type.
    x = np.array([[1, 2, 3], [10, 10, 10]], dtype=np.int32)
    (out,) = evaluate("reduce_log_sum_exp", [x], ReduceAttrs(axes=(1,), keepdims=False))
    assert out.dtype == np.int32 and out.tolist() == [3, 11]


def test_max_and_min_of_an_empty_axis_are_the_identities() -> None:
    x = np.zeros((2, 0), dtype=np.int32)
    (largest,) = evaluate("reduce_max", [x], ReduceAttrs(axes=(1,), keepdims=False))
    (smallest,) = evaluate("reduce_min", [x.astype(np.float32)], ReduceAttrs(axes=(1,)))
    assert largest.tolist() == [np.iinfo(np.int32).min] * 2
    assert smallest.tolist() == [[np.inf]] * 2


def test_integer_sum_keeps_its_dtype() -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    (out,) = evaluate("reduce_sum", [x], ReduceAttrs(axes=(0,), keepdims=False))
    assert out.dtype == np.int64 and out.tolist() == [12, 15, 18, 21]


def test_reduce_errors() -> None:
    data = TensorType((2, 3), F32)
    message = type_error("reduce_sum", [data], ReduceAttrs(axes=(2,)))
    assert message.startswith("reduce_sum: axis 2 is out of range for a rank-2 tensor")
    assert "repeat an axis" in type_error("reduce_mean", [data], ReduceAttrs(axes=(1, 1)))


# -- argmax / argmin -------------------------------------------------------------


def test_argmax_argmin_first_and_last_index() -> None:
    x = np.array([[1, 5, 5, 0], [2, 2, -1, -1]], dtype=np.float32)
    cases = {
        ("argmax", False): [1, 0],
        ("argmax", True): [2, 1],
        ("argmin", False): [3, 2],
        ("argmin", True): [3, 3],
    }
    for (name, last), expected in cases.items():
        (out,) = evaluate(name, [x], ArgReduceAttrs(axis=1, select_last_index=last))
        assert out.dtype == np.int64 and out.shape == (2, 1)
        assert out.reshape(2).tolist() == expected, (name, last)


def test_argmax_drops_axis_without_keepdims() -> None:
    x = _random(3, 4, 5)
    (out,) = evaluate("argmax", [x], ArgReduceAttrs(axis=1, keepdims=False))
    assert out.shape == (3, 5)
    for i, k in itertools.product(range(3), range(5)):
        column = [x[i, j, k] for j in range(4)]
        assert out[i, k] == column.index(max(column))


def test_argmax_errors() -> None:
    message = type_error("argmax", [TensorType((2, 0), F32)], ArgReduceAttrs(axis=1))
    assert message == "argmax: axis 1 of float32[2, 0] is empty; nothing to pick"
    assert "out of range" in type_error("argmin", [TensorType((2,), F32)], ArgReduceAttrs(axis=1))


# -- topk ------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties_prefer_the_lower_index(largest: bool) -> None:
    x = np.array([[3, 1, 3, 2, 1], [0, 0, 0, 0, 0]], dtype=np.int32)
    values, indices = evaluate("topk", [x], TopKAttrs(k=3, axis=1, largest=largest))
    assert values.dtype == np.int32 and indices.dtype == np.int64
    if largest:
        assert values.tolist() == [[3, 3, 2], [0, 0, 0]]
        assert indices.tolist() == [[0, 2, 3], [0, 1, 2]]
    else:
        assert values.tolist() == [[1, 1, 2], [0, 0, 0]]
        assert indices.tolist() == [[1, 4, 3], [0, 1, 2]]


def test_topk_on_a_leading_axis_of_extreme_integers() -> None:
    low = np.iinfo(np.int64).min
    x = np.array([[low, 7], [5, low], [low, 7]], dtype=np.int64)
    values, indices = evaluate("topk", [x], TopKAttrs(k=2, axis=0))
    assert values.tolist() == [[5, 7], [low, 7]]
    assert indices.tolist() == [[1, 0], [0, 2]]


def test_topk_errors_and_pattern() -> None:
    message = type_error("topk", [TensorType((2, 3), F32)], TopKAttrs(k=4, axis=1))
    assert message == "topk: k=4 must be in 0..3 for axis 1 of float32[2, 3]"
    assert get_op("topk").pattern == OpPattern.OPAQUE
    assert get_op("reduce_l2").pattern == OpPattern.REDUCTION
    assert get_op("argmin").pattern == OpPattern.REDUCTION


def test_reduction_cost_counts_input_elements() -> None:
    opdef = get_op("reduce_mean")
    assert opdef.macs([TensorType((4, 5), F32)], [TensorType((4, 1), F32)], None) == 20
