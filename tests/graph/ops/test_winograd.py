"""winograd_input, a batch product with the transformed weight, and winograd_output
compose to a 3x3 conv (and to ONNX Runtime's Conv); type-inference errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import F32, run_onnx_node, type_error

from ember.errors import ShapeError
from ember.graph.ir import TensorType
from ember.graph.ops import evaluate, infer_types
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.winograd import (
    WinogradInputAttrs,
    WinogradOutputAttrs,
    transform_weight,
    transforms,
)


def winograd_conv(x: np.ndarray, weight: np.ndarray, padding, tile: int) -> np.ndarray:
    (transformed,) = evaluate("winograd_input", [x], WinogradInputAttrs(tile, padding))
    product = np.matmul(transformed, transform_weight(weight, tile))
    (conv,) = evaluate("conv", [x, weight], ConvAttrs((1, 1), padding, (1, 1), 1, "NHWC", "HWIO"))
    height, width = conv.shape[1:3]
    (y,) = evaluate("winograd_output", [product], WinogradOutputAttrs(tile, height, width))
    return y


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize(
    ("shape", "padding"),
    [((1, 8, 8, 4), (1, 1, 1, 1)), ((2, 7, 9, 3), (1, 1, 1, 1)), ((1, 5, 6, 2), (2, 0, 1, 2))],
    ids=["whole-tiles", "odd", "asymmetric"],
)
def test_transforms_compute_the_conv(tile: int, shape, padding) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(F32)
    weight = rng.standard_normal((3, 3, shape[3], 5)).astype(F32)
    got = winograd_conv(x, weight, padding, tile)
    top, left, bottom, right = padding
    onnx_conv = run_onnx_node(
        "Conv",
        {"x": x.transpose(0, 3, 1, 2), "w": weight.transpose(3, 2, 0, 1)},
        pads=[top, left, bottom, right],
    ).transpose(0, 2, 3, 1)
    assert got.shape == onnx_conv.shape and got.dtype == F32
    # fp32 rounding of the transformed input and weight (F(4x4)'s constants reach 5
    # and 1/24): relative to the output's scale, as a few ulps of the sums' terms.
    scale = np.abs(onnx_conv).max()
    tolerance = 2e-6 if tile == 2 else 2e-5
    np.testing.assert_allclose(got / scale, onnx_conv / scale, rtol=0, atol=tolerance)


def test_shapes() -> None:
    x = TensorType((2, 7, 9, 3), F32)
    (v,) = infer_types("winograd_input", [x], WinogradInputAttrs(2, (1, 1, 1, 1)))
    assert v == TensorType((16, 2 * 4 * 5, 3), F32)  # 7x9 output: 4 x 5 tiles of 2
    (y,) = infer_types("winograd_output", [v], WinogradOutputAttrs(2, 7, 9))
    assert y == TensorType((2, 7, 9, 3), F32)
    assert transforms(4).points == 6


def test_errors_name_what_is_wrong() -> None:
    attrs = WinogradInputAttrs(2, (1, 1, 1, 1))
    assert "NHWC" in type_error("winograd_input", [TensorType((2, 7, 9), F32)], attrs)
    assert "smaller than 3x3" in type_error(
        "winograd_input", [TensorType((1, 1, 1, 3), F32)], WinogradInputAttrs(2, (0, 0, 0, 0))
    )
    assert "not supported" in type_error(
        "winograd_input", [TensorType((1, 8, 8, 3), F32)], WinogradInputAttrs(3, (1, 1, 1, 1))
    )
    message = type_error(
        "winograd_output", [TensorType((16, 7, 3), F32)], WinogradOutputAttrs(2, 4, 4)
    )
    assert "[16, N * 4 tiles, K]" in message
    with pytest.raises(ShapeError, match="HWIO"):
        transform_weight(np.zeros((1, 1, 3, 3), F32), 2)
