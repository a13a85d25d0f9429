"""Integer convolutions of quantized models (`qconv`, `qconv_pack`; see
`ember.graph.ops.quantized`).

Both pad the data with its zero point (a padded tap then adds nothing once the zero
point is taken off) and accumulate in int32. `qconv` subtracts the zero point from each
element it reads; `qconv_pack` sums the unsigned bytes (int8 data plus 128), four input
channels per reduction step, and adds the per-channel correction after the sum:

    qconv(nn, yy, xx, ff) += (int32(pad_temp[nn, yy + ry, xx + rx, rc]) - zp) * int32(w[...])
    qconv_pack.acc(nn, yy, xx, ff) += int32(pad_temp[nn, .., 4*rc + 0])
                                        * int32(w[ff/16, ry, rx, rc, ff%16, 0])
                                    + ... (the group's three other input channels)
    qconv_pack(nn, yy, xx, ff) = qconv_pack.acc(nn, yy, xx, ff) + correction[ff]

The four products of a reduction step are what one 32-bit lane of a dot-product
instruction computes; code generation recognises them (`ember.codegen.c`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import QConvAttrs
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.ops.quantized import DOT_GROUP, data_offset
from ember.te import Expr, Tensor, cast, compute, reduce_axis, reduce_sum
from ember.topi.common import ELEMWISE, Declaration, pad_stage, scaled, typed
from ember.topi.conv import axis_names_in_layout, conv_names


def _qconv(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, QConvAttrs)
    data, weight = inputs
    layout = parse_data_layout(attrs.layout, "qconv", data.ndim)
    rank = layout.spatial_rank
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "qconv", rank)
    per_group = weight.shape[kernel_layout.in_axis]
    out_per_group = outputs[0].shape[layout.channel_axis] // attrs.groups
    kernel = [weight.shape[axis] for axis in kernel_layout.spatial_axes]
    padded = _padded(data, attrs, 0)
    # Depthwise (one channel per group): no reduction over channels, the data read at
    # the output's channel, so that a vector of channels reads contiguous bytes.
    depthwise = per_group == 1 and out_per_group == 1
    rc = reduce_axis(per_group, "rc")
    rs = [reduce_axis(k, n) for k, n in zip(kernel, conv_names(rank).reduce_spatial, strict=True)]
    zero_point = typed(attrs.data_zero_point, "int32")

    def element(*out: Expr) -> Expr:
        n, f = out[layout.batch_axis], out[layout.channel_axis]
        channel: Expr = rc.var
        if depthwise:
            channel = f
        elif attrs.groups > 1:
            channel = (f // out_per_group) * per_group + rc.var
        index: list[Expr] = [n] * data.ndim
        index[layout.channel_axis] = channel
        for axis, position, r, s, d in zip(
            layout.spatial_axes, [out[a] for a in layout.spatial_axes], rs, attrs.strides,
            attrs.dilations, strict=True,
        ):  # fmt: skip
            index[axis] = scaled(position, s) + scaled(r.var, d)
        weight_index: list[Expr] = [f] * weight.ndim
        weight_index[kernel_layout.in_axis] = typed(0, "int32") if depthwise else rc.var
        for axis, r in zip(kernel_layout.spatial_axes, rs, strict=True):
            weight_index[axis] = r.var
        read, w = padded[tuple(index)], weight[tuple(weight_index)]
        if exact_in_float:
            # float32 holds every partial sum exactly here (see below): FMAs on floats
            # are several times faster than int32 multiplies (vpmulld).
            product = (cast("float32", read) - typed(attrs.data_zero_point, "float32")) * cast(
                "float32", w
            )
        else:
            product = (cast("int32", read) - zero_point) * cast("int32", w)
        order = [*rs, rc] if layout.channels_last else [rc, *rs]
        return reduce_sum(product, rs if depthwise else order)

    name = f"qconv{rank}d_{attrs.layout.lower()}"
    names = axis_names_in_layout(layout, conv_names(rank))
    # A depthwise sum of products |x - zero point| * |w| <= 255 * 128 over the taps stays
    # below 2**24 (where float32 stops holding every integer) for up to 514 taps.
    exact_in_float = depthwise and math.prod(kernel) * 255 * 128 < 2**24
    sums = compute(outputs[0].shape, element, name, name, names)
    if not exact_in_float:
        return [sums]
    return [
        compute(outputs[0].shape, lambda *i: cast("int32", sums[i]), f"{name}.int", ELEMWISE, names)
    ]


def _qconv_pack(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, QConvAttrs)
    data, weight, correction = inputs
    layout = parse_data_layout(attrs.layout, "qconv_pack", data.ndim)
    rank = layout.spatial_rank
    _, *kernel, groups, block, _ = weight.shape
    channels = data.shape[layout.channel_axis]
    offset = data_offset(data.dtype)
    if offset:  # int8 data as the unsigned bytes x + 128 (x ^ 0x80)
        data = compute(
            data.shape,
            lambda *i: cast("uint8", cast("int32", data[i]) + typed(offset, "int32")),
            "unsigned_data",
            ELEMWISE,
        )
    padded = _padded(data, attrs, groups * DOT_GROUP - channels, offset)
    rc = reduce_axis(groups, "rc")
    rs = [reduce_axis(k, n) for k, n in zip(kernel, conv_names(rank).reduce_spatial, strict=True)]

    def element(*out: Expr) -> Expr:
        n, f = out[layout.batch_axis], out[layout.channel_axis]
        taps = [
            scaled(out[axis], s) + scaled(r.var, d)
            for axis, r, s, d in zip(
                layout.spatial_axes, rs, attrs.strides, attrs.dilations, strict=True
            )
        ]
        total: Expr | None = None
        for lane in range(DOT_GROUP):
            index: list[Expr] = [n] * data.ndim
            index[layout.channel_axis] = scaled(rc.var, DOT_GROUP) + lane
            for axis, tap in zip(layout.spatial_axes, taps, strict=True):
                index[axis] = tap
            read = cast("int32", padded[tuple(index)])
            w = cast("int32", weight[(f // block, *[r.var for r in rs], rc.var, f % block, lane)])
            total = read * w if total is None else total + read * w
        assert total is not None
        return reduce_sum(total, [*rs, rc])

    name = f"qconv{rank}d_{attrs.layout.lower()}"
    names = axis_names_in_layout(layout, conv_names(rank))
    accumulated = compute(outputs[0].shape, element, f"{name}.acc", name, names)

    def corrected(*out: Expr) -> Expr:
        return accumulated[out] + correction[(out[layout.channel_axis],)]

    return [compute(outputs[0].shape, corrected, name, "qconv_correction", names)]


def _padded(data: Tensor, attrs: QConvAttrs, extra_channels: int, offset: int = 0) -> Tensor:
    """The data padded spatially (and by `extra_channels` after its channels) with its
    zero point (plus `offset`, for data made unsigned)."""
    layout = parse_data_layout(attrs.layout, "qconv", data.ndim)
    rank = layout.spatial_rank
    before = [0] * data.ndim
    after = [0] * data.ndim
    for axis, begin, end in zip(
        layout.spatial_axes, attrs.padding[:rank], attrs.padding[rank:], strict=True
    ):
        before[axis], after[axis] = begin, end
    after[layout.channel_axis] = extra_channels
    fill = typed(attrs.data_zero_point + offset, data.dtype)
    return pad_stage(data, before, after, fill, "pad_temp")


DECLARATIONS: dict[str, Declaration] = {"qconv": _qconv, "qconv_pack": _qconv_pack}
