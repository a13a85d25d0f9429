"""TFLite converters for the neural-network operators: convolutions, fully connected,
pooling, softmax, resizing, batched matrix products.

TFLite data is NHWC and stays so (no transposes in or out): convolutions are emitted
with the NHWC layout and HWIO kernels (the model's OHWI weights transposed once, at
import), pools with NHWC.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.frontend.tflite.registry import TFLiteNode, converter, unsupported
from ember.graph.ir import Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    ConvAttrs,
    PoolAttrs,
    ResizeAttrs,
    TransposeAttrs,
)
from ember.graph.ops.window import dilated_extent

_SAME, _VALID = 0, 1  # schema Padding


def window_padding(
    node: TFLiteNode,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, ...]:
    """(begins..., ends...) for the schema's padding: VALID none; SAME the output length
    ceil(size / stride), the odd element of the padding at the end."""
    mode = int(node.option("Padding", _SAME))  # type: ignore[call-overload]
    if mode == _VALID:
        return (0,) * (2 * len(sizes))
    if mode != _SAME:
        raise unsupported(node, f"padding mode #{mode}")
    begins, ends = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
        out = math.ceil(size / stride)
        total = max(0, (out - 1) * stride + dilated_extent(k, dilation) - size)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return (*begins, *ends)


def _add_bias(node: TFLiteNode, out: Value, index: int) -> Value:
    """out + bias over the last (channel) axis, where NHWC broadcasting puts it."""
    bias = node.optional_input(index)
    return out if bias is None else node.add("add", [out, bias], suffix="bias")


def _hwio(node: TFLiteNode, weight: Value, permutation: tuple[int, ...]) -> Value:
    # Folded at import for a constant weight (the builder folds constants).
    return node.add("transpose", [weight], TransposeAttrs(permutation), "hwio")


def _conv_attrs(node: TFLiteNode, data: Value, kernel: tuple[int, ...], groups: int) -> ConvAttrs:
    """An NHWC / HWIO conv with the options' strides, dilations and padding."""
    strides = (int(node.option("StrideH", 1)), int(node.option("StrideW", 1)))  # type: ignore[call-overload]
    dilations = (int(node.option("DilationHFactor", 1)), int(node.option("DilationWFactor", 1)))  # type: ignore[call-overload]
    return ConvAttrs(
        strides=strides,
        padding=window_padding(node, data.shape[1:3], kernel, strides, dilations),
        dilations=dilations,
        groups=groups,
        layout="NHWC",
        kernel_layout="HWIO",
    )


@converter("CONV_2D")
def convert_conv(node: TFLiteNode) -> list[Value]:
    """inputs (NHWC data, OHWI filter, bias?)."""
    data, weight = node.input(0), node.input(1)
    groups = data.shape[3] // weight.shape[3]  # grouped convolutions: I = C / groups
    attrs = _conv_attrs(node, data, tuple(weight.shape[1:3]), groups)
    out = node.add("conv", [data, _hwio(node, weight, (1, 2, 3, 0))], attrs)
    return [node.activation(_add_bias(node, out, 2))]


@converter("DEPTHWISE_CONV_2D")
def convert_depthwise_conv(node: TFLiteNode) -> list[Value]:
    """inputs (NHWC data, [1, KH, KW, C * multiplier] filter, bias?): a convolution with
    one group per input channel; the filter is already HWIO with I = 1 but for the
    leading 1."""
    data, weight = node.input(0), node.input(1)
    channels = data.shape[3]
    kernel = tuple(weight.shape[1:3])
    if weight.shape[0] != 1 or weight.shape[3] % channels:
        raise unsupported(node, f"filter {weight.type} for {channels} input channels")
    attrs = _conv_attrs(node, data, kernel, channels)
    hwio = node.reshape(weight, (*kernel, 1, weight.shape[3]), "hwio")
    out = node.add("conv", [data, hwio], attrs)
    return [node.activation(_add_bias(node, out, 2))]


