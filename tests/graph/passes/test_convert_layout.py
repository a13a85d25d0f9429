"""convert_layout: golden graphs, transposes only at the borders, equal results."""

from __future__ import annotations

import numpy as np
import pytest
from graph_parts import batch_norm, random_inputs, weight

from ember.errors import ShapeError
from ember.graph import Graph, GraphBuilder, Value, interpret, verify
from ember.graph.ops.attrs import (
    ArgReduceAttrs,
    AxisAttrs,
    BatchNormAttrs,
    BlockAttrs,
    ConvAttrs,
    InstanceNormAttrs,
    LayoutAttrs,
    PadAttrs,
    PoolAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    SliceAttrs,
    SplitAttrs,
    TransposeAttrs,
)
from ember.graph.passes.convert_layout import convert_layout
from ember.testing.oracle import assert_allclose
from ember.testing.workloads import get_workload


def conv_attrs(layout: str = "NCHW", kernel_layout: str = "OIHW", groups: int = 1) -> ConvAttrs:
    spatial = len(layout) - 2
    return ConvAttrs(
        (1,) * spatial, (1,) * 2 * spatial, (1,) * spatial, groups, layout, kernel_layout
    )


def conv(b: GraphBuilder, x: Value, out_channels: int, name: str, seed: int = 0) -> Value:
    w = b.param(f"{name}_w", weight((out_channels, x.shape[1], 3, 3), seed))
    return b.add("conv", [x, w], conv_attrs(), name=name)


def transposes(graph: Graph) -> list[str]:
    return [node.name for node in graph.nodes if node.op == "transpose"]


POOL_2X2 = PoolAttrs((2, 2), (2, 2), (0, 0, 0, 0), (1, 1))


