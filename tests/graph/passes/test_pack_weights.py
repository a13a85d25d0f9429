"""pack_weights: golden graphs per target, block choice and padding, shared weights,
what stays unpacked, packed convs, and the layouts mod.json reports."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, GraphBuilder, Params
from ember.graph.interpret import interpret
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.packed import unpack_conv_weight, unpack_dense_weight
from ember.graph.passes import fuse
from ember.graph.passes.pack_weights import block_size, conv_block, pack_weights, packed_layouts
from ember.target import Target

AVX512 = Target("llvm -mcpu=skylake-avx512")
AVX2 = Target("llvm -mcpu=haswell")
NEON = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")


def layers() -> tuple[Graph, Params]:
    """dense (bias, relu) -> dense to 10 classes -> matmul by a constant [10, 24]."""
    generator = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return generator.standard_normal(shape).astype("float32")

    b = GraphBuilder("layers")
    x = b.input("x", (3, 16))
    hidden = b.add("dense", [x, b.param("fc1_weight", normal(32, 16))], name="fc1")
    hidden = b.add("relu", [b.add("add", [hidden, b.param("fc1_bias", normal(32))])])
    logits = b.add("dense", [hidden, b.param("fc2_weight", normal(10, 32))], name="fc2")
    y = b.add("matmul", [logits, b.param("proj_weight", normal(10, 24))], name="proj")
    return b.build([y])


def test_dense_and_constant_matmul_weights_are_packed(check_pass) -> None:
    graph, params = layers()
    packed, packed_params = check_pass(
        pack_weights,
        graph,
        params,
        AVX512,
        expected="""
        graph layers(%x: float32[3, 16]) -> (%proj: float32[3, 24]) {
          param %fc1_bias: float32[32]
          param %fc1_weight_NK16n: float32[2, 16, 16]
          param %fc2_weight_NK16n: float32[1, 32, 16]
          param %proj_weight_NK8n: float32[3, 10, 8]
          %fc1 = dense_pack(%x, %fc1_weight_NK16n) : float32[3, 32]
          %add = add(%fc1, %fc1_bias) : float32[3, 32]
          %relu = relu(%add) : float32[3, 32]
          %fc2_padded = dense_pack(%relu, %fc2_weight_NK16n) : float32[3, 16]
          %fc2 = slice(%fc2_padded) {begins=[0, 0], ends=[3, 10], steps=[1, 1]} : float32[3, 10]
          %proj = dense_pack(%fc2, %proj_weight_NK8n) : float32[3, 24]
        }
        """,
    )
    weights = {name: unpack_dense_weight(packed_params[name]) for name in packed_layouts(packed)}
    np.testing.assert_array_equal(weights["fc1_weight_NK16n"], params["fc1_weight"])
    # 10 classes are no whole vector: zero rows pad them to one block of 16.
    np.testing.assert_array_equal(weights["fc2_weight_NK16n"][:10], params["fc2_weight"])
    assert not weights["fc2_weight_NK16n"][10:].any()
    np.testing.assert_array_equal(weights["proj_weight_NK8n"], params["proj_weight"].T)
    assert packed_layouts(packed) == {
        "fc1_weight_NK16n": "NK16n",
        "fc2_weight_NK16n": "NK16n",
        "proj_weight_NK8n": "NK8n",
    }


@pytest.mark.parametrize(
    ("target", "blocks"),
    [(AVX512, [16, 16, 8]), (AVX2, [8, 8, 8]), (NEON, [4, 4, 4])],
    ids=["avx512", "avx2", "neon"],
)
def test_blocks_follow_the_target_vector_lanes(check_pass, target: Target, blocks) -> None:
    graph, params = layers()
    packed, _ = check_pass(pack_weights, graph, params, target)
    assert [n.inputs[1].shape[2] for n in packed.nodes if n.op == "dense_pack"] == blocks


def test_block_size_prefers_whole_vectors_of_the_target() -> None:
    # Full vectors when they divide, or, with rows enough, pad by at most 1/8...
    assert [block_size(n, 16, rows=16) for n in (512, 1000, 1001, 100)] == [16, 16, 16, 16]
    # ...else the widest narrower vector that divides (a single row is bound by reading
    # the weight: no padding), else full vectors padded.
    assert [block_size(n, 16) for n in (512, 1000, 1001, 100)] == [16, 8, 16, 4]
    assert [block_size(n, 16, rows=16) for n in (24, 40, 20, 10)] == [8, 8, 4, 16]
    assert [block_size(n, 4) for n in (8, 6)] == [4, 4]


def test_shared_weight_is_packed_once(check_pass) -> None:
    generator = np.random.default_rng(1)
    b = GraphBuilder("shared")
    weight = b.param("w", generator.standard_normal((16, 8)).astype("float32"))
    first = b.add("dense", [b.input("x", (2, 8)), weight])
    second = b.add("dense", [b.input("y", (4, 8)), weight])
    graph, params = b.build([first, second])
    packed, packed_params = check_pass(pack_weights, graph, params, AVX512)
    assert [v.name for v in packed.params] == ["w_NK16n"]
    assert list(packed_params) == ["w_NK16n"]


def test_what_stays_unpacked(check_pass) -> None:
    generator = np.random.default_rng(2)
    b = GraphBuilder("kept")
    x = b.input("x", (2, 8))
    computed = b.add("dense", [x, b.input("w", (16, 8))], name="computed")  # not a param
    three_d = b.add(
        "matmul", [x, b.param("b3", generator.standard_normal((2, 8, 4)).astype("float32"))]
    )
    ints = b.add("matmul", [b.input("i", (2, 8), "int32"), b.param("bi", np.ones((8, 4), "int32"))])
    shared = b.param("s", generator.standard_normal((16, 8)).astype("float32"))
    used = b.add("dense", [x, shared], name="used")
    graph, params = b.build([computed, three_d, ints, used, shared])
    packed, _ = check_pass(pack_weights, graph, params, AVX512)
    assert [n.op for n in packed.nodes] == ["dense", "matmul", "matmul", "dense_pack"]
    # A weight that is also an output stays as well as its packed copy.
    assert {v.name for v in packed.params} == {"b3", "bi", "s", "s_NK16n"}
    # float64 on NEON: vectors of 2 lanes, narrower than any block worth packing.
    d = GraphBuilder("doubles")
    weight = d.param("wd", generator.standard_normal((8, 8)))
    doubles, double_params = d.build([d.add("dense", [d.input("d", (2, 8), "float64"), weight])])
    unchanged, _ = check_pass(pack_weights, doubles, double_params, NEON)
    assert unchanged == doubles


def convs() -> tuple[Graph, Params]:
    """NHWC: a 3x3 conv to 32 channels (+ bias, relu), a strided 1x1 conv to 24
    channels (blocks of 8), a depthwise conv and an NCHW conv (both left as they are)."""
    generator = np.random.default_rng(3)

    def normal(*shape: int) -> np.ndarray:
        return generator.standard_normal(shape).astype("float32")

    b = GraphBuilder("convs")
    x = b.input("x", (1, 8, 8, 3))
    nhwc = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    y = b.add("conv", [x, b.param("c1_weight", normal(3, 3, 3, 32))], nhwc, name="c1")
    y = b.add("relu", [b.add("add", [y, b.param("c1_bias", normal(32))])])
    strided = ConvAttrs((2, 2), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
    y = b.add("conv", [y, b.param("c2_weight", normal(1, 1, 32, 24))], strided, name="c2")
    depthwise = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 24, "NHWC", "HWIO")
    y = b.add("conv", [y, b.param("dw_weight", normal(3, 3, 1, 24))], depthwise, name="dw")
    nchw = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NCHW", "OIHW")
    z = b.add("conv", [b.input("z", (1, 4, 5, 5)), b.param("c3_weight", normal(8, 4, 1, 1))], nchw)
    return b.build([y, z])


def test_channels_last_convs_are_packed(check_pass) -> None:
    graph, params = convs()
    packed, packed_params = check_pass(pack_weights, graph, params, AVX512)
    ops = {n.name: n.op for n in packed.nodes}
    assert (ops["c1"], ops["c2"], ops["dw"], ops["conv"]) == ("conv_pack",) * 2 + ("conv",) * 2
    assert packed_layouts(packed) == {
        "c1_weight_OHWI16o": "OHWI16o",
        "c2_weight_OHWI8o": "OHWI8o",
    }
    assert packed_params["c1_weight_OHWI16o"].shape == (2, 3, 3, 3, 16)
    for name, original in (("c1_weight_OHWI16o", "c1_weight"), ("c2_weight_OHWI8o", "c2_weight")):
        np.testing.assert_array_equal(unpack_conv_weight(packed_params[name]), params[original])
    assert {"c1_weight", "c2_weight"}.isdisjoint(packed_params)
    # The packed graph computes what the original does (check_pass compares them too).
    feeds = {"x": np.ones((1, 8, 8, 3), "float32"), "z": np.ones((1, 4, 5, 5), "float32")}
    want = interpret(graph, params, feeds)
    got = interpret(packed, packed_params, feeds)
    for value in graph.outputs:
        np.testing.assert_allclose(got[value.name], want[value.name], rtol=1e-5, atol=1e-5)


def test_conv_blocks_are_whole_vectors_or_narrower() -> None:
    assert [conv_block(n, 16) for n in (64, 24, 20, 6, 1000)] == [16, 8, 4, None, 8]
    assert [conv_block(n, 8) for n in (64, 12)] == [8, 4]
    # Over 4 pixels or more, padding by at most 1/8 of the channels gives whole vectors.
    assert [conv_block(n, 16, pixels=169) for n in (1000, 72, 40, 24, 6)] == [16, 16, 8, 8, None]
    assert conv_block(1000, 16, pixels=2) == 8


def test_conv_outputs_padded_to_whole_vectors_are_sliced_back(check_pass) -> None:
    b = GraphBuilder("classifier")
    x = b.input("x", (1, 5, 5, 8))
    weight = np.random.default_rng(4).standard_normal((1, 1, 8, 72)).astype("float32")
    attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
    y = b.add("conv", [x, b.param("w", weight)], attrs, name="classes")
    graph, params = b.build([b.add("relu", [y], name="y")])
    packed, packed_params = check_pass(pack_weights, graph, params, AVX512)
    assert [(n.op, n.output.shape) for n in packed.nodes] == [
        ("conv_pack", (1, 5, 5, 80)),
        ("slice", (1, 5, 5, 72)),
        ("relu", (1, 5, 5, 72)),
    ]
    array = packed_params["w_OHWI16o"]
    assert array.shape == (5, 1, 1, 8, 16) and not array[4, ..., 8:].any()
    np.testing.assert_array_equal(unpack_conv_weight(array)[..., :72], weight)
    # The slice cuts the padding off inside the conv's fused group.
    groups = fuse(packed, packed_params).groups
    assert [[n.op for n in g.nodes] for g in groups] == [["conv_pack", "slice", "relu"]]


def test_a_qconv_with_a_few_channels_short_of_whole_vectors_is_padded() -> None:
    """30 output channels on AVX-512 (16 int32 lanes): the packed weight and its
    correction get two zero channels and a slice cuts them off; integer results equal."""
    from ember.graph.ops.attrs import QConvAttrs

    rng = np.random.default_rng(0)
    b = GraphBuilder("q")
    x = b.input("x", (1, 9, 9, 12), "uint8")
    w = b.param("w", rng.integers(-128, 128, (3, 3, 12, 30)).astype(np.int8))
    attrs = QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=7)
    graph, params = b.build([b.add("qconv", [x, w], attrs)])
    packed, packed_params = pack_weights(graph, params, AVX512)
    assert [node.op for node in packed.nodes] == ["qconv_pack", "slice"]
    correction = packed_params[packed.nodes[0].inputs[2].name]
    assert correction.shape == (32,) and not correction[30:].any()
    feeds = {"x": rng.integers(0, 256, (1, 9, 9, 12)).astype(np.uint8)}
    (want,) = interpret(graph, params, feeds).values()
    (got,) = interpret(packed, packed_params, feeds).values()
    np.testing.assert_array_equal(got, want)
