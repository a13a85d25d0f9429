"""Convolutions: 1-, 2- and 3-d, channels-first or -last data, OI.../...IO weights,
groups, strides, dilations and asymmetric padding; depthwise 2-d has its own stage;
transposed convolution gathers from a dilated, padded copy of its input.

The padded input is always its own stage (`pad_temp`, or `PaddedInput` for depthwise,
a plain copy when there is no padding), as in the seed's printout:

    pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i1 >= 1) && ...)), placeholder[...], 0f)
    conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, (yy + ry), (xx + rx), rc]*placeholder[...])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import ConvAttrs, ConvTransposeAttrs
from ember.graph.ops.layout import DataLayout, parse_data_layout, parse_kernel_layout
from ember.te import Expr, Tensor, compute, equal, reduce_axis, reduce_sum, select
from ember.te.tensor import IterVar
from ember.topi.common import Declaration, all_of, offset, pad_stage, scaled, typed

T = TypeVar("T")

_SPATIAL_NAMES = {1: ["xx"], 2: ["yy", "xx"], 3: ["zz", "yy", "xx"]}


@dataclass(frozen=True, slots=True)
class _Names:
    """Axis names of one convolution flavour."""

    batch: str
    channel: str
    spatial: Sequence[str]
    reduce_channel: str
    reduce_spatial: Sequence[str]


def conv_names(rank: int) -> _Names:
    spatial = _SPATIAL_NAMES[rank]
    return _Names("nn", "ff", spatial, "rc", ["r" + name[0] for name in spatial])


_DEPTHWISE_NAMES = _Names("b", "c", ["i", "j"], "", ["di", "dj"])


def _in_layout(layout: DataLayout, batch: T, channel: T, spatial: Sequence[T]) -> tuple[T, ...]:
    """Indices (or extents, or names) given per role, in the order of `layout`'s axes."""
    result: list[T] = [batch] * len(layout.name)
    result[layout.channel_axis] = channel
    for axis, value in zip(layout.spatial_axes, spatial, strict=True):
        result[axis] = value
    return tuple(result)


def axis_names_in_layout(layout: DataLayout, names: _Names) -> list[str]:
    return list(_in_layout(layout, names.batch, names.channel, names.spatial))


def _padded(data: Tensor, layout: DataLayout, padding: Sequence[int], name: str) -> Tensor:
    rank = layout.spatial_rank
    before = _in_layout(layout, 0, 0, padding[:rank])
    after = _in_layout(layout, 0, 0, padding[rank:])
    return pad_stage(data, before, after, typed(0, data.dtype), name)


def _conv(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, ConvAttrs)
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "conv", data.ndim)
    rank = layout.spatial_rank
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", rank)
    channels = data.shape[layout.channel_axis]
    per_group = weight.shape[kernel_layout.in_axis]
    if rank == 2 and attrs.groups > 1 and attrs.groups == channels and per_group == 1:
        return [_depthwise(data, weight, attrs, layout, outputs[0])]
    kernel = [weight.shape[axis] for axis in kernel_layout.spatial_axes]

    def read_weight(f: Expr, rc: Expr, rs: Sequence[Expr]) -> Expr:
        index: list[Expr] = [f] * weight.ndim
        index[kernel_layout.in_axis] = rc
        for axis, r in zip(kernel_layout.spatial_axes, rs, strict=True):
            index[axis] = r
        return weight[tuple(index)]

    prefix = "group_conv" if attrs.groups > 1 else "conv"
    name = f"{prefix}{rank}d_{attrs.layout.lower()}"
    return [
        _conv_stage(data, attrs, layout, per_group, kernel, read_weight, outputs[0].shape, name)
    ]


