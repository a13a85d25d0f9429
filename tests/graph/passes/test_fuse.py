"""fuse: expected groups, a sound partition, the printout, and equal results."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from graph_parts import random_inputs, weight

from ember.errors import GraphError
from ember.graph import Graph, GraphBuilder, Value, interpret, verify
from ember.graph.ops.attrs import (
    AxisAttrs,
    ConvAttrs,
    HardSigmoidAttrs,
    LayoutAttrs,
    PadAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    SplitAttrs,
    TopKAttrs,
    TransposeAttrs,
)
from ember.graph.passes.convert_layout import convert_layout
from ember.graph.passes.fuse import (
    FusedGraph,
    GroupKind,
    check_fused,
    fuse,
    interpret_fused,
)
from ember.testing.oracle import assert_allclose
from ember.testing.workloads import get_workload

Params = dict[str, np.ndarray]

CONV_3X3 = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
PAD_HW = PadAttrs((0, 0, 1, 1, 0, 0, 1, 1))


def padded_conv(b: GraphBuilder, x: Value, index: int) -> Value:
    """pad -> conv -> add(bias): how an exporter may spell a 'same' conv."""
    channels = x.shape[1]
    padded = b.add("pad", [x], PAD_HW, name=f"pad{index}")
    w = b.param(f"w{index}", weight((channels, channels, 3, 3), index))
    y = b.add("conv", [padded, w], CONV_3X3, name=f"conv{index}")
    return b.add(
        "add", [y, b.param(f"b{index}", weight((channels, 1, 1), 10 + index))], name=f"bias{index}"
    )


def resnet_block() -> tuple[Graph, Params]:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 6, 6))
    y = b.add("relu", [padded_conv(b, x, 1)], name="relu1")
    y = b.add("add", [padded_conv(b, y, 2), x], name="residual")
    y = b.add("relu", [y], name="relu2")
    y = b.add("global_avg_pool", [y], LayoutAttrs(), name="gap")
    y = b.add("reshape", [y], ReshapeAttrs((1, 4)), name="flatten")
    y = b.add("dense", [y, b.param("fc_w", weight((3, 4), 5))], name="fc")
    y = b.add("add", [y, b.param("fc_b", weight((3,), 6))], name="fc_bias")
    y = b.add("softmax", [y], AxisAttrs(1), name="prob")
    return b.build([y])


def membership(fused: FusedGraph) -> list[tuple[str, list[str]]]:
    return [(group.name, [node.name for node in group.nodes]) for group in fused.groups]


def assert_sound(graph: Graph, params: Params, fused: FusedGraph) -> None:
    """Independently of `check_fused`: a partition in a valid order computing the same."""
    names = [node.name for group in fused.groups for node in group.nodes]
    assert sorted(names) == sorted(node.name for node in graph.nodes)  # each exactly once
    computed = {value.name for value in (*graph.inputs, *graph.params)}
    for group in fused.groups:
        assert {value.name for value in group.inputs} <= computed, group.name
        verify(group.as_graph(), fused.group_params(group))
        computed |= {value.name for value in group.outputs}
    check_fused(fused)
    inputs = random_inputs(graph)
    assert_allclose(interpret_fused(fused, inputs), interpret(graph, params, inputs))


def test_resnet_block_groups() -> None:
    graph, params = resnet_block()
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("pad_conv_add_relu", ["pad1", "conv1", "bias1", "relu1"]),
        ("pad_conv_add_add_relu", ["pad2", "conv2", "bias2", "residual", "relu2"]),
        ("global_avg_pool", ["gap"]),
        ("reshape", ["flatten"]),
        ("dense_add", ["fc", "fc_bias"]),
        ("softmax", ["prob"]),
    ]
    kinds = [(group.kind, group.anchor.name if group.anchor else None) for group in fused.groups]
    assert kinds == [
        (GroupKind.ANCHOR, "conv1"),
        (GroupKind.ANCHOR, "conv2"),
        (GroupKind.ANCHOR, "gap"),
        (GroupKind.INJECTIVE, None),
        (GroupKind.ANCHOR, "fc"),
        (GroupKind.ANCHOR, "prob"),
    ]
    second = fused.groups[1]
    assert [v.name for v in second.inputs] == ["relu1", "w2", "b2", "x"]
    assert [v.name for v in second.params] == ["w2", "b2"]
    assert [v.name for v in second.outputs] == ["relu2"]
    assert_sound(graph, params, fused)


def test_printout_shows_each_group_and_its_nodes() -> None:
    graph, params = resnet_block()
    text = str(fuse(graph, params))
    expected = """
        fused graph main: 14 nodes in 6 groups
        group 0 pad_conv_add_relu (anchor conv): %x, %w1, %b1 -> %relu1
          %pad1 = pad(%x) {pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.0} : float32[1, 4, 8, 8]
          %conv1 = conv(%pad1, %w1) {strides=[1, 1], padding=[0, 0, 0, 0], dilations=[1, 1], groups=1, layout="NCHW", kernel_layout="OIHW"} : float32[1, 4, 6, 6]
          %bias1 = add(%conv1, %b1) : float32[1, 4, 6, 6]
          %relu1 = relu(%bias1) : float32[1, 4, 6, 6]
        group 1 pad_conv_add_add_relu (anchor conv): %relu1, %w2, %b2, %x -> %relu2
          %pad2 = pad(%relu1) {pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant", value=0.0} : float32[1, 4, 8, 8]
          %conv2 = conv(%pad2, %w2) {strides=[1, 1], padding=[0, 0, 0, 0], dilations=[1, 1], groups=1, layout="NCHW", kernel_layout="OIHW"} : float32[1, 4, 6, 6]
          %bias2 = add(%conv2, %b2) : float32[1, 4, 6, 6]
          %residual = add(%bias2, %x) : float32[1, 4, 6, 6]
          %relu2 = relu(%residual) : float32[1, 4, 6, 6]
        group 2 global_avg_pool (anchor global_avg_pool): %relu2 -> %gap
          %gap = global_avg_pool(%relu2) {layout="NCHW"} : float32[1, 4, 1, 1]
        group 3 reshape (injective): %gap -> %flatten
          %flatten = reshape(%gap) {shape=[1, 4]} : float32[1, 4]
        group 4 dense_add (anchor dense): %flatten, %fc_w, %fc_b -> %fc_bias
          %fc = dense(%flatten, %fc_w) : float32[1, 3]
          %fc_bias = add(%fc, %fc_b) : float32[1, 3]
        group 5 softmax (anchor softmax): %fc_bias -> %prob
          %prob = softmax(%fc_bias) {axis=1} : float32[1, 3]
        """  # noqa: E501
    assert text == textwrap.dedent(expected).strip()


def test_group_subgraph_is_self_contained() -> None:
    graph, params = resnet_block()
    fused = fuse(graph, params)
    group = fused.groups[1]
    subgraph = group.as_graph()
    assert [v.name for v in subgraph.inputs] == ["relu1", "x"]
    assert [v.name for v in subgraph.params] == ["w2", "b2"]
    assert sorted(fused.group_params(group)) == ["b2", "w2"]
    verify(subgraph, fused.group_params(group))
    assert fused.group_of("residual") is group


def test_a_diamond_fuses_and_a_graph_output_ends_the_chain() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    conv = b.add("conv", [x, b.param("w", weight((3, 3, 3, 3)))], CONV_3X3, name="conv")
    shared = b.add("relu", [conv], name="shared")  # read twice, in one diamond
    left = b.add("sigmoid", [shared], name="left")
    right = b.add("tanh", [shared], name="right")
    exposed = b.add("add", [left, right], name="exposed")  # a graph output: ends the chain
    after = b.add("negative", [exposed], name="after")
    graph, params = b.build([exposed, after])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("conv_relu_sigmoid_tanh_add", ["conv", "shared", "left", "right", "exposed"]),
        ("negative", ["after"]),
    ]
    assert fused.groups[0].outputs == (exposed,)
    assert_sound(graph, params, fused)


def test_a_value_also_read_outside_a_diamond_is_stored() -> None:
    """`shared` is read by an elementwise pair and by a pool: it must be stored, so
    the chain ends at it and its elementwise readers form their own group."""
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    conv = b.add("conv", [x, b.param("w", weight((3, 3, 3, 3)))], CONV_3X3, name="conv")
    shared = b.add("relu", [conv], name="shared")
    left = b.add("sigmoid", [shared], name="left")
    product = b.add("multiply", [shared, left], name="product")
    pooled = b.add("global_avg_pool", [shared], LayoutAttrs(), name="pool")
    graph, params = b.build([product, pooled])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("conv_relu", ["conv", "shared"]),
        ("sigmoid_multiply", ["left", "product"]),
        ("global_avg_pool", ["pool"]),
    ]
    assert_sound(graph, params, fused)


def conv_block(b: GraphBuilder, x: Value, name: str) -> Value:
    """conv -> add(bias): the value an activation reads."""
    channels = x.shape[1]
    w = b.param(f"{name}_w", weight((channels, channels, 3, 3), 3))
    y = b.add("conv", [x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1), name=name)
    return b.add("add", [y, b.param(f"{name}_b", weight((channels, 1, 1), 4))], name=f"{name}_bias")


def activation_graph(activation: str) -> tuple[Graph, Params]:
    """conv -> bias -> an activation spelled as exporters spell it -> conv."""
    b = GraphBuilder()
    x = conv_block(b, b.input("x", (1, 4, 6, 6)), "conv1")
    if activation == "silu":  # x * sigmoid(x)
        y = b.add("multiply", [x, b.add("sigmoid", [x], name="sig")], name="silu")
    elif activation == "hard_swish":  # x * hardsigmoid(x)
        gate = b.add("hard_sigmoid", [x], HardSigmoidAttrs(1 / 6, 0.5), name="hsig")
        y = b.add("multiply", [x, gate], name="hswish")
    elif activation == "gelu_erf":  # torch.onnx.export of nn.GELU() at opset 17
        t = b.add("divide", [x, b.constant(np.float32(np.sqrt(2)))], name="scale")
        t = b.add("erf", [t], name="erf")
        t = b.add("add", [t, b.constant(np.float32(1))], name="one_plus")
        t = b.add("multiply", [x, t], name="times_x")
        y = b.add("multiply", [t, b.constant(np.float32(0.5))], name="half")
    else:  # gelu_tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = b.add("power", [x, b.constant(np.float32(3))], name="cube")
        t = b.add("multiply", [cube, b.constant(np.float32(0.044715))], name="cubic")
        t = b.add("add", [x, t], name="inner")
        t = b.add("multiply", [t, b.constant(np.float32(np.sqrt(2 / np.pi)))], name="scaled")
        t = b.add("tanh", [t], name="tanh")
        t = b.add("add", [t, b.constant(np.float32(1))], name="one_plus")
        t = b.add("multiply", [x, t], name="times_x")
        y = b.add("multiply", [t, b.constant(np.float32(0.5))], name="half")
    y = conv_block(b, y, "conv2")
    return b.build([y])


@pytest.mark.parametrize(
    ("activation", "epilogue"),
    [
        ("silu", ["sig", "silu"]),
        ("hard_swish", ["hsig", "hswish"]),
        ("gelu_erf", ["scale", "erf", "one_plus", "times_x", "half"]),
        ("gelu_tanh", ["cube", "cubic", "inner", "scaled", "tanh", "one_plus", "times_x", "half"]),
    ],
)
def test_activations_that_read_their_input_twice_fuse_into_the_conv(
    activation: str, epilogue: list[str]
) -> None:
    graph, params = activation_graph(activation)
    fused = fuse(graph, params)
    assert [nodes for _, nodes in membership(fused)] == [
        ["conv1", "conv1_bias", *epilogue],
        ["conv2", "conv2_bias"],
    ]
    assert fused.groups[0].anchor is not None and fused.groups[0].anchor.name == "conv1"
    assert [v.name for v in fused.groups[0].outputs] == [epilogue[-1]]
    assert_sound(graph, params, fused)


@pytest.mark.parametrize("activation", ["silu", "hard_swish", "gelu_erf", "gelu_tanh"])
def test_fused_activations_compile_to_one_kernel_per_conv(activation: str) -> None:
    """The diamond becomes the conv kernel's epilogue (its input read twice from the
    accumulators), and the network's output matches the interpreter's."""
    graph, params = activation_graph(activation)
    names = build_and_compare(graph, params)
    kernels = [name for name in names if "conv" in name]
    assert len(kernels) == 2 and kernels[0].startswith("conv_pack_add_"), kernels


def build_and_compare(graph: Graph, params: Params) -> list[str]:
    """Build `graph` (input `x`) for this machine, check its output against the
    interpreter's, and return the names of its groups."""
    import ember

    library = ember.build(graph, "llvm", params=params)
    module = library.load()
    inputs = random_inputs(graph)
    module.set_input("x", inputs["x"])
    module.run()
    expected = interpret(graph, params, inputs)[graph.outputs[0].name]
    np.testing.assert_allclose(module.get_output(0), expected, rtol=1e-4, atol=1e-5)
    return [group["name"] for group in library.metadata["groups"]]


