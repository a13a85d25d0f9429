"""ATen converters for the neural-network operators: convolution, pooling,
normalisation, matrix products, softmax, embedding and interpolation.

torch data is channels-first, so every spatial op is emitted with the NC... layout
(and OI... kernels); `convert_layout` may change that later. Biases become a separate
broadcast `add`, which the fusion pass folds into the anchor's epilogue.
"""

from __future__ import annotations

import math

import numpy as np

from ember.frontend.pytorch.registry import (
    ConversionContext,
    TorchNode,
    converter,
    unsupported,
)
from ember.graph.ir import Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    ConvAttrs,
    ConvTransposeAttrs,
    LayerNormAttrs,
    LayoutAttrs,
    PoolAttrs,
    ResizeAttrs,
)
from ember.graph.ops.layout import channels_first, kernel_out_in_first


def _spatial_rank(node: TorchNode, data: Value) -> int:
    rank = data.type.ndim - 2
    if rank not in (1, 2, 3):
        raise unsupported(
            node, f"input {data.type} has rank {data.type.ndim}; Ember supports 1-d, 2-d and "
            "3-d data (N, C, spatial...: rank 3, 4 or 5)",
        )  # fmt: skip
    return rank


def _per_axis(
    node: TorchNode, index: int, name: str, rank: int, default: int | None = None
) -> tuple[int, ...]:
    """An int[] argument with one entry per spatial axis (torch repeats a single one;
    an empty list means `default`)."""
    values = node.ints(index, name, [] if default is not None else None)
    if not values and default is not None:
        values = [default]
    if len(values) == 1:
        values = values * rank
    if len(values) != rank:
        raise unsupported(node, f"{name} {values} needs {rank} entries")
    return tuple(values)


def _add_channel_bias(
    ctx: ConversionContext, node: TorchNode, out: Value, bias: Value | None
) -> Value:
    """out + bias, a per-channel vector broadcast along axis 1 of N, C, spatial..."""
    if bias is None:
        return out
    column = ctx.reshape(bias, (bias.shape[0], *[1] * (out.type.ndim - 2)), node, "bias")
    return ctx.add("add", [out, column], node, suffix="add_bias")


# -- convolution ----------------------------------------------------------------------


@converter("aten.convolution.default")
def convert_convolution(ctx: ConversionContext, node: TorchNode) -> Value:
    """convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups)."""
    data, weight = node.value(0), node.value(1, "weight")
    bias = node.optional_value(2, "bias")
    rank = _spatial_rank(node, data)
    strides = _per_axis(node, 3, "stride", rank)
    padding = _per_axis(node, 4, "padding", rank)
    dilations = _per_axis(node, 5, "dilation", rank)
    groups = node.int_(8, "groups")
    if node.arg(6, "transposed"):
        output_padding = _per_axis(node, 7, "output_padding", rank)
        transposed = ConvTransposeAttrs(strides, padding * 2, output_padding, dilations, groups,
                                        channels_first(rank))  # fmt: skip
        out = ctx.add("conv_transpose", [data, weight], node, transposed)
    else:
        attrs = ConvAttrs(strides, padding * 2, dilations, groups, channels_first(rank),
                          kernel_out_in_first(rank))  # fmt: skip
        out = ctx.add("conv", [data, weight], node, attrs)
    return _add_channel_bias(ctx, node, out, bias)


# -- pooling --------------------------------------------------------------------------


def _pool(ctx: ConversionContext, node: TorchNode, op: str, count_include_pad: bool) -> Value:
    """max_pool{1,2,3}d_with_indices / avg_pool{1,2,3}d(input, kernel, stride, padding,
    ...): torch's stride defaults to the kernel."""
    data = node.value(0)
    rank = _spatial_rank(node, data)
    kernel = _per_axis(node, 1, "kernel_size", rank)
    strides = tuple(node.ints(2, "stride", [])) or kernel
    if len(strides) == 1:
        strides = strides * rank
    padding = _per_axis(node, 3, "padding", rank, default=0)
    if op == "max_pool":
        dilations = _per_axis(node, 4, "dilation", rank, default=1)
        ceil_mode = bool(node.arg(5, "ceil_mode", False))
    else:
        dilations = (1,) * rank
        ceil_mode = bool(node.arg(4, "ceil_mode", False))
        if node.arg(6, "divisor_override", None) is not None:
            raise unsupported(node, "divisor_override is not supported")
    attrs = PoolAttrs(kernel, strides, padding * 2, dilations, ceil_mode, count_include_pad,
                      channels_first(rank))  # fmt: skip
    return ctx.add(op, [data], node, attrs)


