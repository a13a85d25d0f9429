"""Re-lay out constant weights at build time into the blocked layouts the CPU kernels
read, so that no kernel transposes or gathers weights at run time.

A `dense(x, W[N, K])` stores its weight transposed: along the output channels, the
axis a kernel vectorizes, consecutive elements are K apart. Packed as
`[N/b][K][b]` (`dense_pack`, layout `NK<b>n`) with `b` the target's vector lanes,
each step of the reduction reads one contiguous vector of `b` output channels, and a
register tile of output rows x vectors streams the weight panel front to back.

A channels-last `conv(x, W[*kernel, I, O])` (one group) reads its weight the same way,
a vector of output channels per input channel and tap, and in `HWIO` those vectors are
a whole row of output channels apart (2 KiB at 512 channels): a tile touches two lines
of each 4 KiB page, which the hardware prefetchers do not follow. Packed as
`[O/b][*kernel][I][b]` (`conv_pack`, layout `OHWI<b>o`) each vector of the tile streams
its weights contiguously. The gain is where weights stream from memory: ResNet-18's
3x3 convs at 14x14x256 and 7x7x512 with their weights evicted before each run ran
1.4-1.75x faster packed (0.96 -> 0.55 ms, 1.11 -> 0.82 ms, two threads), the
activation-bound early layers the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np

from ember.device import device_model
from ember.graph.ir import (
    FLOAT_DTYPES,
    Attrs,
    Graph,
    NameSupply,
    Node,
    Params,
    TensorType,
    Value,
    prune_params,
)
from ember.graph.ops.attrs import ConvAttrs, QConvAttrs, SliceAttrs
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.ops.packed import (
    conv_pack_layout,
    dense_pack_layout,
    pack_conv_weight,
    pack_dense_weight,
)
from ember.graph.ops.quantized import pack_qconv_weight, qconv_correction, qconv_pack_layout
from ember.graph.passes.rewrite import make_node
from ember.target import Target

# Narrowest vector a block may be: below this a packed kernel gains nothing.
MIN_BLOCK = 4
# Padding output channels up to whole vectors of the target's width is worth it (a
# `slice` after the product cuts them off again) when it adds at most 1/8 of them and
# the product has rows enough to be bound by arithmetic (see `block_size`).
PADDING_FRACTION = 8
MIN_PADDED_ROWS = 4


def pack_weights(
    graph: Graph, params: Mapping[str, np.ndarray], target: Target
) -> tuple[Graph, Params]:
    """Replace products and convs with constant weights by ops reading them packed for
    `target`.

    Pre: `params` holds the arrays of the graph's params.
    Post: every `dense(x, W)` whose weight `W[N, K]` is a floating-point param, and
    every `matmul(a, B)` whose `B[K, N]` is a 2-D floating-point param (that is
    `dense(a, B.T)`), is a `dense_pack` reading a new param `<weight>_NK<b>n` of shape
    `[N/b, K, b]` (`block_size` picks `b`). When `b` does not divide N, the weight
    gets zero rows up to a multiple of `b` and a `slice` after the `dense_pack` cuts
    the output back to N. Every channels-last `conv` with one group, an `...IO` kernel
    layout and a constant floating-point weight whose output channels are whole blocks
    of 4 or more, or worth padding to whole vectors (`conv_block`), is a `conv_pack`
    reading `<weight>_OHWI<b>o` `[O/b, *kernel, I, b]`, with a `slice` after it
    if padded. Every channels-last `qconv` with one group and a constant int8 weight
    is a `qconv_pack` reading `<weight>_OHWI<b>o4i` `[O/b, *kernel, I/4, b, 4]` (blocks
    of the target's int32 lanes) and a per-channel int32 correction for its data's
    zero point, sliced like a conv if padded. Outputs keep their values and
    names; a weight read by several products is packed once; params nothing reads
    any more are dropped; targets with vectors of fewer than 4 lanes are unchanged.
    """
    names = NameSupply.for_graph(graph)
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    new_params = list(graph.params)
    packed: dict[tuple[str, str], Value] = {}  # (weight, op) -> packed param

    def packed_param(node: Node, pack: Callable[[], tuple[np.ndarray, str]]) -> Value:
        """The param holding `node`'s weight as `pack()` re-lays it out (the array and
        its layout name), packed once per weight and op."""
        key = (node.inputs[1].name, node.op)
        if key not in packed:
            array, layout = pack()
            packed[key] = Value(
                names.fresh(f"{node.inputs[1].name}_{layout}"), TensorType.of(array)
            )
            arrays[packed[key].name] = array
            new_params.append(packed[key])
        return packed[key]

    nodes: list[Node] = []
    for node in graph.nodes:
        qconv_block = _qconv_block(node, arrays, target)
        if qconv_block is not None:
            weight_param = packed_param(node, partial(_packed_qconv, arrays, node, qconv_block))
            sums = _qconv_correction(arrays, node, qconv_block)
            correction = Value(names.fresh(f"{node.name}_correction"), TensorType.of(sums))
            arrays[correction.name] = sums
            new_params.append(correction)
            nodes.extend(
                _packed_nodes("qconv_pack", node, weight_param, names, node.attrs, [correction])
            )
            continue
        conv_block = _conv_block(node, arrays, target)
        if conv_block is not None:
            weight_param = packed_param(node, partial(_packed_conv, arrays, node, conv_block))
            nodes.extend(_packed_nodes("conv_pack", node, weight_param, names, node.attrs))
            continue
        weight = _constant_weight(node, arrays, target)
        if weight is None:
            nodes.append(node)
            continue
        rows = node.inputs[0].type.size // max(1, weight.shape[1])
        block = block_size(weight.shape[0], device_model(target).lanes(str(weight.dtype)), rows)
        weight_param = packed_param(node, partial(_packed_dense, weight, block))
        nodes.extend(_packed_nodes("dense_pack", node, weight_param, names, None))
    rebuilt = graph.replace(nodes=tuple(nodes), params=tuple(new_params))
    return prune_params(rebuilt, arrays)


def block_size(channels: int, lanes: int, rows: int = 1) -> int:
    """The block of output channels for `channels`, vectors of `lanes` and `rows`
    input rows: `lanes` when it divides `channels`, or when there are several rows
    and padding to whole vectors adds at most 1/8 of the channels (1000 classes at
    batch 16 -> 1008 in vectors of 16: 1.5x faster than in vectors of 8; a single row
    is bound by reading the weight, where the narrower vector costs nothing and the
    `slice` a kernel); else the widest power of two down to 4 that divides
    `channels`; else `lanes`, padded. A conv's block is the same but for the last
    case (`conv_block`)."""
    return conv_block(channels, lanes, rows) or lanes


def conv_block(channels: int, lanes: int, pixels: int = 1) -> int | None:
    """The block of output channels of a packed conv over `pixels` output pixels:
    `lanes` when it divides `channels` or padding is worth it as `block_size` says
    (SqueezeNet's classifier, 1000 channels over 13x13 pixels on AVX-512: 1008 in
    vectors of 16 ran 0.60 ms, 1000 in vectors of 8 1.22 ms); else the widest power of
    two from `lanes` down to 4 that divides `channels`; else None (3 or 6 channels:
    unpacked, not padded to 16)."""
    padding = -channels % lanes
    if pixels >= MIN_PADDED_ROWS and 0 < padding <= channels // PADDING_FRACTION:
        return lanes
    block = lanes
    while block >= MIN_BLOCK:
        if channels % block == 0:
            return block
        block //= 2
    return None


def packed_layouts(graph: Graph) -> dict[str, str]:
    """Param name -> the layout it was packed into, for every param a packed op reads
    (what `mod.json` reports beside the param's shape)."""
    params = {value.name for value in graph.params}
    layouts: dict[str, str] = {}
    for node in graph.nodes:
        weight = node.inputs[1] if len(node.inputs) > 1 else None
        if weight is None or weight.name not in params:
            continue
        if node.op == "dense_pack":
            layouts[weight.name] = dense_pack_layout(weight.shape[2])
        elif node.op == "conv_pack":
            layouts[weight.name] = conv_pack_layout(weight.shape[-1], len(weight.shape) - 3)
    return layouts


def _conv_block(node: Node, arrays: Mapping[str, np.ndarray], target: Target) -> int | None:
    """The block to pack `node`'s weight in if it is a conv worth packing, else None."""
    if node.op != "conv" or len(node.inputs) != 2 or not isinstance(node.attrs, ConvAttrs):
        return None
    array = arrays.get(node.inputs[1].name)
    if array is None or str(array.dtype) not in FLOAT_DTYPES:
        return None
    return _channels_last_block(node, array, device_model(target).lanes(str(array.dtype)))


def _qconv_block(node: Node, arrays: Mapping[str, np.ndarray], target: Target) -> int | None:
    """The block to pack `node`'s weight in if it is a qconv to pack, else None: as a
    float conv's, with blocks of the target's int32 lanes (one accumulator per output
    channel)."""
    if node.op != "qconv" or not isinstance(node.attrs, QConvAttrs):
        return None
    array = arrays.get(node.inputs[1].name)
    if array is None:
        return None
    return _channels_last_block(node, array, device_model(target).lanes("int32"))


def _channels_last_block(node: Node, weight: np.ndarray, lanes: int) -> int | None:
    """`conv_block` for a conv-like node with a constant `weight`: channels-last data,
    an `...IO` kernel layout, one group and vectors of 4 lanes or more; else None."""
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    if weight.size == 0 or lanes < MIN_BLOCK:
        return None
    layout = parse_data_layout(attrs.layout, node.op, node.inputs[0].type.ndim)
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, node.op, layout.spatial_rank)
    rank = layout.spatial_rank
    if attrs.groups != 1 or not layout.channels_last or kernel_layout.out_axis != rank + 1:
        return None
    pixels = node.outputs[0].type.size // max(1, weight.shape[-1])
    return conv_block(weight.shape[-1], lanes, pixels)


