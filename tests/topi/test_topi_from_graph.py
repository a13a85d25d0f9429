"""Fused groups and whole graphs as ComputeDAGs: every group of built-in networks
evaluates (with the NumPy DAG evaluator) to what the reference interpreter computes."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random

from ember.graph import interpret
from ember.graph.builder import GraphBuilder
from ember.graph.ir import Graph, Params
from ember.graph.ops.attrs import ConvAttrs, PadAttrs, SplitAttrs, TopKAttrs
from ember.graph.passes import convert_layout, fold_batch_norm, fuse
from ember.te.evaluate import evaluate_dag
from ember.testing import get_workload
from ember.topi import NotExpressibleError, graph_to_dag, group_to_dag


def _check_groups(graph: Graph, params: Params) -> int:
    """Run the fused groups in order, each as a DAG and through the interpreter."""
    fused = fuse(graph, params)
    env = {**params}
    for value in graph.inputs:
        env[value.name] = random(value.shape, value.dtype, seed=7)
    for group in fused.groups:
        dag, values = group_to_dag(group)
        assert values == group.inputs
        assert [t.shape for t in dag.inputs] == [v.shape for v in values]
        feeds = {value.name: env[value.name] for value in group.data_inputs}
        want = interpret(group.as_graph(), fused.group_params(group), feeds)
        got = evaluate_dag(dag, [env[value.name] for value in values])
        for value, actual in zip(group.outputs, got, strict=True):
            np.testing.assert_allclose(
                actual, want[value.name], rtol=1e-4, atol=1e-5, err_msg=f"{group.name}\n{dag}"
            )
        env.update(want)
    return len(fused.groups)


@pytest.mark.parametrize(
    ("name", "layout", "image"),
    [
        ("resnet-18", "NHWC", (3, 32, 32)),
        ("resnet-18", "NCHW", (3, 32, 32)),
        ("mobilenet", "NHWC", (3, 32, 32)),
        ("resnet3d-18", "NDHWC", (3, 8, 16, 16)),
    ],
)
def test_network_groups_match_the_interpreter(name: str, layout: str, image) -> None:
    graph, params = get_workload(name, image_shape=image)
    graph, params = fold_batch_norm(graph, params)
    if layout != "NCHW":
        graph, params = convert_layout(graph, params, "NHWC")
    assert _check_groups(graph, params) > 5


def _padded_conv(value: float) -> tuple[Graph, Params]:
    b = GraphBuilder()
    x = b.input("data", (1, 6, 6, 3))
    padded = b.add("pad", [x], PadAttrs((0, 1, 2, 0, 0, 0, 1, 0), "constant", value))
    weight = b.param("weight", random((3, 3, 3, 4), seed=1))
    attrs = ConvAttrs((1, 1), (1, 0, 0, 1), (1, 1), 1, "NHWC", "HWIO")
    out = b.add("relu", [b.add("conv", [padded, weight], attrs)])
    return b.build([out])


def test_zero_pad_before_a_conv_folds_into_its_padding() -> None:
    graph, params = _padded_conv(0.0)
    assert _check_groups(graph, params) == 1
    (group,) = fuse(graph, params).groups
    dag, _ = group_to_dag(group)
    names = [t.name for t in dag.tensors]
    assert names == ["placeholder", "pad_temp", "placeholder", "conv2d_nhwc", "T_relu"]
    # The pad adds (1, 2) before H, W and (0, 1) after to the conv's (1, 0) and (0, 1).
    assert "tir.if_then_else((((i1 >= 2) && (i2 >= 2)) && (i2 < 8)), " in str(dag)


def test_nonzero_pad_stays_a_stage() -> None:
    graph, params = _padded_conv(1.0)
    assert _check_groups(graph, params) == 1
    dag, _ = group_to_dag(fuse(graph, params).groups[0])
    assert "T_pad" in [t.name for t in dag.tensors]


def test_graph_to_dag_takes_inputs_then_params() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    bias = b.param("bias", random((6,), seed=2))
    top, bottom = b.add_multi("split", [b.add("add", [x, bias])], SplitAttrs(0, (1, 3)))
    graph, params = b.build([b.add("exp", [bottom]), top])
    dag, values = graph_to_dag(graph)
    assert [v.name for v in values] == ["x", "bias"]
    arrays = [random((4, 6), seed=3), params["bias"]]
    want = interpret(graph, params, {"x": arrays[0]})
    for value, got in zip(graph.outputs, evaluate_dag(dag, arrays), strict=True):
        np.testing.assert_allclose(got, want[value.name], rtol=1e-6)


def test_a_topk_group_is_not_expressible() -> None:
    b = GraphBuilder()
    values, _ = b.add_multi("topk", [b.input("x", (2, 5))], TopKAttrs(2, 1))
    graph, params = b.build([values])
    with pytest.raises(NotExpressibleError, match="topk"):
        group_to_dag(fuse(graph, params).groups[0])
