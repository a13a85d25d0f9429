"""The NumPy evaluator of compute DAGs: the oracle's own semantics."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import EmberError
from ember.te import (
    ComputeDAG,
    call,
    compute,
    logical_and,
    placeholder,
    reduce_axis,
    reduce_max,
    reduce_sum,
    select,
)
from ember.te.evaluate import evaluate_dag, evaluate_stages
from ember.te.expr import MATH_FUNCTIONS


def _conv_like() -> tuple[ComputeDAG, list[np.ndarray]]:
    data = placeholder((2, 9, 7))
    weight = placeholder((3, 7, 5))
    padded = compute(
        (2, 11, 7),
        lambda n, h, c: select(logical_and(h >= 1, h < 10), data[n, h - 1, c], 0.0),
        name="padded",
    )
    r, rc = reduce_axis(3, "r"), reduce_axis(7, "rc")
    out = compute(
        (2, 9, 5),
        lambda n, h, f: reduce_sum(padded[n, h + r, rc] * weight[r, rc, f], [r, rc]),
        name="out",
    )
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape).astype("float32") for t in (data, weight)]
    return ComputeDAG([out], [data, weight]), arrays


def _numpy_conv(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    padded = np.pad(data.astype(np.float64), [(0, 0), (1, 1), (0, 0)])
    windows = np.stack([padded[:, r : r + 9] for r in range(3)], axis=2)  # (n, h, r, c)
    return np.einsum("nhrc,rcf->nhf", windows, weight.astype(np.float64)).astype("float32")


def test_reduction_with_guarded_padding_matches_numpy() -> None:
    dag, arrays = _conv_like()
    (result,) = evaluate_dag(dag, arrays)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, _numpy_conv(*arrays), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("block", [1, 5, 21, 64, 10**9])
def test_blocked_evaluation_is_exact(block: int) -> None:
    # Small blocks split spatial axes and, below one output row, reduce axes.
    dag, arrays = _conv_like()
    (whole,) = evaluate_dag(dag, arrays)
    (blocked,) = evaluate_dag(dag, arrays, block_elements=block)
    np.testing.assert_allclose(blocked, whole, rtol=1e-6, atol=1e-7)


def test_sums_accumulate_in_float64_and_round_once() -> None:
    x = placeholder((4,))
    k = reduce_axis(4, "k")
    total = compute((), lambda: reduce_sum(x[k], k), name="total")
    values = np.array([1e8, 1.0, -1e8, 1.0], dtype="float32")
    (result,) = evaluate_dag(ComputeDAG([total], [x]), [values], block_elements=2)
    assert result.dtype == np.float32 and result == 2.0  # a float32 running sum gives 1


def test_an_unguarded_out_of_bounds_read_is_reported() -> None:
    x = placeholder((5,))
    shifted = compute((5,), lambda i: x[i + 1], name="shifted")
    with pytest.raises(IndexError, match=r"index 5 of dimension 0 \(extent 5\) of placeholder"):
        evaluate_dag(ComputeDAG([shifted], [x]), [np.arange(5, dtype="float32")])


def test_select_reads_only_on_the_lanes_it_takes() -> None:
    x = placeholder((5,))
    # The inner select's false branch reads x[i + 1] only where i < 4 does not hold...
    shifted = compute(
        (5,),
        lambda i: select(i < 4, select(i >= 0, x[i + 1], x[i + 7]), x[i - 4]),
        name="shifted",
    )
    (result,) = evaluate_dag(ComputeDAG([shifted], [x]), [np.arange(5, dtype="float32")])
    np.testing.assert_array_equal(result, [1, 2, 3, 4, 0])


def test_integer_division_truncates_and_floor_ops_floor() -> None:
    a, b = placeholder((4,), "int32"), placeholder((4,), "int32")
    out = [
        compute((4,), lambda i: a[i] / b[i], name="div"),
        compute((4,), lambda i: a[i] // b[i], name="floordiv"),
        compute((4,), lambda i: a[i] % b[i], name="floormod"),
    ]
    left, right = np.array([7, -7, 7, -7], "int32"), np.array([2, 2, -2, -2], "int32")
    div, floordiv, floormod = evaluate_dag(ComputeDAG(out, [a, b]), [left, right])
    np.testing.assert_array_equal(div, [3, -3, -3, 3])
    np.testing.assert_array_equal(floordiv, [3, -4, -4, 3])
    np.testing.assert_array_equal(floormod, [1, 1, -1, -1])
    assert div.dtype == np.int32


def test_empty_reductions_give_the_identity() -> None:
    x = placeholder((3, 0))
    k = reduce_axis(0, "k")
    stages = [
        compute((3,), lambda i: reduce_sum(x[i, k], k), name="sum"),
        compute((3,), lambda i: reduce_max(x[i, k], k), name="max"),
    ]
    total, largest = evaluate_dag(ComputeDAG(stages, [x]), [np.zeros((3, 0), "float32")])
    np.testing.assert_array_equal(total, [0, 0, 0])
    np.testing.assert_array_equal(largest, [-np.inf] * 3)


def test_every_math_function_evaluates() -> None:
    x = placeholder((3,))
    stages = [
        compute((3,), lambda i, n=name, a=arity: call(n, *([x[i]] * a)), name=name)
        for name, arity in MATH_FUNCTIONS.items()
    ]
    values = np.array([0.25, 0.5, 1.5], "float32")
    results = evaluate_dag(ComputeDAG(stages, [x]), [values])
    expected = {"exp": np.exp(values), "tanh": np.tanh(values), "pow": values**values}
    expected["sigmoid"] = 1 / (1 + np.exp(-values))
    expected["round"] = np.round(values)
    for name, result in zip(MATH_FUNCTIONS, results, strict=True):
        assert result.dtype == np.float32, name
        if name in expected:
            np.testing.assert_allclose(result, expected[name], rtol=1e-6, err_msg=name)


def test_stages_are_all_available() -> None:
    dag, arrays = _conv_like()
    values = evaluate_stages(dag, arrays)
    assert [t.name for t in values] == ["placeholder", "padded", "placeholder", "out"]
    padded = next(array for t, array in values.items() if t.name == "padded")
    np.testing.assert_array_equal(padded[:, 1:10], arrays[0])


def test_inputs_are_checked_against_the_placeholders() -> None:
    dag, arrays = _conv_like()
    with pytest.raises(EmberError, match="takes 2 inputs, got 1"):
        evaluate_dag(dag, arrays[:1])
    with pytest.raises(EmberError, match=r"must be float32\[3, 7, 5\], got float64"):
        evaluate_dag(dag, [arrays[0], arrays[1].astype("float64")])


def test_a_reduction_inside_an_expression_is_rejected() -> None:
    x = placeholder((3, 4))
    k = reduce_axis(4, "k")
    bad = compute((3,), lambda i: reduce_sum(x[i, k], k) + 1.0, name="bad")
    with pytest.raises(ValueError, match="whole body"):
        evaluate_dag(ComputeDAG([bad], [x]), [np.zeros((3, 4), "float32")])
