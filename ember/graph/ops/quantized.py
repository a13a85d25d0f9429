"""Integer ops of quantized models: `qconv`, a conv of uint8 / int8 data and an int8
weight summed exactly in int32, and `qconv_pack`, the same with its weight packed for
the dot-product instructions (pack_weights makes it).

A quantized conv `conv(dequantize(x), dequantize(w))` is `scale_x * scale_w *
sum((x - zero_point) * w)`; the `quantized_ops` pass keeps the sum in integers (`qconv`)
and the scaling, bias and requantization as float elementwise ops after it, which fuse
into the conv's kernel as its epilogue.

`qconv_pack(data, weight, correction)` reads the weight as `[O/b, *kernel, I4/4, b, 4]`
(`I4`: the input channels rounded up to a multiple of 4, the extra ones zero): each
output channel's four consecutive input channels side by side, so one 32-bit lane of a
vector holds the four int8 weights that one dot-product instruction (x86 `vpdpbusd`,
ARM `sdot`) multiplies by four input bytes. It sums `u * w` over `u = x + offset` (0
for uint8 data, 128 for int8: the unsigned bytes the x86 instructions take) padded by
`zero_point + offset`, which is what those instructions multiply, and adds
`correction[o] = -(zero_point + offset) * sum(w[o])` (made at build time), so the
result is the same as `qconv`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import TensorType
from ember.graph.ops.attrs import QConvAttrs
from ember.graph.ops.conv import conv_infer, conv_macs, conv_reference
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.ops.registry import OpDef, OpPattern, register_op

DATA_DTYPES = ("uint8", "int8")
# Input channels one dot-product lane multiplies.
DOT_GROUP = 4


def _as_float(value: TensorType) -> TensorType:
    return TensorType(value.shape, "float32")


def _check_integers(op: str, data: TensorType, weight: TensorType) -> None:
    if data.dtype not in DATA_DTYPES or weight.dtype != "int8":
        raise ShapeError(
            f"{op}: takes uint8 or int8 data and an int8 weight, got {data.dtype} and "
            f"{weight.dtype}"
        )


def _qconv_infer(inputs: Sequence[TensorType], attrs: QConvAttrs) -> tuple[TensorType, ...]:
    data, weight = inputs
    _check_integers("qconv", data, weight)
    (out,) = conv_infer([_as_float(data), _as_float(weight)], attrs, "qconv")
    return (TensorType(out.shape, "int32"),)


def _qconv_reference(inputs: Sequence[np.ndarray], attrs: QConvAttrs) -> tuple[np.ndarray, ...]:
    data, weight = inputs
    # float64 holds every partial sum exactly (products < 2**16, sums < 2**53).
    centred = data.astype(np.float64) - attrs.data_zero_point
    (out,) = conv_reference([centred, weight.astype(np.float64)], attrs)
    return (out.astype(np.int32),)


register_op(
    OpDef(
        "qconv",
        OpPattern.ANCHOR,
        _qconv_infer,
        _qconv_reference,
        attrs_type=QConvAttrs,
        min_inputs=2,
        max_inputs=2,
        macs=lambda inputs, outputs, attrs: conv_macs(inputs, outputs, attrs),
        counts_macs=True,
        doc="conv of uint8/int8 data (minus data_zero_point) and an int8 weight, exact in int32.",
    )
)


# -- qconv_pack -----------------------------------------------------------------------


def qconv_pack_layout(block: int, spatial_rank: int = 2) -> str:
    """The layout name of a `qconv_pack` weight (`OHWI16o4i` for 2-d, blocks of 16)."""
    spatial = {1: "W", 2: "HW", 3: "DHW"}[spatial_rank]
    return f"O{spatial}I{block}o{DOT_GROUP}i"


def pack_qconv_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """An `...IO` weight `[*kernel, I, O]` as `[O/block, *kernel, I4/4, block, 4]`, the
    input channels padded with zeros to a multiple of 4; O must be whole blocks."""
    *kernel, inputs, outputs = weight.shape
    if outputs % block:
        raise ShapeError(f"qconv_pack: {outputs} output channels are not whole blocks of {block}")
    padded_inputs = -(-inputs // DOT_GROUP) * DOT_GROUP
    padding = [(0, 0)] * len(kernel) + [(0, padded_inputs - inputs), (0, 0)]
    padded = np.pad(weight, padding)
    rank = len(kernel)
    blocks = padded.reshape(*kernel, padded_inputs // DOT_GROUP, DOT_GROUP, outputs // block, block)
    # axes: kernel 0..rank-1, I/4 rank, 4 rank+1, O/b rank+2, b rank+3
    order = (rank + 2, *range(rank), rank, rank + 3, rank + 1)
    return np.ascontiguousarray(blocks.transpose(order))


def unpack_qconv_weight(packed: np.ndarray, inputs: int | None = None) -> np.ndarray:
    """The `...IO` weight `[*kernel, inputs, O]` that a `qconv_pack` weight stands for
    (all its input channels, padding included, when `inputs` is None)."""
    blocks, *kernel, groups, block, _ = packed.shape
    rank = len(kernel)
    order = (*range(1, rank + 1), rank + 1, rank + 3, 0, rank + 2)
    unpacked = packed.transpose(order).reshape(*kernel, groups * DOT_GROUP, blocks * block)
    return unpacked if inputs is None else unpacked[..., :inputs, :]


def data_offset(dtype: str) -> int:
    """What `qconv_pack` adds to each data byte to make it unsigned, as the x86
    instructions multiply it: 128 for int8 data (x + 128 is x ^ 0x80), 0 for uint8."""
    return 128 if dtype == "int8" else 0


def qconv_correction(weight: np.ndarray, zero_point: int, data_dtype: str) -> np.ndarray:
    """`-(zero_point + offset) * sum(w[o])` per output channel of an `...IO` weight:
    what `qconv_pack` adds to its sum over the unsigned data (offset by `data_offset`)
    padded by its zero point."""
    sums = weight.astype(np.int64).reshape(-1, weight.shape[-1]).sum(axis=0)
    return (-(zero_point + data_offset(data_dtype)) * sums).astype(np.int32)


def _unpacked_type(data: TensorType, weight: TensorType, attrs: QConvAttrs) -> TensorType:
    """The `...IO` weight a packed one stands for, after checking qconv_pack's terms."""
    layout = parse_data_layout(attrs.layout, "qconv_pack", data.ndim)
    rank = layout.spatial_rank
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "qconv_pack", rank)
    if not layout.channels_last or kernel_layout.out_axis != rank + 1 or attrs.groups != 1:
        raise ShapeError(
            "qconv_pack: packs only channels-last data with an ...IO kernel layout and one "
            f"group, got layout {attrs.layout!r}, kernel layout {attrs.kernel_layout!r}, "
            f"groups {attrs.groups}"
        )
    if weight.ndim != rank + 4 or weight.shape[-1] != DOT_GROUP:
        raise ShapeError(
            f"qconv_pack: weight {weight} must be [O/b, *kernel, I/4, b, 4] (rank {rank + 4})"
        )
    blocks, *kernel, groups, block, _ = weight.shape
    inputs = data.shape[layout.channel_axis]
    if groups != -(-inputs // DOT_GROUP):
        raise ShapeError(
            f"qconv_pack: weight {weight} holds {groups * DOT_GROUP} input channels, the data "
            f"has {inputs}"
        )
    return TensorType((*kernel, inputs, blocks * block), weight.dtype)


def _qconv_pack_infer(inputs: Sequence[TensorType], attrs: QConvAttrs) -> tuple[TensorType, ...]:
    data, weight, correction = inputs
    _check_integers("qconv_pack", data, weight)
    unpacked = _unpacked_type(data, weight, attrs)
    outputs = unpacked.shape[-1]
    if correction.dtype != "int32" or correction.shape != (outputs,):
        raise ShapeError(
            f"qconv_pack: correction must be int32[{outputs}] (one per output channel), got "
            f"{correction}"
        )
    (out,) = conv_infer([_as_float(data), _as_float(unpacked)], attrs, "qconv_pack")
    return (TensorType(out.shape, "int32"),)


def _qconv_pack_reference(
    inputs: Sequence[np.ndarray], attrs: QConvAttrs
) -> tuple[np.ndarray, ...]:
    data, packed, correction = inputs
    layout = parse_data_layout(attrs.layout, "qconv_pack", data.ndim)
    weight = unpack_qconv_weight(packed)  # the padding channels too: they meet z
    # With u = x + offset and z = zero point + offset, the sum over z-padding (spatial
    # and of the channels) of u * w is sum((x - zero point) * w) over the data plus
    # z * sum(w) over every tap and channel, exactly.
    channels = data.shape[layout.channel_axis]
    (centred,) = _qconv_reference([data, weight[..., :channels, :]], attrs)
    full = -qconv_correction(weight, attrs.data_zero_point, str(data.dtype)).astype(np.int64)
    return ((centred + full + correction).astype(np.int32),)


def _qconv_pack_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: QConvAttrs
) -> int:
    unpacked = _unpacked_type(inputs[0], inputs[1], attrs)
    return conv_macs([inputs[0], unpacked], outputs, attrs)


register_op(
    OpDef(
        "qconv_pack",
        OpPattern.ANCHOR,
        _qconv_pack_infer,
        _qconv_pack_reference,
        attrs_type=QConvAttrs,
        min_inputs=3,
        max_inputs=3,
        macs=_qconv_pack_macs,
        counts_macs=True,
        doc="qconv (channels-last, one group) with the weight packed as [O/b, *kernel, I/4, "
        "b, 4] and a per-channel int32 correction for zero-point padding (pack_weights).",
    )
)
