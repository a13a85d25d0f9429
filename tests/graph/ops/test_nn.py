"""dense, matmul, normalisations, softmax and LRN: references against ONNX Runtime
running the matching ONNX op (single-node models, no Ember frontend involved) or an
independent NumPy computation, MAC counts, and the type-inference errors a user sees."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import (
    F32,
    RNG,
    assert_close,
    channels_last,
    count_macs,
    random_array,
    run_onnx_node,
    spatial_axes,
    type_error,
)

from ember.graph.ir import TensorType
from ember.graph.ops import evaluate, get_op
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LrnAttrs,
)
from ember.graph.ops.registry import OpPattern
from ember.testing.oracle import RTOL

# -- dense / matmul --------------------------------------------------------------------


@pytest.mark.parametrize("x_shape", [(3, 5), (2, 3, 5), (5,)])
def test_dense_matches_onnxruntime_matmul(x_shape: tuple[int, ...]) -> None:
    x, w = random_array(*x_shape), random_array(4, 5)
    (ours,) = evaluate("dense", [x, w], get_op("dense").attrs_type())
    theirs = run_onnx_node("MatMul", {"x": x, "wt": np.ascontiguousarray(w.T)})
    assert_close(ours, theirs)
    types = [TensorType(x_shape, F32), TensorType((4, 5), F32)]
    assert count_macs("dense", types, get_op("dense").attrs_type()) == x.size // 5 * 4 * 5


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4,)),
        ((2, 3, 4), (4,)),
        ((4,), (3, 4, 2)),
    ],
)
def test_matmul_matches_onnxruntime(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = random_array(*a_shape), random_array(*b_shape)
    attrs = get_op("matmul").attrs_type()
    (ours,) = evaluate("matmul", [a, b], attrs)
    assert_close(ours, run_onnx_node("MatMul", {"a": a, "b": b}))
    # One multiply-accumulate per output element per inner index.
    types = [TensorType(a_shape, F32), TensorType(b_shape, F32)]
    assert count_macs("matmul", types, attrs) == ours.size * a_shape[-1]


def test_matmul_integer_and_errors() -> None:
    attrs = get_op("matmul").attrs_type()
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    (ours,) = evaluate("matmul", [a, a.T.copy()], attrs)
    assert ours.dtype == np.int64 and ours.tolist() == [[5, 14], [14, 50]]
    message = type_error("matmul", [TensorType((2, 3), F32), TensorType((4, 2), F32)], attrs)
    assert message == (
        "matmul: inner dimensions differ: float32[2, 3] has 3 columns, float32[4, 2] has 4 rows"
    )
    message = type_error("matmul", [TensorType((2, 2, 3), F32), TensorType((3, 3, 4), F32)], attrs)
    assert message == "shapes (2,), (3,) cannot be broadcast together"
    message = type_error("dense", [TensorType((2, 3), F32), TensorType((3, 2), F32)], attrs)
    assert message.startswith("dense: x float32[2, 3] and weight float32[3, 2] do not fit")


# -- normalisation ---------------------------------------------------------------------


def test_batch_norm_matches_onnxruntime() -> None:
    x = random_array(2, 3, 4, 5)
    scale, bias, mean = random_array(3), random_array(3), random_array(3)
    var = RNG.uniform(0.5, 2, 3).astype(np.float32)
    (ours,) = evaluate("batch_norm", [x, scale, bias, mean, var], BatchNormAttrs(1e-3))
    inputs = {"x": x, "s": scale, "b": bias, "m": mean, "v": var}
    assert_close(ours, run_onnx_node("BatchNormalization", inputs, opset=15, epsilon=1e-3))
    assert get_op("batch_norm").pattern is OpPattern.BROADCAST


def test_batch_norm_channels_last_and_errors() -> None:
    x = random_array(2, 4, 5, 3)
    vectors = [
        random_array(3),
        random_array(3),
        random_array(3),
        RNG.uniform(0.5, 2, 3).astype(np.float32),
    ]
    (last,) = evaluate("batch_norm", [x, *vectors], BatchNormAttrs(1e-5, axis=3))
    first_input = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    (first,) = evaluate("batch_norm", [first_input, *vectors], BatchNormAttrs(1e-5))
    assert_close(last, first.transpose(0, 2, 3, 1))
    types = [TensorType((2, 3, 4), F32)] + [TensorType((4,), F32)] * 4
    assert type_error("batch_norm", types, BatchNormAttrs(1e-5)) == (
        "batch_norm: scale is float32[4] but x float32[2, 3, 4] has 3 channels on axis 1; "
        "it must have shape (3,)"
    )


@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 2, 3, 4, 3)])
def test_instance_norm_matches_onnxruntime(shape: tuple[int, ...]) -> None:
    x, scale, bias = random_array(*shape), random_array(shape[1]), random_array(shape[1])
    spatial = spatial_axes(len(shape) - 2)
    layout = "NC" + spatial
    (ours,) = evaluate("instance_norm", [x, scale, bias], InstanceNormAttrs(1e-4, layout))
    theirs = run_onnx_node("InstanceNormalization", {"x": x, "s": scale, "b": bias}, epsilon=1e-4)
    assert_close(ours, theirs)
    # Channels-last gives the same numbers, transposed.
    last_attrs = InstanceNormAttrs(1e-4, "N" + spatial + "C")
    (last,) = evaluate("instance_norm", [channels_last(x), scale, bias], last_attrs)
    assert_close(last, channels_last(ours))


@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_layer_norm_matches_onnxruntime(axis: int) -> None:
    x = random_array(2, 3, 4, 5)
    normalised = x.shape[axis:]
    scale, bias = random_array(*normalised), random_array(*normalised)
    attrs = LayerNormAttrs(axis % x.ndim, 1e-5)
    (ours,) = evaluate("layer_norm", [x, scale, bias], attrs)
    theirs = run_onnx_node(
        "LayerNormalization", {"x": x, "s": scale, "b": bias}, opset=17, axis=axis
    )
    assert_close(ours, theirs)


def test_layer_norm_broadcast_scale_and_errors() -> None:
    x = random_array(2, 3, 4)
    scale, bias = random_array(4), random_array(1, 4)
    (ours,) = evaluate("layer_norm", [x, scale, bias], LayerNormAttrs(1, 1e-5))
    # Independent computation: normalise each x[n] over its 12 elements.
    flat = x.reshape(2, 12).astype(np.float64)
    normal = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    assert_close(ours, (normal.reshape(2, 3, 4) * scale + bias).astype(np.float32))
    types = [TensorType((2, 3, 4), F32), TensorType((3,), F32), TensorType((4,), F32)]
    assert type_error("layer_norm", types, LayerNormAttrs(1, 1e-5)) == (
        "layer_norm: scale float32[3] does not broadcast to the normalised axes (3, 4) of "
        "x float32[2, 3, 4] (axis 1)"
    )


def test_lrn_matches_onnxruntime() -> None:
    x = random_array(2, 7, 4, 3)
    for size in (1, 3, 5):
        attrs = LrnAttrs(size=size, alpha=1e-3, beta=0.6, bias=1.5)
        (ours,) = evaluate("lrn", [x], attrs)
        theirs = run_onnx_node("LRN", {"x": x}, size=size, alpha=1e-3, beta=0.6, bias=1.5)
        assert_close(ours, theirs)


def test_lrn_even_size_window_leans_forward() -> None:
    # ONNX Runtime only takes odd sizes; ONNX's window for size 4 is channels c-1..c+2.
    x = random_array(1, 6, 2, 2)
    (ours,) = evaluate("lrn", [x], LrnAttrs(size=4, alpha=0.5, beta=0.75, bias=2.0))
    expected = np.empty_like(x)
    for c in range(6):
        window = x[:, max(c - 1, 0) : c + 3].astype(np.float64)
        expected[:, c] = x[:, c] / (2.0 + 0.5 / 4 * (window**2).sum(axis=1)) ** 0.75
    assert_close(ours, expected)


def test_lrn_of_an_empty_tensor_is_empty_whatever_its_channel_count() -> None:
    # Found by atheris: 2**31 channels beside a dimension of 0 looped once per channel.
    x = np.empty((1, 2**31, 5, 0), dtype=np.float32)
    (ours,) = evaluate("lrn", [x], LrnAttrs(size=2**63 - 1, alpha=1e-4, beta=0.75, bias=1.0))
    assert ours.shape == x.shape and ours.dtype == np.float32


# -- softmax ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_matches_onnxruntime(op: str, axis: int) -> None:
    x = random_array(3, 4, 5) * 4
    (ours,) = evaluate(op, [x], AxisAttrs(axis))
    onnx_op = "Softmax" if op == "softmax" else "LogSoftmax"
    assert_close(ours, run_onnx_node(onnx_op, {"x": x}, opset=13, axis=axis))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0)])
def test_softmax_of_an_empty_tensor_is_empty(op: str, shape: tuple[int, int]) -> None:
    (out,) = evaluate(op, [np.zeros(shape, np.float32)], AxisAttrs(1))
    assert out.shape == shape and out.dtype == np.float32


def test_softmax_is_stable_for_large_inputs() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1e4, 0.0, 1e4]], dtype=np.float32)
    (soft,) = evaluate("softmax", [x], AxisAttrs(1))
    (log_soft,) = evaluate("log_softmax", [x], AxisAttrs(1))
    assert np.isfinite(soft).all() and np.isfinite(log_soft).all()
    expected = np.exp([-1.0, 0.0, -2.0]) / np.exp([-1.0, 0.0, -2.0]).sum()
    np.testing.assert_allclose(soft[0], expected, rtol=RTOL)
    np.testing.assert_allclose(log_soft[1], [-2e4, -1e4, 0.0], rtol=RTOL)
    assert type_error("softmax", [TensorType((2, 3), F32)], AxisAttrs(2)) == (
        "softmax: axis 2 is out of range for float32[2, 3] (0..1)"
    )