def test_squeeze_excitation_stores_what_its_pool_reads() -> None:
    """MobileNetV3 / EfficientNet's block: the SiLU diamond fuses into its conv; the
    conv's activation is read by the pool and the gate's multiply, so it is stored;
    the gate (pool, 1x1 convs, sigmoid) and the multiply are groups of their own."""
    b = GraphBuilder()
    x = conv_block(b, b.input("x", (1, 4, 6, 6)), "conv1")
    x = b.add("multiply", [x, b.add("sigmoid", [x], name="sig")], name="silu")
    gate = b.add("global_avg_pool", [x], LayoutAttrs(), name="squeeze")
    w1 = b.param("se_w1", weight((2, 4, 1, 1), 5))
    gate = b.add("conv", [gate, w1], ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1), name="reduce")
    gate = b.add("relu", [gate], name="reduce_relu")
    w2 = b.param("se_w2", weight((4, 2, 1, 1), 6))
    gate = b.add("conv", [gate, w2], ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1), name="expand")
    gate = b.add("sigmoid", [gate], name="gate")
    y = b.add("multiply", [x, gate], name="excite")
    graph, params = b.build([y])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("conv_add_sigmoid_multiply", ["conv1", "conv1_bias", "sig", "silu"]),
        ("global_avg_pool", ["squeeze"]),
        ("conv_relu", ["reduce", "reduce_relu"]),
        ("conv_sigmoid", ["expand", "gate"]),
        ("multiply", ["excite"]),
    ]
    assert_sound(graph, params, fused)


