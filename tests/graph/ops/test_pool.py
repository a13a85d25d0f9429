"""max_pool, avg_pool and the global pools: references against ONNX Runtime's pools
(ceil mode, count_include_pad, dilations, asymmetric padding, 1-d to 3-d), channels-last
against channels-first, costs, and the type-inference errors a user sees."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import (
    F32,
    assert_close,
    channels_last,
    count_macs,
    random_array,
    run_onnx_node,
    spatial_axes,
    type_error,
)

from ember.graph.ir import TensorType
from ember.graph.ops import evaluate
from ember.graph.ops.attrs import LayoutAttrs, PoolAttrs

POOL_CASES = [
    # data shape, kernel, strides, padding (begins, ends), dilations, ceil_mode
    ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((2, 3, 8, 9), (3, 2), (2, 3), (0, 1, 1, 0), (1, 1), True),  # asymmetric, ceil
    ((1, 2, 6, 6), (2, 2), (2, 2), (1, 1, 1, 1), (1, 1), True),  # a window would start in the pad
    ((1, 2, 9, 10), (2, 3), (1, 2), (1, 0, 0, 2), (2, 2), False),  # dilated
    ((1, 2, 10, 10), (3, 3), (3, 3), (0, 0, 0, 0), (1, 2), True),  # dilated, ceil
    ((2, 3, 11), (4,), (3,), (2, 1), (1,), True),  # 1-d
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 2, 3), (1, 0, 1, 0, 1, 0), (1, 1, 1), True),  # 3-d
    ((1, 1, 5, 5), (2, 2), (4, 4), (0, 0, 0, 0), (1, 1), False),  # stride past the kernel
]


def _layout(rank: int) -> str:
    return "NC" + spatial_axes(rank)


def _check_pool(op: str, onnx_op: str, x: np.ndarray, attrs: PoolAttrs, **onnx_only: int) -> None:
    """Compare `op` with ONNX Runtime's `onnx_op` under the same attributes."""
    (ours,) = evaluate(op, [x], attrs)
    theirs = run_onnx_node(
        onnx_op,
        {"x": x},
        kernel_shape=attrs.kernel,
        strides=attrs.strides,
        pads=attrs.padding,
        dilations=attrs.dilations,
        ceil_mode=int(attrs.ceil_mode),
        **onnx_only,
    )
    assert_close(ours, theirs)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "padding", "dilations", "ceil_mode"), POOL_CASES
)
def test_avg_pool_matches_onnxruntime(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
) -> None:
    layout = _layout(len(kernel))
    attrs = PoolAttrs(kernel, strides, padding, dilations, ceil_mode, count_include_pad, layout)
    x = random_array(*shape)
    _check_pool("avg_pool", "AveragePool", x, attrs, count_include_pad=int(count_include_pad))


@pytest.mark.parametrize(
    ("shape", "kernel", "strides", "padding", "dilations", "ceil_mode"), POOL_CASES
)
def test_max_pool_matches_onnxruntime(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    ceil_mode: bool,
) -> None:
    attrs = PoolAttrs(kernel, strides, padding, dilations, ceil_mode, layout=_layout(len(kernel)))
    _check_pool("max_pool", "MaxPool", random_array(*shape), attrs)


def test_max_pool_on_integers_pads_with_the_lowest_value() -> None:
    x = np.random.default_rng(3).integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    attrs = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    (ours,) = evaluate("max_pool", [x], attrs)
    theirs = run_onnx_node("MaxPool", {"x": x}, kernel_shape=(3, 3), strides=(2, 2), pads=(1,) * 4)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("op", ["max_pool", "avg_pool"])
@pytest.mark.parametrize("case", [1, 5, 6])
def test_pool_channels_last_equals_channels_first(op: str, case: int) -> None:
    shape, kernel, strides, padding, dilations, ceil_mode = POOL_CASES[case]
    rank = len(kernel)
    x = random_array(*shape)
    first = PoolAttrs(kernel, strides, padding, dilations, ceil_mode, True, _layout(rank))
    last = PoolAttrs(
        kernel, strides, padding, dilations, ceil_mode, True, "N" + spatial_axes(rank) + "C"
    )
    (expected,) = evaluate(op, [x], first)
    (ours,) = evaluate(op, [channels_last(x)], last)
    assert_close(ours, channels_last(expected))


def test_pool_cost_and_errors() -> None:
    attrs = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    # ResNet's stem pool: 64 x 56 x 56 outputs, 9 taps each.
    assert count_macs("max_pool", [TensorType((1, 64, 112, 112), F32)], attrs) == 64 * 56 * 56 * 9
    assert type_error("avg_pool", [TensorType((1, 2, 4, 4), "int32")], attrs) == (
        "avg_pool: unsupported dtype int32; use one of float16, float32, float64"
    )
    assert type_error("max_pool", [TensorType((1, 2, 4), F32)], attrs) == (
        "max_pool: data of rank 3 does not match layout 'NCHW' (4 axes)"
    )
    one_d = PoolAttrs((3,), (1,), (0, 0), (1,), layout="NCW")
    assert type_error("max_pool", [TensorType((1, 2, 2), F32)], one_d) == (
        "max_pool: a kernel of 3 with dilation 1 does not fit in a spatial axis of 2 padded "
        "by (0, 0); use a smaller kernel or more padding"
    )
    bad_kernel = PoolAttrs((3,), (1, 1), (0, 0, 0, 0), (1, 1))
    assert type_error("max_pool", [TensorType((1, 2, 4, 4), F32)], bad_kernel) == (
        "max_pool: kernel (3,) needs 2 positive entries for layout 'NCHW'"
    )


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 5), (1, 2, 3, 4, 2)])
def test_global_pools_match_onnxruntime(shape: tuple[int, ...]) -> None:
    x = random_array(*shape)
    layout = _layout(len(shape) - 2)
    for op, onnx_op in (
        ("global_avg_pool", "GlobalAveragePool"),
        ("global_max_pool", "GlobalMaxPool"),
    ):
        (ours,) = evaluate(op, [x], LayoutAttrs(layout))
        assert_close(ours, run_onnx_node(onnx_op, {"x": x}))


def test_global_pool_channels_last() -> None:
    x = random_array(2, 5, 6, 3)
    (ours,) = evaluate("global_avg_pool", [x], LayoutAttrs("NHWC"))
    assert ours.shape == (2, 1, 1, 3)
    expected = x.astype(np.float64).mean(axis=(1, 2), keepdims=True).astype(np.float32)
    assert_close(ours, expected)
    assert count_macs("global_avg_pool", [TensorType(x.shape, F32)], LayoutAttrs("NHWC")) == x.size
    assert type_error("global_max_pool", [TensorType((2, 3), F32)], LayoutAttrs("NC")) == (
        "global_max_pool: unsupported data layout 'NC'; use a channels-first layout (NCW, "
        "NCHW, NCDHW) or a channels-last one (NWC, NHWC, NDHWC)"
    )
