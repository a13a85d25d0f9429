"""Re-lay out constant weights at build time into the blocked layouts the CPU kernels
read, so that no kernel transposes or gathers weights at run time.

A `dense(x, W[N, K])` stores its weight transposed: along the output channels, the
axis a kernel vectorizes, consecutive elements are K apart. Packed as
`[N/b][K][b]` (`dense_pack`, layout `NK<b>n`) with `b` the target's vector lanes,
each step of the reduction reads one contiguous vector of `b` output channels, and a
register tile of output rows x vectors streams the weight panel front to back.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ember.graph.ir import (
    FLOAT_DTYPES,
    Graph,
    NameSupply,
    Node,
    Params,
    TensorType,
    Value,
    prune_params,
)
from ember.graph.ops.attrs import SliceAttrs
from ember.graph.ops.packed import dense_pack_layout, pack_dense_weight
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
    """Replace products with constant weights by ops reading them packed for `target`.

    Pre: `params` holds the arrays of the graph's params.
    Post: every `dense(x, W)` whose weight `W[N, K]` is a floating-point param, and
    every `matmul(a, B)` whose `B[K, N]` is a 2-D floating-point param (that is
    `dense(a, B.T)`), is a `dense_pack` reading a new param `<weight>_NK<b>n` of shape
    `[N/b, K, b]` (`block_size` picks `b`). When `b` does not divide N, the weight
    gets zero rows up to a multiple of `b` and a `slice` after the `dense_pack` cuts
    the output back to N. Outputs keep their values and
    names; a weight read by several products is packed once; params nothing reads
    any more are dropped; targets with vectors of fewer than 4 lanes are unchanged.
    """
    names = NameSupply.for_graph(graph)
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    new_params = list(graph.params)
    packed: dict[tuple[str, str], Value] = {}  # (weight, op) -> packed param
    nodes: list[Node] = []
    for node in graph.nodes:
        weight = _constant_weight(node, arrays, target)
        if weight is None:
            nodes.append(node)
            continue
        key = (node.inputs[1].name, node.op)
        if key not in packed:
            lanes = target.lanes(str(weight.dtype))
            rows = node.inputs[0].type.size // max(1, weight.shape[1])
            block = block_size(weight.shape[0], lanes, rows)
            array = pack_dense_weight(_padded_rows(weight, block), block)
            hint = f"{node.inputs[1].name}_{dense_pack_layout(block)}"
            packed[key] = Value(names.fresh(hint), TensorType.of(array))
            arrays[packed[key].name] = array
            new_params.append(packed[key])
        nodes.extend(_dense_pack_nodes(node, packed[key], weight.shape[0], names))
    rebuilt = graph.replace(nodes=tuple(nodes), params=tuple(new_params))
    return prune_params(rebuilt, arrays)


def block_size(channels: int, lanes: int, rows: int = 1) -> int:
    """The block of output channels for `channels`, vectors of `lanes` and `rows`
    input rows: `lanes` when it divides `channels`, or when there are several rows
    and padding to whole vectors adds at most 1/8 of the channels (1000 classes at
    batch 16 -> 1008 in vectors of 16: 1.5x faster than in vectors of 8; a single row
    is bound by reading the weight, where the narrower vector costs nothing and the
    `slice` a kernel); else the widest power of two down to 4 that divides
    `channels`; else `lanes`, padded."""
    padding = -channels % lanes
    if padding == 0 or (rows >= MIN_PADDED_ROWS and padding <= channels // PADDING_FRACTION):
        return lanes
    block = lanes // 2
    while block >= MIN_BLOCK:
        if channels % block == 0:
            return block
        block //= 2
    return lanes


def packed_layouts(graph: Graph) -> dict[str, str]:
    """Param name -> the layout it was packed into, for every param a packed op reads
    (what `mod.json` reports beside the param's shape)."""
    params = {value.name for value in graph.params}
    return {
        node.inputs[1].name: dense_pack_layout(node.inputs[1].shape[2])
        for node in graph.nodes
        if node.op == "dense_pack" and node.inputs[1].name in params
    }


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
    if target.lanes(str(array.dtype)) < MIN_BLOCK:
        return None
    return array if node.op == "dense" else array.T


def _padded_rows(weight: np.ndarray, block: int) -> np.ndarray:
    """`weight[N, K]` with zero rows appended up to a multiple of `block`."""
    missing = -weight.shape[0] % block
    return np.pad(weight, ((0, missing), (0, 0))) if missing else weight


def _dense_pack_nodes(node: Node, weight: Value, channels: int, names: NameSupply) -> list[Node]:
    """`node` as a `dense_pack` of `weight`, sliced back to `channels` if padded."""
    output = node.outputs[0]
    padded = weight.shape[0] * weight.shape[2]
    if padded == channels:
        return [
            make_node(
                "dense_pack", [node.inputs[0], weight], name=node.name, output_names=[output.name]
            )
        ]
    wide = make_node(
        "dense_pack",
        [node.inputs[0], weight],
        name=names.fresh(f"{node.name}_padded"),
    )
    rank = len(output.shape)
    attrs = SliceAttrs((0,) * rank, output.shape, (1,) * rank)
    cut = make_node("slice", [wide.outputs[0]], attrs, name=node.name, output_names=[output.name])
    return [wide, cut]
