"""Rewrite 3x3, stride-1 convs with constant weights into Winograd's F(m x m, 3 x 3):
an input transform, a batch of matrix products with the weight transformed at build
time, and an output transform (`ember.graph.ops.winograd`).

Why: a direct conv's default schedule runs at ~80% of the FMA peak (ONNX Runtime's
too), so no schedule of it can go much faster; F(2x2, 3x3) needs 16 multiply-adds where
the conv needs 36, for two transforms that are a few additions per element and move
the data through memory twice more. Where the product's matrices are large enough to
run near the peak and the activations outweigh the weights, the whole is faster (see
`worth_it`); where the weights outweigh the activations (a 7x7 image of 512 channels)
the product streams a transformed weight 16/9 the size of the conv's, and the direct
conv stays.

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
    WinogradInputAttrs,
    WinogradOutputAttrs,
    transform_weight,
)
from ember.graph.passes.rewrite import make_node
from ember.target import Target

TILE = 2
# A product's rows are the conv's output tiles, and each row tile reads the whole
# transformed weight (16/9 of the conv's): with fewer rows than this the product is
# bound by reading it (7x7x512: 3.12 ms as F(2x2) against 2.46 direct, two convs,
# weights in cache; 14x14x256, 49 tiles: 1.33 against 2.26).
MIN_TILES = 32


def winograd(
    graph: Graph, params: Mapping[str, np.ndarray], target: Target
) -> tuple[Graph, Params]:
    """Replace the convs `worth_it` says gain by Winograd's algorithm.

    Pre: `params` holds the arrays of the graph's params.
    Post: every float32 `conv` with NHWC data, an HWIO weight that is a param,
    a 3x3 kernel, strides and dilations 1 and one group that `worth_it` accepts is
    `winograd_output(matmul(winograd_input(x), U))` with `U` a new param
    `<weight>_winograd<m>` (`transform_weight`); the output keeps its value and name.
    A weight read by several convs is transformed once; params nothing reads any more
    are dropped. Nothing changes when `EMBER_WINOGRAD=0` or the target's vectors have
    fewer than 4 float lanes.
    """
    if not winograd_enabled() or device_model(target).lanes("float32") < 4:
        return graph, dict(params)
    names = NameSupply.for_graph(graph)
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    new_params = list(graph.params)
    transformed: dict[str, Value] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        if not _eligible(node, arrays) or not worth_it(node):
            nodes.append(node)
            continue
        weight = node.inputs[1].name
        if weight not in transformed:
            array = transform_weight(arrays[weight], TILE)
            value = Value(names.fresh(f"{weight}_winograd{TILE}"), TensorType.of(array))
            arrays[value.name] = array
            new_params.append(value)
            transformed[weight] = value
        nodes.extend(_winograd_nodes(node, transformed[weight], names))
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


def worth_it(node: Node) -> bool:
    """Whether an eligible conv is expected to run faster as F(2x2, 3x3): enough
    output tiles (the product's rows) to reuse each weight vector (`MIN_TILES`)."""
    batch, height, width, _ = node.outputs[0].shape
    return batch * math.ceil(height / TILE) * math.ceil(width / TILE) >= MIN_TILES


def _winograd_nodes(node: Node, weight: Value, names: NameSupply) -> list[Node]:
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    output = node.outputs[0]
    top, left, bottom, right = attrs.padding
    transform_in = make_node(
        "winograd_input",
        [node.inputs[0]],
        WinogradInputAttrs(TILE, (top, left, bottom, right)),
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
        WinogradOutputAttrs(TILE, height, width),
        name=node.name,
        output_names=[output.name],
    )
    return [transform_in, product, transform_out]