def test_epilogue_never_enlarges_the_anchor_output() -> None:
    # Squeeze-and-excitation: the pooled [N,C,1,1] gate multiplies the [N,C,H,W] input.
    b = GraphBuilder()
    x = b.input("x", (1, 4, 5, 5))
    gate = b.add("global_avg_pool", [x], LayoutAttrs(), name="squeeze")
    gate = b.add("sigmoid", [gate], name="gate")
    y = b.add("multiply", [x, gate], name="excite")
    graph, params = b.build([y])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("global_avg_pool_sigmoid", ["squeeze", "gate"]),
        ("multiply", ["excite"]),
    ]
    assert_sound(graph, params, fused)


def test_injective_ops_fuse_together_but_not_after_an_anchor() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    y = b.add("softmax", [x], AxisAttrs(2), name="soft")
    y = b.add("transpose", [y], TransposeAttrs((0, 2, 1)), name="swap")  # injective
    y = b.add("reshape", [y], ReshapeAttrs((2, 12)), name="flat")
    y = b.add("exp", [y], name="exp")  # elementwise joins the injective group
    graph, params = b.build([y])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("softmax", ["soft"]),
        ("transpose_reshape_exp", ["swap", "flat", "exp"]),
    ]
    assert [group.kind for group in fused.groups] == [GroupKind.ANCHOR, GroupKind.INJECTIVE]
    assert_sound(graph, params, fused)