def _packed_qconv(
    arrays: Mapping[str, np.ndarray], node: Node, block: int
) -> tuple[np.ndarray, str]:
    array = pack_qconv_weight(_padded(arrays[node.inputs[1].name], -1, block), block)
    return array, qconv_pack_layout(block, array.ndim - 4)


def _qconv_correction(arrays: Mapping[str, np.ndarray], node: Node, block: int) -> np.ndarray:
    attrs = node.attrs
    assert isinstance(attrs, QConvAttrs)
    weight = arrays[node.inputs[1].name]
    # Padding output channels are zero weights: their correction is zero.
    return _padded(qconv_correction(weight, attrs.data_zero_point, node.inputs[0].dtype), 0, block)


def _constant_weight(
    node: Node, arrays: Mapping[str, np.ndarray], target: Target
) -> np.ndarray | None:
    """The weight as `W[N, K]` if `node` is a product with a constant float weight
    worth packing for `target`, else None."""
    if node.op not in ("dense", "matmul") or len(node.inputs) != 2:
        return None
    array = arrays.get(node.inputs[1].name)
    if array is None or array.ndim != 2 or str(array.dtype) not in FLOAT_DTYPES or array.size == 0:
        return None
    if device_model(target).lanes(str(array.dtype)) < MIN_BLOCK:
        return None
    return array if node.op == "dense" else array.T