def test_conv_bias_relu_pool_golden(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    y = conv(b, x, 4, "conv")
    y = b.add("add", [y, b.param("bias", weight((4, 1, 1), 1))], name="add")
    y = b.add("relu", [y], name="relu")
    y = b.add("max_pool", [y], POOL_2X2, name="pool")
    graph, params = b.build([y])
    _, new_params = check_pass(
        convert_layout,
        graph,
        params,
        expected="""
        graph main(%x: float32[1, 3, 6, 6]) -> (%pool: float32[1, 4, 3, 3]) {
          param %conv_w_hwio: float32[3, 3, 3, 4]
          param %bias_nhwc: float32[1, 1, 4]
          %x_nhwc = transpose(%x) {perm=[0, 2, 3, 1]} : float32[1, 6, 6, 3]
          %conv = conv(%x_nhwc, %conv_w_hwio) {strides=[1, 1], padding=[1, 1, 1, 1], dilations=[1, 1], groups=1, layout="NHWC", kernel_layout="HWIO"} : float32[1, 6, 6, 4]
          %add = add(%conv, %bias_nhwc) : float32[1, 6, 6, 4]
          %relu = relu(%add) : float32[1, 6, 6, 4]
          %pool_nhwc = max_pool(%relu) {kernel=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], dilations=[1, 1], ceil_mode=False, count_include_pad=False, layout="NHWC"} : float32[1, 3, 3, 4]
          %pool = transpose(%pool_nhwc) {perm=[0, 3, 1, 2]} : float32[1, 4, 3, 3]
        }
        """,  # noqa: E501
    )
    # The weight is re-laid out on the array, not by a transpose at run time.
    np.testing.assert_array_equal(new_params["conv_w_hwio"], params["conv_w"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(new_params["bias_nhwc"], params["bias"].reshape(1, 1, 4))


def resnet_like() -> tuple[Graph, dict[str, np.ndarray]]:
    """conv -> batch_norm -> relu -> max_pool -> conv -> add(residual) ->
    global_avg_pool -> reshape -> dense."""
    b = GraphBuilder()
    x = b.input("x", (2, 3, 8, 8))
    y = conv(b, x, 4, "conv1", seed=1)
    y = batch_norm(b, y, name="bn1")
    y = b.add("relu", [y], name="relu1")
    pooled = b.add("max_pool", [y], POOL_2X2, name="pool")
    y = conv(b, pooled, 4, "conv2", seed=2)
    y = b.add("add", [y, pooled], name="residual")
    y = b.add("global_avg_pool", [y], LayoutAttrs(), name="gap")
    y = b.add("reshape", [y], ReshapeAttrs((2, 4)), name="flatten")
    y = b.add("dense", [y, b.param("fc_w", weight((5, 4), 3))], name="fc")
    return b.build([y])


def test_resnet_like_has_one_transpose_at_the_input(check_pass) -> None:
    graph, params = resnet_like()
    new_graph, _ = check_pass(convert_layout, graph, params)
    # Only the graph input is transposed; the pooled [N,1,1,C] feeds the reshape as is
    # (same element order as [N,C,1,1]), so no transpose at the head either.
    assert transposes(new_graph) == ["x_nhwc"]
    layouts = {
        node.name: getattr(node.attrs, "layout", None)
        for node in new_graph.nodes
        if node.op in ("conv", "max_pool", "global_avg_pool")
    }
    assert set(layouts.values()) == {"NHWC"}
    bn = next(node for node in new_graph.nodes if node.op == "batch_norm")
    assert bn.attrs == BatchNormAttrs(1e-5, 3)
    assert new_graph.outputs == graph.outputs


def test_convert_inputs_moves_the_input_layout_and_removes_every_transpose() -> None:
    graph, params = resnet_like()
    new_graph, new_params = convert_layout(graph, params, convert_inputs=True)
    verify(new_graph, new_params)
    assert transposes(new_graph) == []
    assert new_graph.inputs[0].shape == (2, 8, 8, 3)
    inputs = random_inputs(graph)
    want = interpret(graph, params, inputs)
    got = interpret(new_graph, new_params, {"x": inputs["x"].transpose(0, 2, 3, 1)})
    assert_allclose(got, want)


def test_convert_inputs_keeps_channels_last_outputs() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    y = b.add("relu", [conv(b, x, 3, "conv")], name="y")
    graph, params = b.build([y])
    new_graph, new_params = convert_layout(graph, params, convert_inputs=True)
    assert transposes(new_graph) == []
    assert [str(v.type) for v in (*new_graph.inputs, *new_graph.outputs)] == [
        "float32[1, 5, 5, 2]",
        "float32[1, 5, 5, 3]",
    ]
    inputs = random_inputs(graph)
    got = interpret(new_graph, new_params, {"x": inputs["x"].transpose(0, 2, 3, 1)})
    want = interpret(graph, params, inputs)["y"]
    np.testing.assert_allclose(got["y"], want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-5)


def test_layout_agnostic_ops_follow_with_remapped_axes(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    a = conv(b, x, 4, "conv")
    parts = b.add_multi("split", [a], SplitAttrs(1, (1, 3)), name="split")
    joined = b.add("concat", [parts[1], parts[0]], AxisAttrs(1), name="concat")
    padded = b.add("pad", [joined], PadAttrs((0, 1, 0, 0, 0, 0, 1, 2)), name="pad")
    cut = b.add("slice", [padded], SliceAttrs((0, 0, 0, 0), (1, 5, 5, 6), (1, 2, 1, 1)), name="cut")
    soft = b.add("softmax", [cut], AxisAttrs(1), name="soft")
    mean = b.add("reduce_mean", [soft], ReduceAttrs((2, 3), keepdims=False), name="mean")
    best = b.add("argmax", [soft], ArgReduceAttrs(1, keepdims=True), name="best")
    graph, params = b.build([mean, best])
    check_pass(
        convert_layout,
        graph,
        params,
        expected="""
        graph main(%x: float32[1, 2, 4, 4]) -> (%mean: float32[1, 3], %best: int64[1, 1, 5, 6]) {
          param %conv_w_hwio: float32[3, 3, 2, 4]
          %x_nhwc = transpose(%x) {perm=[0, 2, 3, 1]} : float32[1, 4, 4, 2]
          %conv = conv(%x_nhwc, %conv_w_hwio) {strides=[1, 1], padding=[1, 1, 1, 1], dilations=[1, 1], groups=1, layout="NHWC", kernel_layout="HWIO"} : float32[1, 4, 4, 4]
          %split:0, %split:1 = split(%conv) {axis=3, sizes=[1, 3]} : float32[1, 4, 4, 1], float32[1, 4, 4, 3]
          %concat = concat(%split:1, %split:0) {axis=3} : float32[1, 4, 4, 4]
          %pad = pad(%concat) {pads=[0, 0, 0, 1, 0, 1, 2, 0], mode="constant", value=0.0} : float32[1, 5, 6, 5]
          %cut = slice(%pad) {begins=[0, 0, 0, 0], ends=[1, 5, 6, 5], steps=[1, 1, 1, 2]} : float32[1, 5, 6, 3]
          %soft = softmax(%cut) {axis=3} : float32[1, 5, 6, 3]
          %mean = reduce_mean(%soft) {axes=[1, 2], keepdims=False} : float32[1, 3]
          %best_nhwc = argmax(%soft) {axis=3, keepdims=True, select_last_index=False} : int64[1, 5, 6, 1]
          %best = transpose(%best_nhwc) {perm=[0, 3, 1, 2]} : int64[1, 1, 5, 6]
        }
        """,  # noqa: E501
    )


def test_broadcast_operands_are_permuted_at_compile_time(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    scale = b.input("scale", (3, 1, 1))  # computed at run time: reshaped, not transposed
    y = conv(b, x, 3, "conv")
    y = b.add("multiply", [y, b.param("gamma", weight((1, 3, 1, 1), 1))], name="gamma_mul")
    y = b.add("add", [b.param("beta", weight((3, 1, 1), 2)), y], name="beta_add")
    y = b.add("subtract", [y, b.constant(np.float32(0.5))], name="shift")
    y = b.add("multiply", [y, scale], name="scale_mul")
    y = b.add("add", [y, b.param("row", weight((4,), 3))], name="row_add")
    y = b.add("add", [y, b.param("plane", weight((4, 4), 4))], name="plane_add")
    graph, params = b.build([y])
    new_graph, _ = check_pass(convert_layout, graph, params)
    shapes = {value.name: value.shape for value in new_graph.params}
    assert shapes["gamma_nhwc"] == (1, 1, 1, 3)
    assert shapes["beta_nhwc"] == (1, 1, 3)
    assert shapes["const"] == ()  # a scalar broadcasts the same in any layout
    # [4] and [4, 4] broadcast along W (and H): channels-last moves C behind them.
    assert shapes["row_nhwc"] == (4, 1)
    assert shapes["plane_nhwc"] == (4, 4, 1)
    ops = [(node.op, node.name) for node in new_graph.nodes]
    assert ("reshape", "scale_nhwc") in ops
    assert transposes(new_graph) == ["x_nhwc", "plane_add"]


def test_graph_without_spatial_ops_is_unchanged(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4, 5))
    y = b.add("softmax", [b.add("relu", [x])], AxisAttrs(1))
    y = b.add("transpose", [y], TransposeAttrs((0, 2, 3, 1)))
    graph, params = b.build([b.add("reshape", [y], ReshapeAttrs((2, 60)))])
    new_graph, _ = check_pass(convert_layout, graph, params)
    assert new_graph == graph


def test_existing_transposes_compose_away() -> None:
    # A model exported from a channels-last framework: NHWC input, transposed to NCHW
    # for the conv, and back for the output. Converting cancels both transposes.
    b = GraphBuilder()
    x = b.input("x", (1, 5, 5, 2))
    t = b.add("transpose", [x], TransposeAttrs((0, 3, 1, 2)), name="to_nchw")
    y = b.add("relu", [conv(b, t, 3, "conv")], name="relu")
    y = b.add("transpose", [y], TransposeAttrs((0, 2, 3, 1)), name="y")
    graph, params = b.build([y])
    new_graph, new_params = convert_layout(graph, params)
    verify(new_graph, new_params)
    assert [node.op for node in new_graph.nodes] == ["conv", "relu"]
    assert [v.name for v in new_graph.outputs] == ["y"]
    inputs = random_inputs(graph)
    assert_allclose(interpret(new_graph, new_params, inputs), interpret(graph, params, inputs))


def test_output_names_survive_when_an_output_is_also_read_inside(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    y = b.add("relu", [conv(b, x, 2, "conv")], name="y")
    z = b.add("max_pool", [y], POOL_2X2, name="z")
    graph, params = b.build([y, z, y])
    new_graph, _ = check_pass(convert_layout, graph, params)
    assert [v.name for v in new_graph.outputs] == ["y", "z", "y"]
    assert len(transposes(new_graph)) == 3  # x in, y and z out
    assert {"y_nhwc", "z_nhwc"} <= {value.name for value in new_graph.values()}


@pytest.mark.parametrize(
    ("shape", "layout", "kernel_layout", "pool_kernel"),
    [
        ((1, 3, 9), "NCW", "OIW", (2,)),
        ((1, 3, 4, 6, 6), "NCDHW", "OIDHW", (2, 2, 2)),
    ],
)
def test_1d_and_3d_convert(check_pass, shape, layout, kernel_layout, pool_kernel) -> None:
    spatial = len(pool_kernel)
    b = GraphBuilder()
    x = b.input("x", shape)
    w = b.param("w", weight((4, 3) + (3,) * spatial))
    y = b.add("conv", [x, w], conv_attrs(layout, kernel_layout))
    pool = PoolAttrs(pool_kernel, pool_kernel, (0,) * 2 * spatial, (1,) * spatial, layout=layout)
    y = b.add("avg_pool", [b.add("relu", [y])], pool)
    y = b.add("global_max_pool", [y], LayoutAttrs(layout))
    graph, params = b.build([y])
    new_graph, _ = check_pass(convert_layout, graph, params)
    target = "N" + layout[2:] + "C"
    assert {getattr(n.attrs, "layout", target) for n in new_graph.nodes} == {target}
    assert len(transposes(new_graph)) == 2


def spatial_op_graph(op: str) -> tuple[Graph, dict[str, np.ndarray]]:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 6))
    y = conv(b, x, 8, "conv")
    if op == "instance_norm":
        vectors = [b.param(name, weight((8,), seed)) for seed, name in enumerate("sb")]
        y = b.add(op, [y, *vectors], InstanceNormAttrs(1e-5))
    elif op in ("depth_to_space", "space_to_depth"):
        y = b.add(op, [y], BlockAttrs(2, "CRD" if op == "depth_to_space" else "DCR"))
    elif op == "resize":
        y = b.add(op, [y], ResizeAttrs((1, 8, 8, 9), (1.0, 1.0, 2.0, 1.5), mode="linear"))
    elif op == "grouped_conv":
        w = b.param("gw", weight((8, 2, 3, 3), 5))
        y = b.add("conv", [y, w], conv_attrs(groups=4))
    y = conv(b, b.add("sigmoid", [y]), 3, "conv_out", seed=7)
    return b.build([y])


@pytest.mark.parametrize(
    "op", ["instance_norm", "depth_to_space", "space_to_depth", "resize", "grouped_conv"]
)
def test_spatial_ops_between_convs_need_no_transpose(check_pass, op) -> None:
    graph, params = spatial_op_graph(op)
    new_graph, _ = check_pass(convert_layout, graph, params)
    assert len(transposes(new_graph)) == 2  # the input and the output only


def test_reverse_direction_round_trips(check_pass) -> None:
    graph, params = resnet_like()
    nhwc, nhwc_params = convert_layout(graph, params, convert_inputs=True)
    nchw, _ = check_pass(convert_layout, nhwc, nhwc_params, layout="NCHW")
    conv_node = next(node for node in nchw.nodes if node.op == "conv")
    assert conv_node.attrs == conv_attrs("NCHW", "OIHW")
    assert transposes(nchw) == ["x_nchw"]


def test_ops_already_in_the_target_layout_are_left_alone(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 5, 5, 2))
    w = b.param("w", weight((3, 3, 2, 4)))
    y = b.add("conv", [x, w], conv_attrs("NHWC", "HWIO"))
    graph, params = b.build([b.add("relu", [y])])
    new_graph, _ = check_pass(convert_layout, graph, params)
    assert new_graph == graph


def test_unknown_layout_is_an_error_naming_the_choices() -> None:
    graph, params = resnet_like()
    with pytest.raises(ShapeError, match=r"unknown target layout 'NHCW'.*\(NWC, NHWC, NDHWC\)"):
        convert_layout(graph, params, layout="NHCW")


@pytest.mark.parametrize(
    ("name", "layout", "image_shape", "target"),
    [
        ("resnet-18", "NCHW", (3, 32, 32), "NHWC"),
        ("squeezenet_v1.1", "NCHW", (3, 64, 64), "NHWC"),
        ("mobilenet", "NHWC", (32, 32, 3), "NCHW"),
    ],
)
def test_built_in_networks_need_one_transpose(check_pass, name, layout, image_shape, target):
    graph, params = get_workload(name, layout=layout, image_shape=image_shape, num_classes=10)
    new_graph, _ = check_pass(convert_layout, graph, params, layout=target)
    assert transposes(new_graph) == [f"data_{target.lower()}"]
