"""ONNX converters for the neural-network ops: convolutions, pooling, normalisations,
Gemm / MatMul, softmax, LRN, Resize and Upsample.

ONNX data is channels-first, so every spatial op is emitted with the NC... layout (and
OI... kernels); `convert_layout` may change that later. Biases become a separate
broadcast `add`, which the fusion pass folds into the anchor's epilogue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Imported for its side effect: it registers the Resize and Upsample converters.
import ember.frontend.onnx.resize  # noqa: F401
from ember.errors import ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend.onnx.registry import (
    ConversionContext,
    OnnxNode,
    converter,
    dtype_from_onnx,
    int_list,
)
from ember.frontend.onnx.tensor import normalize_axis, reshape_to
from ember.graph.ir import NoAttrs, Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    CastAttrs,
    ConvAttrs,
    ConvTransposeAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LayoutAttrs,
    LrnAttrs,
    PoolAttrs,
    ReduceAttrs,
    ShapeAttrs,
    TransposeAttrs,
)
from ember.graph.ops.layout import channels_first, kernel_out_in_first
from ember.graph.ops.window import dilated_extent

# -- shared helpers -------------------------------------------------------------------


def _spatial_rank(node: OnnxNode, data: Value) -> int:
    """Number of spatial axes of N, C, spatial... data (1, 2 or 3)."""
    rank = data.type.ndim - 2
    if rank not in (1, 2, 3):
        raise UnsupportedOperatorError(
            f"{node.where}: input {data.type} has rank {data.type.ndim}; Ember supports "
            "1-d, 2-d and 3-d data (N, C, spatial...: rank 3, 4 or 5)"
        )
    return rank


def _per_axis(node: OnnxNode, name: str, count: int, default: int) -> tuple[int, ...]:
    """An ints attribute with one entry per spatial axis (all `default` when absent)."""
    values = int_list(node.attr(name, [default] * count))
    if len(values) != count:
        raise ModelLoadError(f"{node.where}: {name} {values} needs {count} entries")
    return tuple(values)


def _same_padding(
    mode: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, ...]:
    """auto_pad SAME_UPPER / SAME_LOWER: output length ceil(size / stride), the padding
    split evenly with the odd element at the end (UPPER) or the beginning (LOWER)."""
    begins, ends = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
        out = math.ceil(size / stride)
        total = max(0, (out - 1) * stride + dilated_extent(k, dilation) - size)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return (*begins, *ends)


def _check_window(
    node: OnnxNode,
    count: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> None:
    """A window's kernel, strides and dilations: one positive entry per spatial axis."""
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != count or min(values, default=1) < 1:
            raise ModelLoadError(
                f"{node.where}: {name} {list(values)} needs {count} positive entries, one "
                "per spatial axis"
            )