def test_opaque_ops_stay_alone() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    y = b.add("relu", [x], name="relu")
    values, indices = b.add_multi("topk", [y], TopKAttrs(2, 1), name="top")
    z = b.add("exp", [values], name="exp")
    graph, params = b.build([z, indices])
    fused = fuse(graph, params)
    assert membership(fused) == [("relu", ["relu"]), ("topk", ["top"]), ("exp", ["exp"])]
    assert fused.groups[1].kind == GroupKind.OPAQUE
    assert_sound(graph, params, fused)


def test_join_that_would_make_a_cycle_is_refused() -> None:
    # The split's second half goes through a reduction (its own group, which depends on
    # the split's group) and comes back: adding `join` to the split's group would need
    # the reduction both before and after that group. Nor can `join` be the reduction's
    # epilogue, as it broadcasts the [2, 1] sum up to [2, 4].
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    first, second = b.add_multi("split", [x], SplitAttrs(1, (4, 4)), name="split")
    total = b.add("reduce_sum", [second], ReduceAttrs((1,)), name="total")
    y = b.add("add", [first, total], name="join")
    graph, params = b.build([y])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("split", ["split"]),
        ("reduce_sum", ["total"]),
        ("add", ["join"]),
    ]
    assert_sound(graph, params, fused)