def _conv_pack(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    """`conv_pack`: the conv's stage reading `weight[f // b, *taps, rc, f % b]`."""
    assert isinstance(attrs, ConvAttrs)
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "conv_pack", data.ndim)
    _, *kernel, per_group, block = weight.shape

    def read_weight(f: Expr, rc: Expr, rs: Sequence[Expr]) -> Expr:
        return weight[(f // block, *rs, rc, f % block)]

    # Named as the unpacked conv's stage (the seed's printout); the weight read shows
    # the packing.
    name = f"conv{layout.spatial_rank}d_{attrs.layout.lower()}"
    return [
        _conv_stage(data, attrs, layout, per_group, kernel, read_weight, outputs[0].shape, name)
    ]


def _conv_stage(
    data: Tensor,
    attrs: ConvAttrs,
    layout: DataLayout,
    per_group: int,
    kernel: Sequence[int],
    read_weight: Callable[[Expr, Expr, Sequence[Expr]], Expr],
    shape: Sequence[int],
    name: str,
) -> Tensor:
    """The conv's padded input stage and its reduction; `read_weight(f, rc, taps)`
    reads the weight of output channel `f`, input channel `rc` (within the group) and
    kernel taps `taps`, in whatever layout the weight is."""
    rank = layout.spatial_rank
    out_per_group = shape[layout.channel_axis] // attrs.groups
    names = conv_names(rank)
    padded = _padded(data, layout, attrs.padding, "pad_temp")
    rc = reduce_axis(per_group, names.reduce_channel)
    rs = [reduce_axis(k, n) for k, n in zip(kernel, names.reduce_spatial, strict=True)]

    def element(*out: Expr) -> Expr:
        n, f = out[layout.batch_axis], out[layout.channel_axis]
        positions = [out[axis] for axis in layout.spatial_axes]
        channel: Expr = rc.var
        if attrs.groups > 1:
            channel = (f // out_per_group) * per_group + rc.var
        taps = [
            scaled(p, s) + scaled(r.var, d)
            for p, r, s, d in zip(positions, rs, attrs.strides, attrs.dilations, strict=True)
        ]
        read = padded[_in_layout(layout, n, channel, taps)]
        weight = read_weight(f, rc.var, [r.var for r in rs])
        return reduce_sum(read * weight, _reduce_order(layout, rc, rs))

    return compute(shape, element, name, name, axis_names_in_layout(layout, names))


def _reduce_order(layout: DataLayout, rc: IterVar, rs: list[IterVar]) -> list[IterVar]:
    """Channels-last reduces the channel innermost (contiguous in the data), as TVM."""
    return [*rs, rc] if layout.channels_last else [rc, *rs]


def _depthwise(
    data: Tensor, weight: Tensor, attrs: ConvAttrs, layout: DataLayout, output: TensorType
) -> Tensor:
    """One input channel per group: `DepthwiseConv2d(b, i, j, c) += PaddedInput[b,
    (i + di), (j + dj), c]*placeholder[di, dj, 0, c]` (channel multiplier m reads input
    channel c // m)."""
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", 2)
    channels = data.shape[layout.channel_axis]
    multiplier = weight.shape[kernel_layout.out_axis] // channels
    kernel = [weight.shape[axis] for axis in kernel_layout.spatial_axes]
    names = _DEPTHWISE_NAMES
    padded = _padded(data, layout, attrs.padding, "PaddedInput")
    rs = [reduce_axis(k, n) for k, n in zip(kernel, names.reduce_spatial, strict=True)]

    def element(*out: Expr) -> Expr:
        n, c = out[layout.batch_axis], out[layout.channel_axis]
        positions = [out[axis] for axis in layout.spatial_axes]
        taps = [
            scaled(p, s) + scaled(r.var, d)
            for p, r, s, d in zip(positions, rs, attrs.strides, attrs.dilations, strict=True)
        ]
        channel = c if multiplier == 1 else c // multiplier
        weight_index: list[Expr | int] = [c] * 4
        weight_index[kernel_layout.in_axis] = 0
        for axis, r in zip(kernel_layout.spatial_axes, rs, strict=True):
            weight_index[axis] = r.var
        product = padded[_in_layout(layout, n, channel, taps)] * weight[tuple(weight_index)]
        return reduce_sum(product, rs)

    tag = f"depthwise_conv2d_{attrs.layout.lower()}"
    axis_names = axis_names_in_layout(layout, names)
    return compute(output.shape, element, "DepthwiseConv2d", tag, axis_names)


# -- transposed convolution ------------------------------------------------------------


def _dilated_padded(
    data: Tensor,
    attrs: ConvTransposeAttrs,
    layout: DataLayout,
    kernel: Sequence[int],
    out_sizes: Sequence[int],
) -> Tensor:
    """`data` with stride-1 zeros between elements, shifted so that a plain
    convolution with the flipped kernel computes the transposed one: position q holds
    input (q - shift) / stride where that is a whole index, else 0, with shift =
    dilation * (kernel - 1) - pad_begin."""
    rank = layout.spatial_rank
    sizes = [data.shape[axis] for axis in layout.spatial_axes]
    lengths = [
        out + d * (k - 1) for out, d, k in zip(out_sizes, attrs.dilations, kernel, strict=True)
    ]
    shifts = [
        d * (k - 1) - attrs.padding[axis]
        for axis, (d, k) in enumerate(zip(attrs.dilations, kernel, strict=True))
    ]
    shape = _in_layout(
        layout, data.shape[layout.batch_axis], data.shape[layout.channel_axis], lengths
    )

    def element(*index: Expr) -> Expr:
        conditions: list[Expr] = []
        source: list[Expr] = []
        for axis in range(rank):
            stride, size, shift = attrs.strides[axis], sizes[axis], shifts[axis]
            moved = offset(index[layout.spatial_axes[axis]], -shift)
            if shift > 0:  # the first `shift` positions lie before the input
                conditions.append(moved >= 0)
            if stride > 1:
                conditions.append(equal(moved % stride, 0))
            if (lengths[axis] - 1 - shift) // stride >= size:
                conditions.append(moved < (size - 1) * stride + 1)
            source.append(moved if stride == 1 else moved // stride)
        batch, channel = index[layout.batch_axis], index[layout.channel_axis]
        read = data[_in_layout(layout, batch, channel, source)]
        condition = all_of(conditions)
        return read if condition is None else select(condition, read, typed(0, data.dtype))

    axis_names = [f"i{k}" for k in range(data.ndim)]
    return compute(shape, element, "data_pad", "injective,pad", axis_names)


def _conv_transpose(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, ConvTransposeAttrs)
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "conv_transpose", data.ndim)
    rank = layout.spatial_rank
    channels = data.shape[layout.channel_axis]
    in_per_group = channels // attrs.groups
    out_per_group = weight.shape[1]
    kernel = list(weight.shape[2:])
    out_sizes = [outputs[0].shape[axis] for axis in layout.spatial_axes]
    padded = _dilated_padded(data, attrs, layout, kernel, out_sizes)
    names = conv_names(rank)
    rc = reduce_axis(in_per_group, names.reduce_channel)
    rs = [reduce_axis(k, n) for k, n in zip(kernel, names.reduce_spatial, strict=True)]

    def element(*out: Expr) -> Expr:
        n, f = out[layout.batch_axis], out[layout.channel_axis]
        channel: Expr = rc.var
        filter_index: Expr = f
        if attrs.groups > 1:
            channel = (f // out_per_group) * in_per_group + rc.var
            filter_index = f % out_per_group
        taps = [
            out[axis] + scaled(r.var, d)
            for axis, r, d in zip(layout.spatial_axes, rs, attrs.dilations, strict=True)
        ]
        flipped = [(k - 1) - r.var if k > 1 else r.var for k, r in zip(kernel, rs, strict=True)]
        read = padded[_in_layout(layout, n, channel, taps)]
        return reduce_sum(
            read * weight[(channel, filter_index, *flipped)], _reduce_order(layout, rc, rs)
        )

    name = f"conv{rank}d_transpose_{attrs.layout.lower()}"
    axis_names = axis_names_in_layout(layout, names)
    return [compute(outputs[0].shape, element, name, name, axis_names)]


DECLARATIONS: dict[str, Declaration] = {
    "conv": _conv,
    "conv_pack": _conv_pack,
    "conv_transpose": _conv_transpose,
}
