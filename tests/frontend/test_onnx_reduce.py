"""ONNX reduction, ArgMax/ArgMin and TopK converters against ONNX Runtime, across opsets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_models import check_one_node, onnx_model

from ember.errors import UnsupportedOperatorError
from ember.frontend import from_onnx

RNG = np.random.default_rng(3)

REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceLogSum",
]


def _positive(*shape: int) -> np.ndarray:
    # Positive values keep ReduceLogSum defined and ReduceProd away from cancellation.
    return RNG.uniform(0.5, 1.5, shape).astype(np.float32)


def _check(
    op_type: str,
    x: np.ndarray,
    opset: int,
    axes: list[int] | None = None,
    outputs: int = 1,
    **attributes: object,
) -> dict[str, np.ndarray]:
    """One node on graph input `x`; `axes` goes in the form the opset expects."""
    constants: dict[str, np.ndarray] = {}
    axes_is_input = opset >= (13 if op_type == "ReduceSum" else 18)
    if axes is not None and axes_is_input:
        constants["axes"] = np.array(axes, dtype=np.int64)
    elif axes is not None:
        attributes["axes"] = axes
    return check_one_node(op_type, x, opset, constants, outputs, **attributes)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_ops_with_axes_and_keepdims(op_type: str, opset: int) -> None:
    x = _positive(2, 3, 4)
    _check(op_type, x, opset, axes=[0, -1])
    _check(op_type, x, opset, axes=[1], keepdims=0)
    _check(op_type, x, opset)  # no axes: everything


@pytest.mark.parametrize("opset", [11, 13])
def test_reduce_sum_axes_attribute_then_input(opset: int) -> None:
    _check("ReduceSum", _positive(3, 4), opset, axes=[-1], keepdims=0)


@pytest.mark.parametrize(("op_type", "opset"), [("ReduceSum", 13), ("ReduceMean", 18)])
def test_noop_with_empty_axes_passes_the_input_through(op_type: str, opset: int) -> None:
    x = _positive(2, 3)
    outputs = _check(op_type, x, opset, noop_with_empty_axes=1)
    np.testing.assert_array_equal(outputs["y0"], x)
    _check(op_type, x, opset, axes=[], noop_with_empty_axes=0)  # empty list: all axes


def test_reduce_sum_of_integers() -> None:
    x = RNG.integers(-50, 50, (3, 4)).astype(np.int64)
    _check("ReduceSum", x, 13, axes=[0])


def test_reduce_axes_input_must_be_constant() -> None:
    x = _positive(2, 3)
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    inputs = {"x": x, "axes": np.array([0], dtype=np.int64)}
    model = onnx_model([node], inputs, {"y": (TensorProto.FLOAT, (1, 3))}, 13)
    with pytest.raises(UnsupportedOperatorError, match=r"input #1 \(axes\) must be a constant"):
        from_onnx(model)


# -- argmax / argmin -------------------------------------------------------------

TIES = np.array([[1, 4, 4, 0], [2, 0, 0, 2], [3, 3, 3, 3]], dtype=np.float32)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce_ties(op_type: str, last: int) -> None:
    _check(op_type, TIES, 13, axis=-1, select_last_index=last)
    _check(op_type, TIES, 13, axis=0, keepdims=0, select_last_index=last)


def test_argmax_defaults_opset_11() -> None:
    _check("ArgMax", RNG.standard_normal((3, 4)).astype(np.float32), 11)


# -- topk ------------------------------------------------------------------------


def _topk(x: np.ndarray, opset: int, k: int, **attributes: object) -> None:
    if opset < 10:
        check_one_node("TopK", x, opset, outputs=2, k=k, **attributes)
    else:
        k_input = {"k": np.array([k], dtype=np.int64)}
        check_one_node("TopK", x, opset, k_input, outputs=2, **attributes)


def test_topk_attribute_k_opset_9() -> None:
    _topk(RNG.standard_normal((3, 5)).astype(np.float32), 9, 2)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_and_axis_opset_11(largest: int) -> None:
    _topk(TIES, 11, 3, axis=1, largest=largest)
    _topk(TIES, 11, 2, axis=0, largest=largest)
