"""Ops that read constant weights in a blocked layout, which the `pack_weights` pass
re-lays them out into at build time (see `ember.graph.passes.pack_weights`).

`dense_pack(x[..., K], weight[N/b, K, b])` computes `dense(x, W)` for the `W[N, K]`
with `W[n, k] = weight[n // b, k, n % b]`: the weight's output channels are split into
blocks of `b` (the target's vector lanes), innermost. One step along K then reads one
contiguous vector of `b` output channels, which a kernel multiplies by one broadcast
input element (layout `NK<b>n` in `mod.json`, TVM's name for it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, NoAttrs, TensorType
from ember.graph.ops.conv import accumulation_dtype
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

__all__ = ["dense_pack_layout", "pack_dense_weight", "unpack_dense_weight"]
