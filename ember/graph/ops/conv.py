"""Convolution ops: `conv` (N-d, grouped, dilated, any supported layout) and
`conv_transpose` (N-d, grouped). Both are fused-group anchors counted in MACs.

Precision of the references: floating-point convolutions are accumulated in float64
and rounded once to the output dtype. A float64 sum of float32 products is exact to
well below float32 resolution whatever the summation order, so the reference is the
correctly rounded result up to a final rounding, and any compiled kernel (which sums in
float32, in its own order) is compared against a fixed, order-independent value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, TensorType
from ember.graph.ops.attrs import ConvAttrs, ConvTransposeAttrs
from ember.graph.ops.layout import (
    from_channels_first,
    parse_data_layout,
    parse_kernel_layout,
    permute_shape,
    to_channels_first,
    unpermute_shape,
)
from ember.graph.ops.registry import OpDef, OpPattern, register_op
from ember.graph.ops.window import (
    check_window_attrs,
    dilated_extent,
    pad_spatial,
    window_output_size,
    windows,
)


def accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """float64 for floating-point data (see the module docstring); integers keep
    their own type, whose arithmetic is exact (wrapping on overflow like C)."""
    return np.dtype(np.float64) if np.issubdtype(dtype, np.floating) else np.dtype(dtype)


def _check_float_operands(op: str, data: TensorType, weight: TensorType) -> None:
    if data.dtype != weight.dtype:
        raise ShapeError(f"{op}: data is {data.dtype} but weight is {weight.dtype}")
    if data.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: needs floating-point data, got {data.dtype}")


def _check_groups(op: str, channels: int, groups: int, outputs: int) -> None:
    if groups < 1:
        raise ShapeError(f"{op}: groups must be >= 1, got {groups}")
    if channels % groups or outputs % groups:
        raise ShapeError(
            f"{op}: {channels} input channels and {outputs} output channels must both "
            f"be divisible by groups={groups}"
        )


# -- conv ----------------------------------------------------------------------------


def conv_infer(
    inputs: Sequence[TensorType], attrs: ConvAttrs, op: str = "conv"
) -> tuple[TensorType, ...]:
    """The conv's output type (`op` names the op in errors: `conv_pack` checks its
    unpacked weight with it)."""
    data, weight = inputs
    _check_float_operands(op, data, weight)
    layout = parse_data_layout(attrs.layout, op, data.ndim)
    spatial_rank = layout.spatial_rank
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, op, spatial_rank)
    if weight.ndim != spatial_rank + 2:
        raise ShapeError(
            f"{op}: weight {weight} must have rank {spatial_rank + 2} "
            f"(layout {attrs.kernel_layout!r}) for {spatial_rank}-d data"
        )
    check_window_attrs(op, spatial_rank, attrs.strides, attrs.padding, attrs.dilations)
    batch, channels, *sizes = permute_shape(data.shape, layout.to_channels_first)
    outputs, per_group, *kernel = permute_shape(weight.shape, kernel_layout.to_out_in_first)
    _check_groups(op, channels, attrs.groups, outputs)
    if per_group * attrs.groups != channels:
        raise ShapeError(
            f"{op}: data has {channels} channels but the weight {weight.shape} "
            f"({attrs.kernel_layout}) takes {per_group} input channels per group x "
            f"{attrs.groups} groups = {per_group * attrs.groups}; check groups and layouts"
        )
    out_sizes = [
        window_output_size(
            op,
            sizes[axis],
            kernel[axis],
            attrs.strides[axis],
            attrs.padding[axis],
            attrs.padding[axis + spatial_rank],
            attrs.dilations[axis],
        )
        for axis in range(spatial_rank)
    ]
    shape = unpermute_shape((batch, outputs, *out_sizes), layout.to_channels_first)
    return (TensorType(shape, data.dtype),)


def conv_reference(inputs: Sequence[np.ndarray], attrs: ConvAttrs) -> tuple[np.ndarray, ...]:
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "conv")
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", layout.spatial_rank)
    x = to_channels_first(data, layout)
    w = np.transpose(weight, kernel_layout.to_out_in_first)  # (O, I/groups, *kernel)
    batch = x.shape[0]
    outputs, per_group, *kernel = w.shape
    groups = attrs.groups
    (out_type,) = conv_infer([TensorType.of(data), TensorType.of(weight)], attrs)
    out_sizes = permute_shape(out_type.shape, layout.to_channels_first)[2:]
    patches = windows(
        pad_spatial(x, attrs.padding), kernel, attrs.strides, attrs.dilations, out_sizes
    )  # (N, C, *out, *kernel)
    # im2col per group: rows are (n, output position), columns are (c, kernel tap).
    spatial_rank = len(kernel)
    out_axes = tuple(range(3, 3 + spatial_rank))
    tap_axes = tuple(range(3 + spatial_rank, 3 + 2 * spatial_rank))
    grouped = patches.reshape(batch, groups, per_group, *out_sizes, *kernel)
    columns = np.transpose(grouped, (1, 0, *out_axes, 2, *tap_axes)).reshape(
        groups, batch * math.prod(out_sizes), per_group * math.prod(kernel)
    )
    # Explicit sizes, not -1: an empty weight has no size to infer one from.
    kernels = w.reshape(groups, outputs // groups, per_group * math.prod(kernel)).transpose(0, 2, 1)
    accumulate = accumulation_dtype(data.dtype)
    result = np.matmul(columns.astype(accumulate), kernels.astype(accumulate))
    # (groups, N * positions, O/groups) -> (N, groups, O/groups, *out) -> (N, O, *out)
    result = result.reshape(groups, batch, *out_sizes, outputs // groups)
    result = np.transpose(result, (1, 0, 2 + spatial_rank, *range(2, 2 + spatial_rank)))
    result = result.reshape(batch, outputs, *out_sizes)
    return (from_channels_first(result, layout).astype(data.dtype),)


def conv_macs(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: ConvAttrs) -> int:
    # Every output element sums (input channels per group) x (kernel taps) products.
    spatial_rank = len(attrs.strides)
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", spatial_rank)
    _, per_group, *kernel = permute_shape(inputs[1].shape, kernel_layout.to_out_in_first)
    return outputs[0].size * per_group * math.prod(kernel)


# -- conv_transpose ------------------------------------------------------------------


def _conv_transpose_infer(
    inputs: Sequence[TensorType], attrs: ConvTransposeAttrs
) -> tuple[TensorType, ...]:
    data, weight = inputs
    _check_float_operands("conv_transpose", data, weight)
    layout = parse_data_layout(attrs.layout, "conv_transpose", data.ndim)
    spatial_rank = layout.spatial_rank
    check_window_attrs(
        "conv_transpose", spatial_rank, attrs.strides, attrs.padding, attrs.dilations
    )
    if weight.ndim != spatial_rank + 2:
        raise ShapeError(
            f"conv_transpose: weight {weight} must have rank {spatial_rank + 2} "
            "(input channels, output channels per group, kernel...)"
        )
    if len(attrs.output_padding) != spatial_rank or min(attrs.output_padding) < 0:
        raise ShapeError(
            f"conv_transpose: output_padding {attrs.output_padding} needs "
            f"{spatial_rank} non-negative entries"
        )
    batch, channels, *sizes = permute_shape(data.shape, layout.to_channels_first)
    weight_channels, per_group_out, *kernel = weight.shape
    if weight_channels != channels:
        raise ShapeError(
            f"conv_transpose: data has {channels} channels but the weight {weight.shape} "
            f"expects {weight_channels} (weight layout: input channels, output channels "
            "per group, kernel...)"
        )
    outputs = per_group_out * attrs.groups
    _check_groups("conv_transpose", channels, attrs.groups, outputs)
    out_sizes = [
        _transposed_size(attrs, sizes[axis], kernel[axis], axis) for axis in range(spatial_rank)
    ]
    shape = unpermute_shape((batch, outputs, *out_sizes), layout.to_channels_first)
    return (TensorType(shape, data.dtype),)


def _transposed_size(attrs: ConvTransposeAttrs, size: int, kernel: int, axis: int) -> int:
    """Output length along one axis: the full scattered length, minus the padding,
    plus the output padding."""
    spatial_rank = len(attrs.strides)
    full = (size - 1) * attrs.strides[axis] + dilated_extent(kernel, attrs.dilations[axis])
    length = (
        full - attrs.padding[axis] - attrs.padding[axis + spatial_rank] + attrs.output_padding[axis]
    )
    if length < 1:
        raise ShapeError(
            f"conv_transpose: spatial axis {axis} would have length {length}; "
            f"padding {attrs.padding} is too large for input length {size}"
        )
    return length


def _scatter_lengths(
    attrs: ConvTransposeAttrs,
    sizes: Sequence[int],
    kernel: Sequence[int],
    out_sizes: Sequence[int],
) -> list[int]:
    """Per axis, the uncropped length of a transposed convolution, grown to cover any
    output padding that reaches past its end."""
    return [
        max(
            (sizes[axis] - 1) * attrs.strides[axis]
            + dilated_extent(kernel[axis], attrs.dilations[axis]),
            attrs.padding[axis] + out_sizes[axis],
        )
        for axis in range(len(sizes))
    ]


def _conv_transpose_reference(
    inputs: Sequence[np.ndarray], attrs: ConvTransposeAttrs
) -> tuple[np.ndarray, ...]:
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "conv_transpose")
    x = to_channels_first(data, layout)
    batch, channels, *sizes = x.shape
    _, per_group_out, *kernel = weight.shape
    groups, spatial_rank = attrs.groups, len(kernel)
    (out_type,) = _conv_transpose_infer([TensorType.of(data), TensorType.of(weight)], attrs)
    out_sizes = permute_shape(out_type.shape, layout.to_channels_first)[2:]
    accumulate = accumulation_dtype(data.dtype)
    # Rows (n, input position) per group, columns the group's input channels.
    grouped = x.reshape(batch, groups, channels // groups, *sizes)
    positions = batch * math.prod(sizes)  # spelled out: -1 is ambiguous when C is 0
    rows = np.moveaxis(grouped, (1, 2), (0, -1)).reshape(groups, positions, channels // groups)
    rows = rows.astype(accumulate)  # (G, N * input positions, C/G)
    scattered_shape = (groups, batch, *sizes, per_group_out)
    taps = weight.reshape(groups, channels // groups, per_group_out, *kernel).astype(accumulate)
    # Scatter: input position i with kernel tap t lands on output i * stride + t * dilation
    # (before cropping the padding).
    buffer_sizes = _scatter_lengths(attrs, sizes, kernel, out_sizes)
    buffer = np.zeros((groups, batch, *buffer_sizes, per_group_out), accumulate)
    for tap in np.ndindex(*kernel):
        targets = tuple(
            slice(t * dilation, t * dilation + (size - 1) * stride + 1, stride)
            for t, size, stride, dilation in zip(
                tap, sizes, attrs.strides, attrs.dilations, strict=True
            )
        )
        contribution = np.matmul(rows, taps[(..., *tap)])  # (G, N * positions, O/G)
        buffer[(slice(None), slice(None), *targets)] += contribution.reshape(scattered_shape)
    crop = tuple(
        slice(attrs.padding[axis], attrs.padding[axis] + out_sizes[axis])
        for axis in range(spatial_rank)
    )
    result = buffer[(slice(None), slice(None), *crop)]  # (G, N, *out, O/G)
    result = np.moveaxis(result, (0, -1), (1, 2)).reshape(batch, groups * per_group_out, *out_sizes)
    return (from_channels_first(result, layout).astype(data.dtype),)


def _conv_transpose_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: ConvTransposeAttrs
) -> int:
    # Every input element is multiplied by each tap of each output channel of its group.
    _, per_group_out, *kernel = inputs[1].shape
    return inputs[0].size * per_group_out * math.prod(kernel)


register_op(
    OpDef(
        "conv",
        OpPattern.ANCHOR,
        conv_infer,
        conv_reference,
        attrs_type=ConvAttrs,
        min_inputs=2,
        max_inputs=2,
        macs=conv_macs,
        counts_macs=True,
        doc="N-d convolution (data, weight) with groups, strides, dilations, padding.",
    )
)
register_op(
    OpDef(
        "conv_transpose",
        OpPattern.ANCHOR,
        _conv_transpose_infer,
        _conv_transpose_reference,
        attrs_type=ConvTransposeAttrs,
        min_inputs=2,
        max_inputs=2,
        macs=_conv_transpose_macs,
        counts_macs=True,
        doc="N-d transposed convolution (data, weight[I, O/groups, *kernel]).",
    )
)