@converter("FULLY_CONNECTED")
def convert_fully_connected(node: TFLiteNode) -> list[Value]:
    """inputs (data, [O, I] weights, bias?): every row of I input values through the
    weights (already stored as `dense` wants them); keep_num_dims keeps the leading
    axes, else the output is 2-D."""
    data, weight = node.input(0), node.input(1)
    rows = data.type.size // weight.shape[1]
    flat = node.reshape(data, (rows, weight.shape[1]), "rows")
    out = _add_bias(node, node.add("dense", [flat, weight]), 2)
    return [node.reshape(node.activation(out), node.output_shape, "shape")]


def _pool(node: TFLiteNode, op: str) -> list[Value]:
    data = node.input(0)
    kernel = (int(node.option("FilterHeight")), int(node.option("FilterWidth")))  # type: ignore[call-overload]
    strides = (int(node.option("StrideH", 1)), int(node.option("StrideW", 1)))  # type: ignore[call-overload]
    attrs = PoolAttrs(
        kernel=kernel,
        strides=strides,
        padding=window_padding(node, data.shape[1:3], kernel, strides, (1, 1)),
        dilations=(1, 1),
        count_include_pad=False,  # TFLite averages over the window's real pixels
        layout="NHWC",
    )
    return [node.activation(node.add(op, [data], attrs))]


@converter("AVERAGE_POOL_2D")
def convert_average_pool(node: TFLiteNode) -> list[Value]:
    return _pool(node, "avg_pool")


@converter("MAX_POOL_2D")
def convert_max_pool(node: TFLiteNode) -> list[Value]:
    return _pool(node, "max_pool")


@converter("SOFTMAX")
def convert_softmax(node: TFLiteNode) -> list[Value]:
    """softmax(beta * x) over the last axis."""
    data = node.input(0)
    beta = float(node.option("Beta", 1.0))  # type: ignore[arg-type]
    if beta != 1.0:
        data = node.add("multiply", [data, node.scalar(beta, data.dtype)], suffix="beta")
    return [node.add("softmax", [data], AxisAttrs(data.type.ndim - 1))]


@converter("LOG_SOFTMAX")
def convert_log_softmax(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    return [node.add("log_softmax", [data], AxisAttrs(data.type.ndim - 1))]


def _resize(node: TFLiteNode, mode: str) -> list[Value]:
    """inputs (NHWC data, [new_height, new_width]); align_corners and
    half_pixel_centers choose the coordinate transform, as TF defines them."""
    data = node.input(0)
    height, width = (int(v) for v in node.constant(1, "size").reshape(-1))
    align = bool(node.option("AlignCorners", False))
    half_pixel = bool(node.option("HalfPixelCenters", False))
    if mode == "linear":
        transform = "align_corners" if align else "half_pixel" if half_pixel else "asymmetric"
        rounding = "floor"
    elif align:
        transform, rounding = "align_corners", "round_prefer_ceil"
    else:
        transform = "tf_half_pixel_for_nn" if half_pixel else "asymmetric"
        rounding = "floor"
    batch, in_height, in_width, channels = data.shape
    attrs = ResizeAttrs(
        sizes=(batch, height, width, channels),
        scales=(1.0, height / in_height, width / in_width, 1.0),
        mode=mode,
        coordinate_transformation_mode=transform,
        nearest_mode=rounding,
    )
    return [node.add("resize", [data], attrs)]


@converter("RESIZE_BILINEAR")
def convert_resize_bilinear(node: TFLiteNode) -> list[Value]:
    return _resize(node, "linear")


@converter("RESIZE_NEAREST_NEIGHBOR")
def convert_resize_nearest(node: TFLiteNode) -> list[Value]:
    return _resize(node, "nearest")


@converter("BATCH_MATMUL")
def convert_batch_matmul(node: TFLiteNode) -> list[Value]:
    """x @ y over the last two axes, each transposed first if adj_x / adj_y."""
    operands = []
    for index, field in ((0, "AdjX"), (1, "AdjY")):
        value = node.input(index)
        if node.option(field, False):
            rank = value.type.ndim
            perm = (*range(rank - 2), rank - 1, rank - 2)
            value = node.add("transpose", [value], TransposeAttrs(perm), f"adj{index}")
        operands.append(value)
    return [node.add("matmul", operands)]
