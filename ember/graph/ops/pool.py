"""Pooling ops: `max_pool` and `avg_pool` over N-d windows (ceil mode, dilation,
padding that may or may not count in the average) and the global pools, which reduce
every spatial axis to length 1. All are fused-group anchors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, TensorType
from ember.graph.ops.attrs import LayoutAttrs, PoolAttrs
from ember.graph.ops.layout import (
    from_channels_first,
    parse_data_layout,
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

_INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _check_dtype(op: str, dtype: str) -> None:
    # Averages need fractions; a maximum works on any ordered type.
    averages = op in ("avg_pool", "global_avg_pool")
    allowed = FLOAT_DTYPES if averages else FLOAT_DTYPES + _INTEGER_DTYPES
    if dtype not in allowed:
        raise ShapeError(f"{op}: unsupported dtype {dtype}; use one of {', '.join(allowed)}")


def _pool_output_sizes(op: str, data: TensorType, attrs: PoolAttrs) -> list[int]:
    layout = parse_data_layout(attrs.layout, op, data.ndim)
    spatial_rank = layout.spatial_rank
    if len(attrs.kernel) != spatial_rank or min(attrs.kernel) < 1:
        raise ShapeError(
            f"{op}: kernel {attrs.kernel} needs {spatial_rank} positive entries "
            f"for layout {attrs.layout!r}"
        )
    check_window_attrs(op, spatial_rank, attrs.strides, attrs.padding, attrs.dilations)
    sizes = permute_shape(data.shape, layout.to_channels_first)[2:]
    return [
        window_output_size(
            op,
            sizes[axis],
            attrs.kernel[axis],
            attrs.strides[axis],
            attrs.padding[axis],
            attrs.padding[axis + spatial_rank],
            attrs.dilations[axis],
            attrs.ceil_mode,
        )
        for axis in range(spatial_rank)
    ]


def _pool_infer(op: str) -> Callable[[Sequence[TensorType], PoolAttrs], tuple[TensorType, ...]]:
    def infer(inputs: Sequence[TensorType], attrs: PoolAttrs) -> tuple[TensorType, ...]:
        (data,) = inputs
        _check_dtype(op, data.dtype)
        out_sizes = _pool_output_sizes(op, data, attrs)
        layout = parse_data_layout(attrs.layout, op)
        batch, channels = permute_shape(data.shape, layout.to_channels_first)[:2]
        shape = unpermute_shape((batch, channels, *out_sizes), layout.to_channels_first)
        return (TensorType(shape, data.dtype),)

    return infer


def _ceil_mode_padding(
    sizes: Sequence[int], out_sizes: Sequence[int], attrs: PoolAttrs
) -> list[int]:
    """Padding with the ends grown so that the last (ceil-mode) window fits entirely."""
    spatial_rank = len(sizes)
    ends = []
    for axis in range(spatial_rank):
        begin, end = attrs.padding[axis], attrs.padding[axis + spatial_rank]
        last_window_end = (out_sizes[axis] - 1) * attrs.strides[axis] + dilated_extent(
            attrs.kernel[axis], attrs.dilations[axis]
        )
        ends.append(max(end, last_window_end - begin - sizes[axis]))
    return [*attrs.padding[:spatial_rank], *ends]


def _max_pool_reference(inputs: Sequence[np.ndarray], attrs: PoolAttrs) -> tuple[np.ndarray, ...]:
    (data,) = inputs
    # Padding never wins a maximum: fill it with the dtype's lowest value.
    floating = np.issubdtype(data.dtype, np.floating)
    lowest = -np.inf if floating else np.iinfo(data.dtype).min
    layout = parse_data_layout(attrs.layout, "max_pool")
    x = to_channels_first(data, layout)
    out_sizes = _pool_output_sizes("max_pool", TensorType.of(data), attrs)
    padded = pad_spatial(x, _ceil_mode_padding(x.shape[2:], out_sizes, attrs), lowest)
    taps = windows(padded, attrs.kernel, attrs.strides, attrs.dilations, out_sizes)
    tap_axes = tuple(range(-len(out_sizes), 0))
    return (from_channels_first(taps.max(axis=tap_axes), layout),)


def _avg_pool_reference(inputs: Sequence[np.ndarray], attrs: PoolAttrs) -> tuple[np.ndarray, ...]:
    (data,) = inputs
    layout = parse_data_layout(attrs.layout, "avg_pool")
    x = to_channels_first(data, layout)
    sizes = x.shape[2:]
    spatial_rank = len(sizes)
    out_sizes = _pool_output_sizes("avg_pool", TensorType.of(data), attrs)
    padding = _ceil_mode_padding(sizes, out_sizes, attrs)
    padded = pad_spatial(x.astype(np.float64), padding)
    tap_axes = tuple(range(-spatial_rank, 0))
    sums = windows(padded, attrs.kernel, attrs.strides, attrs.dilations, out_sizes).sum(tap_axes)
    # The divisor counts the window taps that fall on the input, plus (with
    # count_include_pad) those on the declared padding; taps on the extra end padding
    # that ceil mode adds never count.
    counted = np.zeros((1, 1, *padded.shape[2:]))
    region: list[slice] = [
        slice(0, padding[axis] + sizes[axis] + attrs.padding[axis + spatial_rank])
        if attrs.count_include_pad
        else slice(padding[axis], padding[axis] + sizes[axis])
        for axis in range(spatial_rank)
    ]
    counted[(slice(None), slice(None), *region)] = 1
    counts = windows(counted, attrs.kernel, attrs.strides, attrs.dilations, out_sizes).sum(tap_axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (from_channels_first(sums / counts, layout).astype(data.dtype),)


def _pool_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: PoolAttrs
) -> int:
    # One comparison or addition per window tap.
    return outputs[0].size * math.prod(attrs.kernel)


# -- global pools ----------------------------------------------------------------------


def _global_pool_infer(
    op: str,
) -> Callable[[Sequence[TensorType], LayoutAttrs], tuple[TensorType, ...]]:
    def infer(inputs: Sequence[TensorType], attrs: LayoutAttrs) -> tuple[TensorType, ...]:
        (data,) = inputs
        _check_dtype(op, data.dtype)
        layout = parse_data_layout(attrs.layout, op, data.ndim)
        shape = tuple(1 if axis in layout.spatial_axes else d for axis, d in enumerate(data.shape))
        return (TensorType(shape, data.dtype),)

    return infer


def _global_avg_pool_reference(
    inputs: Sequence[np.ndarray], attrs: LayoutAttrs
) -> tuple[np.ndarray, ...]:
    (data,) = inputs
    axes = parse_data_layout(attrs.layout, "global_avg_pool").spatial_axes
    return (data.astype(np.float64).mean(axis=axes, keepdims=True).astype(data.dtype),)


def _global_max_pool_reference(
    inputs: Sequence[np.ndarray], attrs: LayoutAttrs
) -> tuple[np.ndarray, ...]:
    (data,) = inputs
    axes = parse_data_layout(attrs.layout, "global_max_pool").spatial_axes
    return (data.max(axis=axes, keepdims=True),)


def _global_pool_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: LayoutAttrs
) -> int:
    return inputs[0].size


def _register_all() -> None:
    window_pools = {"max_pool": _max_pool_reference, "avg_pool": _avg_pool_reference}
    for name, reference in window_pools.items():
        register_op(
            OpDef(
                name,
                OpPattern.ANCHOR,
                _pool_infer(name),
                reference,
                attrs_type=PoolAttrs,
                macs=_pool_macs,
                doc=f"{name}: N-d windows, ceil mode, dilations, channels-first or -last.",
            )
        )
    global_pools = {
        "global_avg_pool": _global_avg_pool_reference,
        "global_max_pool": _global_max_pool_reference,
    }
    for name, global_reference in global_pools.items():
        register_op(
            OpDef(
                name,
                OpPattern.ANCHOR,
                _global_pool_infer(name),
                global_reference,
                attrs_type=LayoutAttrs,
                macs=_global_pool_macs,
                doc=f"{name}: reduce every spatial axis to length 1.",
            )
        )


_register_all()
