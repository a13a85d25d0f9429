"""Ops that read constant weights in a blocked layout, which the `pack_weights` pass
re-lays them out into at build time (see `ember.graph.passes.pack_weights`).

`dense_pack(x[..., K], weight[N/b, K, b])` computes `dense(x, W)` for the `W[N, K]`
with `W[n, k] = weight[n // b, k, n % b]`: the weight's output channels are split into
blocks of `b` (the target's vector lanes), innermost. One step along K then reads one
contiguous vector of `b` output channels, which a kernel multiplies by one broadcast
input element (layout `NK<b>n` in `mod.json`, TVM's name for it).

`conv_pack(x, weight[O/b, *kernel, I, b])` computes `conv(x, W)` for channels-last data
and the `...IO` weight `W[*kernel, i, o] = weight[o // b, *kernel, i, o % b]` (layout
`OHWI<b>o` for 2-d): a register tile of output channels then reads its weights front
to back, one contiguous vector per input channel and tap, where `HWIO` puts the next
input channel a whole row of output channels (2 KiB at 512) further on. Groups other
than 1 are not packed. Its attrs are the `conv`'s, `kernel_layout` naming the
unpacked layout (`HWIO`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, NoAttrs, TensorType
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.conv import accumulation_dtype, conv_infer, conv_macs, conv_reference
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.ops.registry import OpDef, OpPattern, register_op


def dense_pack_layout(block: int) -> str:
    """The layout name of a `dense_pack` weight with `block` output channels a block."""
    return f"NK{block}n"


def pack_dense_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """`weight[N, K]` as `[N/block, K, block]`; N must be a multiple of `block`."""
    rows, columns = weight.shape
    if rows % block:
        raise ShapeError(f"dense_pack: {rows} output channels are not whole blocks of {block}")
    blocks = weight.reshape(rows // block, block, columns)
    return np.ascontiguousarray(blocks.transpose(0, 2, 1))


def unpack_dense_weight(packed: np.ndarray) -> np.ndarray:
    """The `W[N, K]` that a `dense_pack` weight `[N/b, K, b]` stands for."""
    blocks, columns, block = packed.shape
    return packed.transpose(0, 2, 1).reshape(blocks * block, columns)


def _dense_pack_infer(inputs: Sequence[TensorType], attrs: NoAttrs) -> tuple[TensorType, ...]:
    x, weight = inputs
    if x.dtype != weight.dtype or x.dtype not in FLOAT_DTYPES:
        raise ShapeError(
            f"dense_pack: x {x} and weight {weight} must share one floating-point dtype"
        )
    if x.ndim < 1 or weight.ndim != 3 or x.shape[-1] != weight.shape[1] or weight.shape[2] < 1:
        raise ShapeError(
            f"dense_pack: x {x} and weight {weight} do not fit; dense_pack takes x[..., K] "
            "and a weight[N/b, K, b] (output channels in blocks of b) and gives [..., N]"
        )
    return (TensorType((*x.shape[:-1], weight.shape[0] * weight.shape[2]), x.dtype),)


def _dense_pack_reference(inputs: Sequence[np.ndarray], attrs: NoAttrs) -> tuple[np.ndarray, ...]:
    x, packed = inputs
    accumulate = accumulation_dtype(x.dtype)
    weight = unpack_dense_weight(packed)
    return ((x.astype(accumulate) @ weight.T.astype(accumulate)).astype(x.dtype),)


def _dense_pack_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: NoAttrs
) -> int:
    return outputs[0].size * inputs[0].shape[-1]


register_op(
    OpDef(
        "dense_pack",
        OpPattern.ANCHOR,
        _dense_pack_infer,
        _dense_pack_reference,
        min_inputs=2,
        max_inputs=2,
        macs=_dense_pack_macs,
        counts_macs=True,
        doc="dense with the weight packed as [N/b, K, b] (pack_weights makes it).",
    )
)

# -- conv_pack ------------------------------------------------------------------------


def conv_pack_layout(block: int, spatial_rank: int = 2) -> str:
    """The layout name of a `conv_pack` weight (`OHWI16o` for 2-d, blocks of 16)."""
    spatial = {1: "W", 2: "HW", 3: "DHW"}[spatial_rank]
    return f"O{spatial}I{block}o"


def pack_conv_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """An `...IO` weight `[*kernel, I, O]` as `[O/block, *kernel, I, block]`; O must be
    a multiple of `block`."""
    *kernel, inputs, outputs = weight.shape
    if outputs % block:
        raise ShapeError(f"conv_pack: {outputs} output channels are not whole blocks of {block}")
    blocks = weight.reshape(*kernel, inputs, outputs // block, block)
    rank = len(kernel)
    order = (rank + 1, *range(rank), rank, rank + 2)
    return np.ascontiguousarray(blocks.transpose(order))


def unpack_conv_weight(packed: np.ndarray) -> np.ndarray:
    """The `...IO` weight `[*kernel, I, O]` that a `conv_pack` weight stands for."""
    blocks, *kernel, inputs, block = packed.shape
    rank = len(kernel)
    order = (*range(1, rank + 1), rank + 1, 0, rank + 2)
    return packed.transpose(order).reshape(*kernel, inputs, blocks * block)


def _unpacked_type(op: str, data: TensorType, weight: TensorType, attrs: ConvAttrs) -> TensorType:
    """The `...IO` weight type a packed one stands for, after checking the op's terms:
    channels-last data, an `...IO` kernel layout, one group, `[O/b, *kernel, I, b]`."""
    layout = parse_data_layout(attrs.layout, op, data.ndim)
    rank = layout.spatial_rank
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, op, rank)
    if not layout.channels_last or kernel_layout.out_axis != rank + 1 or attrs.groups != 1:
        raise ShapeError(
            f"{op}: packs only channels-last data with an ...IO kernel layout and one group, "
            f"got layout {attrs.layout!r}, kernel layout {attrs.kernel_layout!r}, "
            f"groups {attrs.groups}"
        )
    if weight.ndim != rank + 3:
        raise ShapeError(
            f"{op}: weight {weight} must be [O/b, *kernel, I, b] (rank {rank + 3}) for "
            f"{rank}-d data"
        )
    blocks, *kernel, inputs, block = weight.shape
    return TensorType((*kernel, inputs, blocks * block), weight.dtype)


def _conv_pack_infer(inputs: Sequence[TensorType], attrs: ConvAttrs) -> tuple[TensorType, ...]:
    data, weight = inputs
    return conv_infer([data, _unpacked_type("conv_pack", data, weight, attrs)], attrs, "conv_pack")


def _conv_pack_reference(inputs: Sequence[np.ndarray], attrs: ConvAttrs) -> tuple[np.ndarray, ...]:
    data, packed = inputs
    return conv_reference([data, unpack_conv_weight(packed)], attrs)


def _conv_pack_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: ConvAttrs
) -> int:
    unpacked = _unpacked_type("conv_pack", inputs[0], inputs[1], attrs)
    return conv_macs([inputs[0], unpacked], outputs, attrs)


register_op(
    OpDef(
        "conv_pack",
        OpPattern.ANCHOR,
        _conv_pack_infer,
        _conv_pack_reference,
        attrs_type=ConvAttrs,
        min_inputs=2,
        max_inputs=2,
        macs=_conv_pack_macs,
        counts_macs=True,
        doc="conv (channels-last, one group) with the weight packed as [O/b, *kernel, I, b] "
        "(pack_weights makes it).",
    )
)

__all__ = [
    "conv_pack_layout",
    "dense_pack_layout",
    "pack_conv_weight",
    "pack_dense_weight",
    "unpack_conv_weight",
    "unpack_dense_weight",
]
