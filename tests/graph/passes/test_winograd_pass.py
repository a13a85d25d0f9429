"""winograd: which convs are rewritten (3x3, stride 1, channels-last, constant float32
weight, enough tiles), what the rewrite computes, shared weights, the switch, and
how the transforms fuse."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, GraphBuilder, Params
from ember.graph.ops.attrs import ConvAttrs, TransposeAttrs
from ember.graph.ops.winograd import transform_weight
from ember.graph.passes import fuse
from ember.graph.passes.winograd import MIN_TILES, winograd
from ember.target import Target

AVX512 = Target("llvm -mcpu=skylake-avx512")


def conv_block(
    size: int = 12,
    channels: int = 8,
    attrs: ConvAttrs | None = None,
    kernel: int = 3,
    shared_weight: bool = False,
) -> tuple[Graph, Params]:
    """conv -> bias -> relu -> conv -> bias -> + input -> relu, NHWC."""
    rng = np.random.default_rng(0)
    attrs = attrs or ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    b = GraphBuilder("block")
    x = b.input("x", (1, size, size, channels))
    shape = (kernel, kernel, channels // attrs.groups, channels)
    w1 = b.param("w1", rng.standard_normal(shape).astype("float32") * 0.2)
    w2 = w1 if shared_weight else b.param("w2", rng.standard_normal(shape).astype("float32") * 0.2)
    bias = b.param("bias", rng.standard_normal(channels).astype("float32"))
    y = b.add("relu", [b.add("add", [b.add("conv", [x, w1], attrs, name="conv1"), bias])])
    y = b.add("add", [b.add("add", [b.add("conv", [y, w2], attrs, name="conv2"), bias]), x])
    return b.build([b.add("relu", [y], name="out")])


def ops(graph: Graph) -> list[str]:
    return [node.op for node in graph.nodes]


def test_3x3_convs_become_transforms_around_a_batch_product(check_pass) -> None:
    graph, params = conv_block()
    rewritten, new_params = check_pass(winograd, graph, params, AVX512)
    assert ops(rewritten) == [
        "winograd_input", "matmul", "winograd_output", "add", "relu",
        "winograd_input", "matmul", "winograd_output", "add", "add", "relu",
    ]  # fmt: skip
    assert set(new_params) == {"bias", "w1_winograd2", "w2_winograd2"}
    np.testing.assert_array_equal(new_params["w1_winograd2"], transform_weight(params["w1"], 2))
    assert rewritten.outputs == graph.outputs


def test_a_shared_weight_is_transformed_once(check_pass) -> None:
    graph, params = conv_block(shared_weight=True)
    rewritten, new_params = check_pass(winograd, graph, params, AVX512)
    assert set(new_params) == {"bias", "w1_winograd2"}
    products = [node for node in rewritten.nodes if node.op == "matmul"]
    assert {node.inputs[1].name for node in products} == {"w1_winograd2"}


@pytest.mark.parametrize(
    ("attrs", "kernel", "channels", "size"),
    [
        (ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"), 3, 8, 24),
        (ConvAttrs((1, 1), (2, 2, 2, 2), (2, 2), 1, "NHWC", "HWIO"), 3, 8, 12),
        (ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 2, "NHWC", "HWIO"), 3, 8, 12),
        (ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO"), 1, 8, 12),
        (ConvAttrs((1, 1), (2, 2, 2, 2), (1, 1), 1, "NHWC", "HWIO"), 5, 8, 12),
        (ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"), 3, 8, 10),
    ],
    ids=["strided", "dilated", "grouped", "1x1", "5x5", "few-tiles"],
)
def test_other_convs_stay_direct(attrs: ConvAttrs, kernel: int, channels: int, size: int) -> None:
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv")
    x = b.input("x", (1, size, size, channels))
    shape = (kernel, kernel, channels // attrs.groups, channels)
    weight = b.param("w", rng.standard_normal(shape).astype("float32"))
    graph, params = b.build([b.add("conv", [x, weight], attrs)])
    assert ops(winograd(graph, params, AVX512)[0]) == ["conv"]


@pytest.mark.parametrize(("size", "tile"), [(10, None), (12, 2), (20, 2), (21, 4), (56, 4)])
def test_the_largest_tile_with_enough_tiles(size: int, tile: int | None, check_pass) -> None:
    """10x10 is 25 tiles of 2x2 (direct); 12x12 36 of 2x2 and 9 of 4x4; 20x20 25 of
    4x4; 21x21 36 of 4x4 (the last partial): the largest tile with MIN_TILES or more."""
    assert MIN_TILES == 32
    graph, params = conv_block(size)
    rewritten, new_params = check_pass(winograd, graph, params, AVX512, rtol=1e-4, atol=1e-5)
    if tile is None:
        assert ops(rewritten) == ops(graph)
        return
    assert set(new_params) == {"bias", f"w1_winograd{tile}", f"w2_winograd{tile}"}
    transform = next(node for node in rewritten.nodes if node.op == "winograd_input")
    assert transform.attrs.tile == tile


def test_computed_weights_and_nchw_stay_direct() -> None:
    b = GraphBuilder("computed")
    x = b.input("x", (1, 12, 12, 4))
    w = b.input("w", (3, 3, 4, 4))
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    graph, params = b.build([b.add("conv", [x, w], attrs)])
    assert ops(winograd(graph, params, AVX512)[0]) == ["conv"]
    nchw = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW", "OIHW")
    b = GraphBuilder("nchw")
    x = b.input("x", (1, 4, 12, 12))
    weight = b.param("w", np.ones((4, 4, 3, 3), "float32"))
    graph, params = b.build([b.add("conv", [x, weight], nchw)])
    assert ops(winograd(graph, params, AVX512)[0]) == ["conv"]


def test_ember_winograd_0_keeps_every_conv_direct(monkeypatch) -> None:
    monkeypatch.setenv("EMBER_WINOGRAD", "0")
    graph, params = conv_block()
    assert ops(winograd(graph, params, AVX512)[0]) == ops(graph)


def test_the_input_transform_starts_a_group_and_the_output_takes_only_an_epilogue() -> None:
    graph, params = conv_block()
    rewritten, new_params = winograd(graph, params, AVX512)
    groups = fuse(rewritten, new_params).groups
    kinds = [[node.op for node in group.nodes] for group in groups]
    assert kinds == [
        ["winograd_input"], ["matmul"], ["winograd_output", "add", "relu"],
        ["winograd_input"], ["matmul"], ["winograd_output", "add", "add", "relu"],
    ]  # fmt: skip
    # A transpose after the output transform does not join its group.
    transposed = GraphBuilder("transposed")
    x = transposed.input("x", (1, 12, 12, 8))
    weight = transposed.param("w", params["w1"])
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    y = transposed.add(
        "transpose", [transposed.add("conv", [x, weight], attrs)], TransposeAttrs((0, 3, 1, 2))
    )
    graph, params = transposed.build([y])
    rewritten, new_params = winograd(graph, params, AVX512)
    kinds = [[node.op for node in group.nodes] for group in fuse(rewritten, new_params).groups]
    assert kinds == [["winograd_input"], ["matmul"], ["winograd_output"], ["transpose"]]