def test_epilogue_waits_for_an_operand_computed_later() -> None:
    # The residual branch is computed after conv_a's group starts; the add still joins
    # conv_a's group, which must then run after the branch's group.
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    a = b.add("conv", [x, b.param("wa", weight((2, 2, 3, 3), 1))], CONV_3X3, name="conv_a")
    c = b.add("conv", [x, b.param("wc", weight((2, 2, 3, 3), 2))], CONV_3X3, name="conv_c")
    y = b.add("add", [a, c], name="sum")
    graph, params = b.build([y])
    fused = fuse(graph, params)
    assert membership(fused) == [("conv", ["conv_c"]), ("conv_add", ["conv_a", "sum"])]
    assert_sound(graph, params, fused)


def test_reflect_pad_and_shared_pad_are_not_prologues() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    reflected = b.add("pad", [x], PadAttrs(PAD_HW.pads, "reflect"), name="reflect")
    y = b.add("conv", [reflected, b.param("w", weight((2, 2, 3, 3)))], CONV_3X3, name="conv")
    shared = b.add("pad", [y], PAD_HW, name="shared_pad")
    z = b.add("conv", [shared, b.param("v", weight((2, 2, 3, 3), 1))], CONV_3X3, name="conv_z")
    graph, params = b.build([z, shared])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("pad", ["reflect"]),
        ("conv", ["conv"]),
        ("pad_1", ["shared_pad"]),
        ("conv_1", ["conv_z"]),
    ]
    assert_sound(graph, params, fused)


@pytest.mark.parametrize("name", ["resnet-18", "mobilenet"])
def test_built_in_networks_fuse_soundly(name: str) -> None:
    graph, params = get_workload(name, image_shape=(3, 32, 32), num_classes=10)
    graph, params = convert_layout(graph, params)
    fused = fuse(graph, params)
    anchors = sum(1 for node in graph.nodes if node.op in ("conv", "dense", "softmax"))
    assert sum(1 for group in fused.groups if group.anchor is not None) >= anchors
    assert_sound(graph, params, fused)


def test_check_fused_reports_a_bad_partition() -> None:
    graph, params = resnet_block()
    fused = fuse(graph, params)
    missing = FusedGraph(graph, params, fused.groups[:-1])
    with pytest.raises(GraphError, match=r"nodes \['prob'\] are in no group"):
        check_fused(missing)
    swapped = FusedGraph(graph, params, (fused.groups[1], fused.groups[0], *fused.groups[2:]))
    with pytest.raises(GraphError, match=r"reads \['relu1'\] before they are computed"):
        check_fused(swapped)
    twice = FusedGraph(graph, params, (*fused.groups, fused.groups[-1]))
    with pytest.raises(GraphError, match="node 'prob' is in groups 'softmax' and 'softmax'"):
        check_fused(twice)


def attention(heads: int = 2, seq: int = 8, width: int = 4) -> tuple[Graph, Params]:
    """Self-attention as exporters write it: projections, each split into heads by a
    reshape and a transpose (Kᵀ moving the innermost axis), two matmuls, softmax, and
    the heads merged back."""
    b = GraphBuilder()
    channels = heads * width
    x = b.input("x", (1, seq, channels))

    def heads_of(name: str, perm: tuple[int, ...]) -> Value:
        w = b.param(f"w_{name}", weight((channels, channels), len(name)))
        projected = b.add("dense", [x, w], name=f"proj_{name}")
        split = b.add(
            "reshape", [projected], ReshapeAttrs((1, seq, heads, width)), name=f"split_{name}"
        )
        return b.add("transpose", [split], TransposeAttrs(perm), name=f"heads_{name}")

    q = heads_of("q", (0, 2, 1, 3))
    k = heads_of("k", (0, 2, 3, 1))
    v = heads_of("v", (0, 2, 1, 3))
    scores = b.add("matmul", [q, k], name="scores")
    probs = b.add("softmax", [scores], AxisAttrs(3), name="probs")
    mixed = b.add("matmul", [probs, v], name="mixed")
    merged = b.add("transpose", [mixed], TransposeAttrs((0, 2, 1, 3)), name="merge")
    out = b.add("reshape", [merged], ReshapeAttrs((1, seq, channels)), name="out")
    return b.build([out])