def _packed_conv(
    arrays: Mapping[str, np.ndarray], node: Node, block: int
) -> tuple[np.ndarray, str]:
    """`node`'s conv weight packed in blocks of `block`, and the layout's name."""
    # Zero output channels up to whole blocks; a slice cuts them off.
    array = pack_conv_weight(_padded(arrays[node.inputs[1].name], -1, block), block)
    return array, conv_pack_layout(block, array.ndim - 3)


def _packed_dense(weight: np.ndarray, block: int) -> tuple[np.ndarray, str]:
    """A dense weight `W[N, K]` padded and packed in blocks of `block`, and the
    layout's name."""
    return pack_dense_weight(_padded(weight, 0, block), block), dense_pack_layout(block)


def _padded(weight: np.ndarray, axis: int, block: int) -> np.ndarray:
    """`weight` with zeros appended along `axis` up to a multiple of `block` (a dense
    weight's rows, a conv weight's output channels)."""
    missing = -weight.shape[axis] % block
    if not missing:
        return weight
    widths = [(0, 0)] * weight.ndim
    widths[axis] = (0, missing)
    return np.pad(weight, widths)


def _packed_nodes(
    op: str,
    node: Node,
    weight: Value,
    names: NameSupply,
    attrs: Attrs | None,
    extra: Sequence[Value] = (),
) -> list[Node]:
    """`node` as `op` (`dense_pack`, `conv_pack`, `qconv_pack`) of `weight` (and the
    `extra` inputs), sliced back to the node's output channels if the weight's were
    padded."""
    output, inputs = node.outputs[0], [node.inputs[0], weight, *extra]
    packed = make_node(op, inputs, attrs, name=node.name, output_names=[output.name])
    if packed.outputs[0].type == output.type:
        return [packed]
    wide = make_node(op, inputs, attrs, name=names.fresh(f"{node.name}_padded"))
    rank = len(output.shape)
    attrs = SliceAttrs((0,) * rank, output.shape, (1,) * rank)
    cut = make_node("slice", [wide.outputs[0]], attrs, name=node.name, output_names=[output.name])
    return [wide, cut]
