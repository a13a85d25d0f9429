"""Rewrite 3x3, stride-1 convs with constant weights into Winograd's F(m x m, 3 x 3):
an input transform, a batch of matrix products with the weight transformed at build
time, and an output transform (`ember.graph.ops.winograd`).

Why: a direct conv's default schedule runs at ~80% of the FMA peak (ONNX Runtime's
too), so no schedule of it can go much faster. F(4x4, 3x3) needs 36 multiply-adds where
the conv needs 144, F(2x2, 3x3) 16 where it needs 36, for two transforms that are sums
of a few terms per element and move the data through memory twice more. Two ResNet
convs at 56x56x64, two threads (BENCHMARKS.md, issue 19 sixth session): 2.34 ms direct,
1.41 as F(2x2), 1.10 as F(4x4); at 28x28x128 2.36, 1.21, 0.92. Each tile of the
product's rows reads the whole transformed weight (36/9 of the conv's for F(4x4)), so
a conv over few tiles is bound by reading it: 7x7x512 (16 tiles of 2x2) ran 3.12 ms as
F(2x2) against 2.46 direct. `choose_tile` takes the largest tile with `MIN_TILES` tiles
or more, else keeps the conv direct.

Rounding: the transformed weight is computed in float64 and rounded once; the
transforms add terms with coefficients up to 5 (F(4x4)), so the result differs from
the direct sum by a few ulps of the output's scale (2e-6 relative for F(4x4) in
`tests/graph/ops/test_winograd.py`, against ONNX Runtime's Conv).

`EMBER_WINOGRAD=0` keeps every conv direct (`ember.config.winograd_enabled`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ember.config import winograd_enabled
from ember.device import device_model
from ember.graph.ir import Graph, NameSupply, Node, Params, TensorType, Value, prune_params
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.winograd import (
    KERNEL,
    TILE_SIZES,
    WinogradInputAttrs,
    WinogradOutputAttrs,
    transform_weight,
)
from ember.graph.passes.rewrite import make_node
from ember.target import Target

# Tile sizes, the largest first: F(4x4, 3x3) does 36 multiply-adds per tile and
# channel pair where the conv does 144, F(2x2, 3x3) 16 where it does 36.
TILES = tuple(sorted(TILE_SIZES, reverse=True))
# A product's rows are the conv's output tiles, and each row tile reads the whole
# transformed weight (16/9 of the conv's): with fewer rows than this the product is
# bound by reading it (7x7x512: 3.12 ms as F(2x2) against 2.46 direct, two convs,
# weights in cache; 14x14x256, 49 tiles: 1.33 against 2.26).
MIN_TILES = 32


def winograd(
    graph: Graph, params: Mapping[str, np.ndarray], target: Target
) -> tuple[Graph, Params]:
    """Replace the convs `choose_tile` picks a tile for by Winograd's algorithm.

    Pre: `params` holds the arrays of the graph's params.
    Post: every float32 `conv` with NHWC data, an HWIO weight that is a param,
    a 3x3 kernel, strides and dilations 1 and one group for which `choose_tile` gives
    a tile m is `winograd_output(matmul(winograd_input(x), U))` with `U` a new param
    `<weight>_winograd<m>` (`transform_weight`); the output keeps its value and name.
    A weight read by several convs is transformed once per tile; params nothing reads any more
    are dropped. Nothing changes when `EMBER_WINOGRAD=0` or the target's vectors have
    fewer than 4 float lanes.
    """
    if not winograd_enabled() or device_model(target).lanes("float32") < 4:
        return graph, dict(params)
    names = NameSupply.for_graph(graph)
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    new_params = list(graph.params)
    transformed: dict[tuple[str, int], Value] = {}  # (weight, tile) -> transformed
    nodes: list[Node] = []
    for node in graph.nodes:
        tile = choose_tile(node) if _eligible(node, arrays) else None
        if tile is None:
            nodes.append(node)
            continue
        key = (node.inputs[1].name, tile)
        if key not in transformed:
            array = transform_weight(arrays[key[0]], tile)
            value = Value(names.fresh(f"{key[0]}_winograd{tile}"), TensorType.of(array))
            arrays[value.name] = array
            new_params.append(value)
            transformed[key] = value
        nodes.extend(_winograd_nodes(node, transformed[key], tile, names))
    rebuilt = graph.replace(nodes=tuple(nodes), params=tuple(new_params))
    return prune_params(rebuilt, arrays)


def _eligible(node: Node, arrays: Mapping[str, np.ndarray]) -> bool:
    """Whether `node` is a conv Winograd's F(m x m, 3 x 3) computes as it stands."""
    attrs = node.attrs
    if node.op != "conv" or len(node.inputs) != 2 or not isinstance(attrs, ConvAttrs):
        return False
    weight = arrays.get(node.inputs[1].name)
    return (
        weight is not None
        and weight.dtype == np.float32
        and attrs.layout == "NHWC"
        and attrs.kernel_layout == "HWIO"
        and weight.shape[:2] == (KERNEL, KERNEL)
        and attrs.strides == (1, 1)
        and attrs.dilations == (1, 1)
        and attrs.groups == 1
    )


def choose_tile(node: Node) -> int | None:
    """The largest tile size over which an eligible conv has `MIN_TILES` output tiles
    (the product's rows, which reuse each weight vector), or None: keep it direct."""
    batch, height, width, _ = node.outputs[0].shape
    for tile in TILES:
        if batch * math.ceil(height / tile) * math.ceil(width / tile) >= MIN_TILES:
            return tile
    return None


def _winograd_nodes(node: Node, weight: Value, tile: int, names: NameSupply) -> list[Node]:
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    output = node.outputs[0]
    top, left, bottom, right = attrs.padding
    transform_in = make_node(
        "winograd_input",
        [node.inputs[0]],
        WinogradInputAttrs(tile, (top, left, bottom, right)),
        name=names.fresh(f"{node.name}_winograd_input"),
    )
    product = make_node(
        "matmul",
        [transform_in.outputs[0], weight],
        name=names.fresh(f"{node.name}_winograd_product"),
    )
    _, height, width, _ = output.shape
    transform_out = make_node(
        "winograd_output",
        [product.outputs[0]],
        WinogradOutputAttrs(tile, height, width),
        name=node.name,
        output_names=[output.name],
    )
    return [transform_in, product, transform_out]