def test_matmuls_read_split_heads_where_the_projections_put_them() -> None:
    """Q's and V's reshape and transpose join the matmul that reads them (the innermost
    axis stays contiguous); Kᵀ's transpose moves the innermost axis and, over 8 tokens
    (columns the matmul does not pad), stays a group, and so does the merge after the
    last matmul (an epilogue that is not pointwise)."""
    graph, params = attention()
    fused = fuse(graph, params)
    groups = dict(membership(fused))
    assert groups["reshape_transpose_matmul"] == ["split_q", "heads_q", "scores"]
    assert groups["reshape_transpose_matmul_1"] == ["split_v", "heads_v", "mixed"]
    assert groups["reshape_transpose"] == ["split_k", "heads_k"]
    assert groups["transpose_reshape"] == ["merge", "out"]
    assert_sound(graph, params, fused)


def test_kt_is_read_through_where_the_matmul_pads_it() -> None:
    """Over 20 tokens the matmul copies Kᵀ into columns padded to 32: that copy reads K
    where the projection put it (the transpose of the innermost axis is a gather once
    per element, not per multiply-add), and no kernel copies Kᵀ on its own."""
    graph, params = attention(seq=20)
    fused = fuse(graph, params)
    groups = dict(membership(fused))
    assert groups["reshape_transpose_reshape_transpose_matmul"] == [
        "split_q",
        "heads_q",
        "split_k",
        "heads_k",
        "scores",
    ]
    assert "reshape_transpose" not in groups
    assert_sound(graph, params, fused)


def test_an_operand_read_elsewhere_too_is_not_read_through() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4))
    split = b.add("reshape", [x], ReshapeAttrs((1, 8, 2, 2)), name="split")
    heads = b.add("transpose", [split], TransposeAttrs((0, 2, 1, 3)), name="heads")
    scores = b.add(
        "matmul",
        [heads, b.add("transpose", [heads], TransposeAttrs((0, 1, 3, 2)), name="t")],
        name="scores",
    )
    graph, params = b.build([scores, heads])  # `heads` is also an output
    fused = fuse(graph, params)
    groups = dict(membership(fused))
    assert groups["matmul"] == ["scores"]
    assert_sound(graph, params, fused)


def test_an_operand_read_twice_is_read_through_once() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8))
    split = b.add("reshape", [x], ReshapeAttrs((1, 4, 2, 4)), name="split")
    heads = b.add("transpose", [split], TransposeAttrs((0, 2, 1, 3)), name="heads")
    square = b.add("matmul", [heads, heads], name="square")
    graph, params = b.build([square])
    fused = fuse(graph, params)
    assert membership(fused) == [("reshape_transpose_matmul", ["split", "heads", "square"])]
    assert_sound(graph, params, fused)


def test_attention_with_split_heads_read_through_matches_the_interpreter() -> None:
    """Built for this machine: one kernel per matmul reads the projections directly
    (no kernel copies Q, Kᵀ or V; Kᵀ's padded copy is made inside the first), and the
    result is the interpreter's."""
    graph, params = attention(heads=3, seq=20, width=32)
    names = build_and_compare(graph, params)
    assert sum(name.startswith("reshape_transpose_reshape_transpose_matmul") for name in names) == 1
    assert sum(name.startswith("reshape_transpose_matmul") for name in names) == 1, names
    assert sum(name.startswith("reshape_transpose") for name in names) == 2, names