def _window_padding(
    node: OnnxNode,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, ...]:
    """The explicit padding of a Conv or pool node, resolving `auto_pad`; the window's
    kernel, strides and dilations checked first (one positive entry per spatial axis)."""
    mode = str(node.attr("auto_pad", "NOTSET"))
    count = len(sizes)
    _check_window(node, count, kernel, strides, dilations)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return _same_padding(mode, sizes, kernel, strides, dilations)
    if mode == "VALID":
        return (0,) * (2 * count)
    if mode != "NOTSET":
        raise ModelLoadError(
            f"{node.where}: auto_pad {mode!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    return _per_axis(node, "pads", 2 * count, 0)


def _add_channel_bias(ctx: ConversionContext, node: OnnxNode, out: Value, bias_index: int) -> Value:
    """out + bias, a per-channel vector broadcast along axis 1 of N, C, spatial..."""
    bias = node.optional_input(bias_index)
    if bias is None:
        return out
    channels = out.shape[1]
    if bias.shape != (channels,):
        raise ModelLoadError(
            f"{node.where}: bias {bias.type} must be a vector of the {channels} output channels"
        )
    column = reshape_to(ctx, bias, (channels, *[1] * (out.type.ndim - 2)), f"{node.name}_bias")
    return ctx.builder.add("add", [out, column], NoAttrs(), f"{node.name}_add_bias")


# -- convolution ----------------------------------------------------------------------


def _kernel_shape(node: OnnxNode, weight: Value) -> tuple[int, ...]:
    if weight.type.ndim < 3:
        raise ShapeError(
            f"{node.where}: the weight is {weight.type}; a convolution's weight has the "
            "output and input channels, then one axis per spatial axis"
        )
    kernel = tuple(weight.shape[2:])
    if "kernel_shape" in node.attrs and tuple(int_list(node.attr("kernel_shape"))) != kernel:
        raise ModelLoadError(
            f"{node.where}: kernel_shape {int_list(node.attr('kernel_shape'))} does not "
            f"match the weight {weight.type}"
        )
    return kernel


@converter("Conv")
def convert_conv(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data, weight = node.input(0), node.input(1)
    rank = _spatial_rank(node, data)
    kernel = _kernel_shape(node, weight)
    strides = _per_axis(node, "strides", rank, 1)
    dilations = _per_axis(node, "dilations", rank, 1)
    padding = _window_padding(node, data.shape[2:], kernel, strides, dilations)
    attrs = ConvAttrs(
        strides=strides,
        padding=padding,
        dilations=dilations,
        groups=node.int_attr("group", 1),
        layout=channels_first(rank),
        kernel_layout=kernel_out_in_first(rank),
    )
    out = ctx.builder.add("conv", [data, weight], attrs, node.name)
    return [_add_channel_bias(ctx, node, out, 2)]


def _conv_transpose_padding(
    node: OnnxNode,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(padding, output_padding) of a ConvTranspose: from `pads` and `output_padding`,
    or derived from `output_shape` or `auto_pad` SAME_* (output length size * stride)."""
    mode = str(node.attr("auto_pad", "NOTSET"))
    count = len(sizes)
    _check_window(node, count, kernel, strides, dilations)
    output_padding = _per_axis(node, "output_padding", count, 0)
    wanted: list[int] | None = None
    if "output_shape" in node.attrs:
        wanted = int_list(node.attr("output_shape"))[-count:]
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [size * stride for size, stride in zip(sizes, strides, strict=True)]
    elif mode == "VALID":
        return (0,) * (2 * count), output_padding
    if wanted is None:
        return _per_axis(node, "pads", 2 * count, 0), output_padding
    begins, ends, extra = [], [], []
    for axis in range(count):
        full = (sizes[axis] - 1) * strides[axis] + dilated_extent(kernel[axis], dilations[axis])
        total = full + output_padding[axis] - wanted[axis]
        # A longer output than the convolution produces is zero-filled at the end, which
        # is what output padding does.
        extra.append(output_padding[axis] + max(0, -total))
        total = max(total, 0)
        # As the ONNX spec says: SAME_UPPER puts the odd element at the end, anything
        # else at the beginning.
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return (*begins, *ends), tuple(extra)


@converter("ConvTranspose")
def convert_conv_transpose(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data, weight = node.input(0), node.input(1)
    rank = _spatial_rank(node, data)
    kernel = _kernel_shape(node, weight)
    strides = _per_axis(node, "strides", rank, 1)
    dilations = _per_axis(node, "dilations", rank, 1)
    padding, output_padding = _conv_transpose_padding(
        node, data.shape[2:], kernel, strides, dilations
    )
    attrs = ConvTransposeAttrs(
        strides=strides,
        padding=padding,
        output_padding=output_padding,
        dilations=dilations,
        groups=node.int_attr("group", 1),
        layout=channels_first(rank),
    )
    out = ctx.builder.add("conv_transpose", [data, weight], attrs, node.name)
    return [_add_channel_bias(ctx, node, out, 2)]


# -- pooling --------------------------------------------------------------------------


@converter("MaxPool", "AveragePool")
def convert_pool(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    # The optional Indices output is not produced; the loader reports it if it is used.
    rank = _spatial_rank(node, data)
    kernel = tuple(int_list(node.attr("kernel_shape")))
    if len(kernel) != rank:
        raise ModelLoadError(f"{node.where}: kernel_shape {list(kernel)} needs {rank} entries")
    strides = _per_axis(node, "strides", rank, 1)
    dilations = _per_axis(node, "dilations", rank, 1)
    attrs = PoolAttrs(
        kernel=kernel,
        strides=strides,
        padding=_window_padding(node, data.shape[2:], kernel, strides, dilations),
        dilations=dilations,
        ceil_mode=node.flag_attr("ceil_mode", False),
        count_include_pad=node.flag_attr("count_include_pad", False),
        layout=channels_first(rank),
    )
    op = "max_pool" if node.op_type == "MaxPool" else "avg_pool"
    return [ctx.builder.add(op, [data], attrs, node.name)]


@converter("GlobalAveragePool", "GlobalMaxPool")
def convert_global_pool(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    attrs = LayoutAttrs(channels_first(_spatial_rank(node, data)))
    op = "global_avg_pool" if node.op_type == "GlobalAveragePool" else "global_max_pool"
    return [ctx.builder.add(op, [data], attrs, node.name)]


# -- normalisation --------------------------------------------------------------------


@converter("BatchNormalization")
def convert_batch_norm(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    if node.flag_attr("training_mode", False):
        raise UnsupportedOperatorError(
            f"{node.where}: training_mode=1 is not supported; export the model in eval mode"
        )
    if ctx.opset < 9 and not node.int_attr("spatial", 1):
        raise UnsupportedOperatorError(
            f"{node.where}: spatial=0 (statistics per element, not per channel) is not supported"
        )
    if node.num_outputs > 1:
        # Before opset 14 the statistics outputs also switch Y to batch statistics.
        raise UnsupportedOperatorError(
            f"{node.where}: the mean and variance outputs of training mode are not "
            "supported; Ember imports inference graphs (export the model in eval mode)"
        )
    inputs = [node.input(i) for i in range(5)]
    for value, what in zip(inputs[1:], ("scale", "bias", "mean", "variance"), strict=True):
        # Folded into the conv before it, an infinite statistic moves NaNs around
        # (inf * 0 in other elements); no trained network has one.
        array = ctx.constant(value)
        if array is not None and not np.all(np.isfinite(array)):
            raise ModelLoadError(
                f"{node.where}: the {what} holds {array[~np.isfinite(array)].flat[0]}; batch "
                "norm statistics must be finite numbers"
            )
    attrs = BatchNormAttrs(epsilon=node.float_attr("epsilon", 1e-5), axis=1)
    return [ctx.builder.add("batch_norm", inputs, attrs, node.name)]


@converter("InstanceNormalization")
def convert_instance_norm(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    attrs = InstanceNormAttrs(
        epsilon=node.float_attr("epsilon", 1e-5), layout=channels_first(_spatial_rank(node, data))
    )
    inputs = [data, node.input(1), node.input(2)]
    return [ctx.builder.add("instance_norm", inputs, attrs, node.name)]


@converter("LayerNormalization")
def convert_layer_norm(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data, scale = node.input(0), node.input(1)
    bias = node.optional_input(2)
    if bias is None:
        # The graph op always takes a bias; a zero one changes nothing.
        zero = ctx.builder.constant(np.zeros((), scale.dtype))
        bias = ctx.builder.add("broadcast_to", [zero], ShapeAttrs(scale.shape), f"{node.name}_bias")
    axis = normalize_axis(node, node.int_attr("axis", -1), data.type.ndim)
    epsilon = node.float_attr("epsilon", 1e-5)
    attrs = LayerNormAttrs(axis=axis, epsilon=epsilon)
    out = ctx.builder.add("layer_norm", [data, scale, bias], attrs, node.name)
    if node.num_outputs == 1:
        return [out]
    return [out, *_layer_norm_statistics(ctx, node, data, axis, epsilon)]


def _layer_norm_statistics(
    ctx: ConversionContext, node: OnnxNode, data: Value, axis: int, epsilon: float
) -> list[Value | None]:
    """LayerNormalization's optional Mean and InvStdDev outputs, in `stash_type`, built
    from graph ops (the builder drops them again when nothing reads them)."""
    builder, name = ctx.builder, node.name
    stash = dtype_from_onnx(node.int_attr("stash_type", 1), f"{node.where} stash_type")
    if data.dtype != stash:
        data = builder.add("cast", [data], CastAttrs(stash), f"{name}_stash")
    axes = ReduceAttrs(tuple(range(axis, data.type.ndim)), keepdims=True)
    mean = builder.add("reduce_mean", [data], axes, f"{name}_mean")
    centred = builder.add("subtract", [data, mean], NoAttrs(), f"{name}_centred")
    squares = builder.add("multiply", [centred, centred], NoAttrs(), f"{name}_squares")
    variance = builder.add("reduce_mean", [squares], axes, f"{name}_variance")
    shifted = builder.add(
        "add", [variance, builder.constant(np.asarray(epsilon, stash))], NoAttrs(), f"{name}_eps"
    )
    deviation = builder.add("sqrt", [shifted], NoAttrs(), f"{name}_std")
    return [mean, builder.add("reciprocal", [deviation], NoAttrs(), f"{name}_inv_std")]


@converter("LRN")
def convert_lrn(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    attrs = LrnAttrs(
        size=node.int_attr("size"),
        alpha=node.float_attr("alpha", 0.0001),
        beta=node.float_attr("beta", 0.75),
        bias=node.float_attr("bias", 1.0),
    )
    return [ctx.builder.add("lrn", [node.input(0)], attrs, node.name)]


# -- dense, matmul --------------------------------------------------------------------


def _transpose_2d(ctx: ConversionContext, value: Value, name: str) -> Value:
    return ctx.builder.add("transpose", [value], TransposeAttrs((1, 0)), name)


def _scaled(ctx: ConversionContext, value: Value, factor: float, name: str) -> Value:
    """value * factor, folded into the array when `value` is a constant."""
    if factor == 1.0:
        return value
    array = ctx.constant(value)
    if array is not None:
        return ctx.builder.param(value.name, (array * factor).astype(array.dtype))
    scale = ctx.builder.constant(np.asarray(factor, value.dtype))
    return ctx.builder.add("multiply", [value, scale], NoAttrs(), name)


@converter("Gemm")
def convert_gemm(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    """alpha * A' @ B' + beta * C. A constant B becomes a `dense` weight (N, K), with
    the transpose and alpha folded into it; otherwise a `matmul`."""
    a, b = node.input(0), node.input(1)
    for value, name in ((a, "A"), (b, "B")):
        if value.type.ndim != 2:
            raise ShapeError(f"{node.where}: {name} is {value.type}; Gemm multiplies matrices")
    alpha, beta = node.float_attr("alpha", 1.0), node.float_attr("beta", 1.0)
    c = node.optional_input(2)
    if c is not None and c.type.dtype != a.type.dtype:
        raise ShapeError(f"{node.where}: C is {c.type} and A {a.type}; Gemm takes one type")
    dtype = np.dtype(a.type.dtype)
    if dtype.kind in "iu":  # integer Gemm: a scale must be a whole number of the type
        limits = np.iinfo(dtype)
        for attr, factor in (("alpha", alpha), ("beta", beta)):
            if not (factor.is_integer() and limits.min <= factor <= limits.max):
                raise ModelLoadError(
                    f"{node.where}: {attr}={factor} cannot scale {dtype} matrices; give a "
                    f"whole number in {limits.min}..{limits.max}"
                )
    if node.flag_attr("transA", False):
        a = _transpose_2d(ctx, a, f"{node.name}_transpose_a")
    transpose_b = node.flag_attr("transB", False)
    b_array = ctx.constant(b)
    if b_array is not None:
        weight = b if transpose_b else ctx.builder.param(b.name, np.ascontiguousarray(b_array.T))
        weight = _scaled(ctx, weight, alpha, f"{node.name}_alpha")
        out = ctx.builder.add("dense", [a, weight], NoAttrs(), node.name)
    else:
        if transpose_b:
            b = _transpose_2d(ctx, b, f"{node.name}_transpose_b")
        out = ctx.builder.add("matmul", [a, b], NoAttrs(), node.name)
        out = _scaled(ctx, out, alpha, f"{node.name}_alpha")
    if c is None or beta == 0.0:
        return [out]
    c = _scaled(ctx, c, beta, f"{node.name}_beta")
    return [ctx.builder.add("add", [out, c], NoAttrs(), f"{node.name}_add_c")]


@converter("MatMul")
def convert_matmul(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    return [ctx.builder.add("matmul", [node.input(0), node.input(1)], NoAttrs(), node.name)]


# -- softmax --------------------------------------------------------------------------


@converter("Softmax", "LogSoftmax")
def convert_softmax(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    """Opset 13 normalises along `axis` (default -1). Earlier opsets coerce the input
    to 2-D at `axis` (default 1): the softmax runs over all axes from `axis` on."""
    data = node.input(0)
    rank = data.type.ndim
    op = "softmax" if node.op_type == "Softmax" else "log_softmax"
    axis = normalize_axis(node, node.int_attr("axis", -1 if ctx.opset >= 13 else 1), rank)
    if ctx.opset >= 13 or axis == rank - 1:
        return [ctx.builder.add(op, [data], AxisAttrs(axis), node.name)]
    rows, columns = math.prod(data.shape[:axis]), math.prod(data.shape[axis:])
    flat = reshape_to(ctx, data, (rows, columns), f"{node.name}_flatten")
    out = ctx.builder.add(op, [flat], AxisAttrs(1), node.name)
    return [reshape_to(ctx, out, data.shape, f"{node.name}_unflatten")]