# 1-d pools reach Ember as 2-d ones over an unsqueezed axis (core decomposition).
@converter("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def convert_max_pool(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    # The indices are not computed; the loader reports it if anything reads them.
    return _pool(ctx, node, "max_pool", False), None


@converter("aten.avg_pool2d.default", "aten.avg_pool3d.default")
def convert_avg_pool(ctx: ConversionContext, node: TorchNode) -> Value:
    """avg_pool{2,3}d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override)."""
    return _pool(ctx, node, "avg_pool", bool(node.arg(5, "count_include_pad", True)))


@converter("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default")
def convert_adaptive_avg_pool(ctx: ConversionContext, node: TorchNode) -> Value:
    """Global pooling for an output of 1s; an ordinary average pool when every output
    length divides its input length (the windows are then equal and disjoint)."""
    data = node.value(0)
    rank = _spatial_rank(node, data)
    sizes = _per_axis(node, 1, "output_size", rank)
    spatial = data.shape[2:]
    if all(s == 1 for s in sizes):
        return ctx.add("global_avg_pool", [data], node, LayoutAttrs(channels_first(rank)))
    if any(length % size for length, size in zip(spatial, sizes, strict=True)):
        raise unsupported(
            node, f"adaptive average pooling of {list(spatial)} to {list(sizes)}: Ember "
            "supports output sizes that divide the input's",
        )  # fmt: skip
    kernel = tuple(length // size for length, size in zip(spatial, sizes, strict=True))
    attrs = PoolAttrs(kernel, kernel, (0,) * 2 * rank, (1,) * rank, layout=channels_first(rank))
    return ctx.add("avg_pool", [data], node, attrs)


# -- normalisation --------------------------------------------------------------------


@converter("aten._native_batch_norm_legit_no_training.default")
def convert_batch_norm(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    """(input, weight, bias, running_mean, running_var, momentum, eps) -> (out, mean,
    invstd); the statistics outputs are not computed (they are empty in inference)."""
    data = node.value(0)
    channels = data.shape[1]
    weight = node.optional_value(1, "weight") or ctx.builder.constant(np.ones(channels, data.dtype))
    bias = node.optional_value(2, "bias") or ctx.builder.constant(np.zeros(channels, data.dtype))
    mean, var = node.value(3, "running_mean"), node.value(4, "running_var")
    attrs = BatchNormAttrs(epsilon=node.float_(6, "eps"), axis=1)
    return ctx.add("batch_norm", [data, weight, bias, mean, var], node, attrs), None, None


@converter("aten._native_batch_norm_legit_functional.default")
def convert_training_batch_norm(ctx: ConversionContext, node: TorchNode) -> Value:
    raise unsupported(
        node, "batch norm in training mode (batch statistics, running ones updated); call "
        "model.eval() before exporting: Ember compiles inference graphs",
    )  # fmt: skip


@converter("aten._native_batch_norm_legit.no_stats")
def convert_batch_norm_without_statistics(ctx: ConversionContext, node: TorchNode) -> Value:
    raise unsupported(
        node, "batch norm without running statistics (track_running_stats=False) normalises "
        "with each batch's own statistics, which Ember does not support",
    )  # fmt: skip


@converter("aten.native_layer_norm.default")
def convert_layer_norm(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    """(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)."""
    data = node.value(0)
    normalized = node.ints(1, "normalized_shape")
    axis = data.type.ndim - len(normalized)
    shape = tuple(normalized)
    weight = node.optional_value(2, "weight") or ctx.builder.constant(np.ones(shape, data.dtype))
    bias = node.optional_value(3, "bias") or ctx.builder.constant(np.zeros(shape, data.dtype))
    attrs = LayerNormAttrs(axis=axis, epsilon=node.float_(4, "eps"))
    return ctx.add("layer_norm", [data, weight, bias], node, attrs), None, None


@converter("aten.native_group_norm.default")
def convert_group_norm(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    """(input, weight, bias, N, C, HxW, group, eps): each group's channels and pixels
    normalised together, as a layer norm over the data reshaped to (N, G, C/G * HxW),
    then the per-channel scale and shift."""
    data = node.value(0)
    groups, eps = node.int_(6, "group"), node.float_(7, "eps")
    batch, channels = data.shape[0], data.shape[1]
    grouped = ctx.reshape(data, (batch, groups, data.type.size // (batch * groups)), node, "groups")
    ones = ctx.builder.constant(np.ones(grouped.shape[2:], data.dtype))
    zeros = ctx.builder.constant(np.zeros(grouped.shape[2:], data.dtype))
    normed = ctx.add("layer_norm", [grouped, ones, zeros], node, LayerNormAttrs(2, eps), "normed")
    out = ctx.reshape(normed, data.shape, node, "ungroup")
    column = (channels, *[1] * (data.type.ndim - 2))
    weight, bias = node.optional_value(1, "weight"), node.optional_value(2, "bias")
    if weight is not None:
        out = ctx.add(
            "multiply", [out, ctx.reshape(weight, column, node, "w")], node, suffix="scale"
        )
    if bias is not None:
        out = ctx.add("add", [out, ctx.reshape(bias, column, node, "b")], node, suffix="shift")
    return out, None, None


# -- matrix products ------------------------------------------------------------------


def _product(
    ctx: ConversionContext, node: TorchNode, a: Value, b: Value, suffix: str = ""
) -> Value:
    """a @ b: a `dense` with a packed weight when `b` is a constant matrix (its
    transpose folded into the param), else a `matmul`."""
    b_array = ctx.constant(b)
    if b_array is not None and b_array.ndim == 2:
        weight = ctx.builder.param(b.name, np.ascontiguousarray(b_array.T))
        return ctx.add("dense", [a, weight], node, suffix=suffix)
    return ctx.add("matmul", [a, b], node, suffix=suffix)


@converter("aten.mm.default", "aten.bmm.default")
def convert_mm(ctx: ConversionContext, node: TorchNode) -> Value:
    return _product(ctx, node, node.value(0), node.value(1, "mat2"))


@converter("aten.addmm.default")
def convert_addmm(ctx: ConversionContext, node: TorchNode) -> Value:
    """beta * input + alpha * (mat1 @ mat2): nn.Linear on 2-D data."""
    bias, a, b = node.value(0), node.value(1, "mat1"), node.value(2, "mat2")
    beta, alpha = node.float_(3, "beta", 1.0), node.float_(4, "alpha", 1.0)
    product = _product(ctx, node, a, b, "mm")
    if alpha != 1.0:
        product = ctx.add(
            "multiply", [product, ctx.scalar(alpha, product.dtype)], node, suffix="alpha"
        )
    if beta == 0.0:
        return product
    if beta != 1.0:
        bias = ctx.add("multiply", [bias, ctx.scalar(beta, bias.dtype)], node, suffix="beta")
    return ctx.add("add", [product, bias], node)


# -- softmax ----------------------------------------------------------------------------


def _axis(node: TorchNode, index: int, name: str, rank: int) -> int:
    axis = node.int_(index, name)
    if not -rank <= axis < max(rank, 1):
        raise unsupported(node, f"{name} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@converter("aten._softmax.default", "aten._log_softmax.default")
def convert_softmax(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    op = "softmax" if node.target == "aten._softmax.default" else "log_softmax"
    return ctx.add(op, [data], node, AxisAttrs(_axis(node, 1, "dim", data.type.ndim)))


# -- embedding ----------------------------------------------------------------------


@converter("aten.embedding.default")
def convert_embedding(ctx: ConversionContext, node: TorchNode) -> Value:
    """embedding(weight, indices, ...): rows of the table (padding_idx only matters to
    training)."""
    return ctx.add(
        "gather", [node.value(0, "weight"), node.value(1, "indices")], node, AxisAttrs(0)
    )


# -- interpolation --------------------------------------------------------------------


def _resize(ctx: ConversionContext, node: TorchNode, mode: str, transform: str) -> Value:
    """upsample_*.vec(input, output_size, [align_corners,] scale_factors)."""
    data = node.value(0)
    _spatial_rank(node, data)
    output_size = node.arg(1, "output_size", None)
    # linear and cubic take align_corners before the scale factors; nearest does not.
    factors = node.arg(2 if mode == "nearest" else 3, "scale_factors", None)
    spatial = data.shape[2:]
    if output_size:
        sizes = tuple(int(s) for s in output_size)  # type: ignore[attr-defined]
        scales = tuple(o / i for o, i in zip(sizes, spatial, strict=True))
    elif factors:
        scales = tuple(float(f) for f in factors)  # type: ignore[attr-defined]
        sizes = tuple(math.floor(i * f) for i, f in zip(spatial, scales, strict=True))
    else:
        raise unsupported(node, "needs an output size or scale factors")
    attrs = ResizeAttrs(
        sizes=(*data.shape[:2], *sizes),
        scales=(1.0, 1.0, *scales),
        mode=mode,
        coordinate_transformation_mode=transform,
        nearest_mode="floor",
    )
    return ctx.add("resize", [data], node, attrs)


@converter("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec",
           "aten.upsample_nearest3d.vec")  # fmt: skip
def convert_upsample_nearest(ctx: ConversionContext, node: TorchNode) -> Value:
    # torch's nearest: source index floor(dst / scale), i.e. ONNX's asymmetric + floor.
    return _resize(ctx, node, "nearest", "asymmetric")


@converter("aten._upsample_nearest_exact1d.vec", "aten._upsample_nearest_exact2d.vec",
           "aten._upsample_nearest_exact3d.vec")  # fmt: skip
def convert_upsample_nearest_exact(ctx: ConversionContext, node: TorchNode) -> Value:
    # "nearest-exact": source index floor((dst + 0.5) / scale), TF's half-pixel nearest.
    return _resize(ctx, node, "nearest", "tf_half_pixel_for_nn")


@converter("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec",
           "aten.upsample_trilinear3d.vec")  # fmt: skip
def convert_upsample_linear(ctx: ConversionContext, node: TorchNode) -> Value:
    align = bool(node.arg(2, "align_corners", False))
    return _resize(ctx, node, "linear", "align_corners" if align else "pytorch_half_pixel")


@converter("aten.upsample_bicubic2d.vec")
def convert_upsample_bicubic(ctx: ConversionContext, node: TorchNode) -> Value:
    align = bool(node.arg(2, "align_corners", False))
    return _resize(ctx, node, "cubic", "align_corners" if align else "pytorch_half_pixel")