def exported_attention(heads: int = 2, seq: int = 20, width: int = 16) -> tuple[Graph, Params]:
    """Self-attention as torch's MultiheadAttention exports it (ViT-B/16): one dense
    for q, k and v, split by reshape / transpose / reshape and three gathers of index
    0, 1 and 2, q and Kᵀ each scaled by width ** -0.25, and the output projection
    reshaped back to (1, tokens, channels)."""
    b = GraphBuilder()
    channels = heads * width
    x = b.input("x", (seq, 1, channels))
    qkv = b.add("dense", [x, b.param("w_qkv", weight((3 * channels, channels), 1))], name="qkv")
    r = b.add("reshape", [qkv], ReshapeAttrs((1, seq, 1, 3, channels)), name="unsqueeze")
    t = b.add("transpose", [r], TransposeAttrs((3, 1, 2, 0, 4)), name="swap")
    s = b.add("reshape", [t], ReshapeAttrs((3, seq, 1, channels)), name="squeeze")

    def head(i: int) -> Value:
        index = b.param(f"index{i}", np.array(i, "int64"))
        taken = b.add("gather", [s, index], AxisAttrs(0), name=f"take{i}")
        split = b.add("reshape", [taken], ReshapeAttrs((seq, heads, width)), name=f"split{i}")
        swapped = b.add("transpose", [split], TransposeAttrs((1, 0, 2)), name=f"heads{i}")
        return b.add("reshape", [swapped], ReshapeAttrs((1, heads, seq, width)), name=f"b{i}")

    q, k, v = head(0), head(1), head(2)
    k = b.add("transpose", [k], TransposeAttrs((0, 1, 3, 2)), name="kt")
    factor = b.param("factor", np.array([width**-0.25], "float32"))
    q = b.add("multiply", [q, factor], name="q_scaled")
    k = b.add("multiply", [k, factor], name="k_scaled")
    scores = b.add("matmul", [q, k], name="scores")
    probs = b.add("softmax", [scores], AxisAttrs(3), name="probs")
    mixed = b.add("matmul", [probs, v], name="mixed")
    merged = b.add("transpose", [mixed], TransposeAttrs((2, 0, 1, 3)), name="merge")
    rows = b.add("reshape", [merged], ReshapeAttrs((seq, channels)), name="rows")
    projected = b.add("dense", [rows, b.param("w_out", weight((channels, channels), 2))])
    out = b.add("reshape", [projected], ReshapeAttrs((1, seq, channels)), name="out")
    return b.build([out])


def test_exported_attention_reads_its_projection_where_it_lies() -> None:
    """Built for this machine: the gathers become slices (`simplify`), the split's
    chain is copied per head (`read_through`), so the matmuls read q and v from the
    projection's output, Kᵀ within the first one's padded copy; the scale moves after
    the first matmul and the final reshape in front of the output projection. Six
    kernels (there were eleven), and the result is the interpreter's to float32
    rounding of outputs of magnitude ~50 (atol relative to the largest; the scale now
    multiplies the sum)."""
    import ember
    from ember.partition import optimize
    from ember.target import Target

    graph, params = exported_attention()
    fused = fuse(*optimize(graph, params, Target("llvm")))
    ops = [[node.op for node in group.nodes] for group in fused.groups]
    assert len(ops) == 6, ops
    assert not any("gather" in group for group in ops), ops
    matmuls = [group for group in ops if "matmul" in group]
    assert len(matmuls) == 2 and all("slice" in group for group in matmuls), ops
    assert not any(group[-1] == "transpose" and "slice" in group for group in ops), ops
    library = ember.build(graph, "llvm", params=params)
    module = library.load()
    inputs = random_inputs(graph)
    module.set_input("x", inputs["x"])
    module.run()
    expected = interpret(graph, params, inputs)["out"]
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(module.get_output(0), expected, rtol=1e-4, atol=1e-5 * scale)


def test_a_dense_reads_its_rows_through_a_reshape_but_not_a_moved_inner_axis() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 1, 1, 8))
    rows = b.add("reshape", [x], ReshapeAttrs((1, 8)), name="flatten")
    y = b.add("dense", [rows, b.param("w", weight((4, 8), 1))], name="classifier")
    t = b.add("transpose", [b.input("z", (8, 3))], TransposeAttrs((1, 0)), name="swap")
    u = b.add("dense", [t, b.param("v", weight((4, 8), 2))], name="other")
    graph, params = b.build([y, u])
    fused = fuse(graph, params)
    assert membership(fused) == [
        ("reshape_dense", ["flatten", "classifier"]),
        ("transpose", ["swap"]),
        ("dense", ["other"]),
    ]
    assert_sound(graph, params, fused)
