"""fold_batch_norm: golden before/after graphs for each anchor, layout and fallback."""

from __future__ import annotations

import numpy as np
import pytest
from graph_parts import batch_norm, weight

from ember.graph import GraphBuilder, Value
from ember.graph.ops.attrs import BatchNormAttrs, ConvAttrs
from ember.graph.passes import fold_batch_norm
from ember.testing import get_workload

# Folding moves the batch norm's scale into the fp32 weights (one extra rounding per
# weight) and its shift into a separate fp32 add (one extra rounding of a sum whose
# terms are ~10x the result in the worst channels here): about 1e-6 absolute error on
# outputs of magnitude ~5, so the suite's fp32 bounds hold; they are kept.


CONV_NCHW = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW", "OIHW")


def conv_builder() -> tuple[GraphBuilder, Value]:
    """A builder holding input x: [1, 3, 5, 5] and its 3x3 conv `conv` to 4 channels
    (weight `w`); returns it and the conv."""
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    return b, b.add("conv", [x, b.param("w", weight((4, 3, 3, 3)))], CONV_NCHW, name="conv")


# conv_builder's conv and a batch norm `bn` after it, folded.
FOLDED_CONV = """
    graph main(%x: float32[1, 3, 5, 5]) -> (%bn: float32[1, 4, 5, 5]) {
      param %w_folded: float32[4, 3, 3, 3]
      param %bn_shift: float32[4, 1, 1]
      %conv = conv(%x, %w_folded) {strides=[1, 1], padding=[1, 1, 1, 1], dilations=[1, 1], groups=1, layout="NCHW", kernel_layout="OIHW"} : float32[1, 4, 5, 5]
      %bn = add(%conv, %bn_shift) : float32[1, 4, 5, 5]
    }
"""  # noqa: E501


def test_conv_nchw_folds_into_weight_and_bias_add(check_pass) -> None:
    b, conv = conv_builder()
    y = batch_norm(b, conv)
    graph, params = b.build([y])
    _, new_params = check_pass(
        fold_batch_norm,
        graph,
        params,
        expected=FOLDED_CONV,
    )
    multiplier = params["bn_scale"] / np.sqrt(params["bn_var"] + 1e-5)
    np.testing.assert_allclose(
        new_params["w_folded"], params["w"] * multiplier[:, None, None, None], rtol=1e-6
    )


def test_depthwise_conv_nhwc_folds_along_the_output_channel_axis(check_pass) -> None:
    attrs = ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 6, "NHWC", "HWIO")
    b = GraphBuilder()
    x = b.input("x", (2, 6, 6, 6))
    conv = b.add("conv", [x, b.param("w", weight((3, 3, 1, 6)))], attrs, name="conv")
    y = batch_norm(b, conv, axis=3)
    graph, params = b.build([y])
    check_pass(
        fold_batch_norm,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 6, 6, 6]) -> (%bn: float32[2, 3, 3, 6]) {
          param %w_folded: float32[3, 3, 1, 6]
          param %bn_shift: float32[6]
          %conv = conv(%x, %w_folded) {strides=[2, 2], padding=[1, 1, 1, 1], dilations=[1, 1], groups=6, layout="NHWC", kernel_layout="HWIO"} : float32[2, 3, 3, 6]
          %bn = add(%conv, %bn_shift) : float32[2, 3, 3, 6]
        }
        """,  # noqa: E501
    )


def test_dense_folds_into_weight_rows(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 8))
    dense = b.add("dense", [x, b.param("w", weight((5, 8)))], name="fc")
    y = batch_norm(b, dense)
    graph, params = b.build([y])
    check_pass(
        fold_batch_norm,
        graph,
        params,
        expected="""
        graph main(%x: float32[3, 8]) -> (%bn: float32[3, 5]) {
          param %w_folded: float32[5, 8]
          param %bn_shift: float32[5]
          %fc = dense(%x, %w_folded) : float32[3, 5]
          %bn = add(%fc, %bn_shift) : float32[3, 5]
        }
        """,
    )


@pytest.mark.parametrize("bias_shape", [(4, 1, 1), (1, 4, 1, 1), (1, 1, 1)])
def test_conv_bias_add_folds_into_the_new_bias(check_pass, bias_shape) -> None:
    b, conv = conv_builder()
    biased = b.add("add", [b.param("c", weight(bias_shape, seed=1)), conv], name="biased")
    y = batch_norm(b, biased)
    graph, params = b.build([y])
    check_pass(
        fold_batch_norm,
        graph,
        params,
        expected=FOLDED_CONV,
    )


def test_conv_with_another_reader_becomes_multiply_add(check_pass) -> None:
    b, conv = conv_builder()
    y = batch_norm(b, conv)
    z = b.add("add", [y, conv], name="z")
    graph, params = b.build([z])
    check_pass(
        fold_batch_norm,
        graph,
        params,
        expected="""
        graph main(%x: float32[1, 3, 5, 5]) -> (%z: float32[1, 4, 5, 5]) {
          param %w: float32[4, 3, 3, 3]
          param %bn_multiplier: float32[4, 1, 1]
          param %bn_shift: float32[4, 1, 1]
          %conv = conv(%x, %w) {strides=[1, 1], padding=[1, 1, 1, 1], dilations=[1, 1], groups=1, layout="NCHW", kernel_layout="OIHW"} : float32[1, 4, 5, 5]
          %bn_multiply = multiply(%conv, %bn_multiplier) : float32[1, 4, 5, 5]
          %bn = add(%bn_multiply, %bn_shift) : float32[1, 4, 5, 5]
          %z = add(%bn, %conv) : float32[1, 4, 5, 5]
        }
        """,  # noqa: E501
    )


def test_conv_output_that_is_a_graph_output_is_not_changed(check_pass) -> None:
    b, conv = conv_builder()
    y = batch_norm(b, conv)
    graph, params = b.build([y, conv])
    new_graph, _ = check_pass(fold_batch_norm, graph, params)
    assert [n.op for n in new_graph.nodes] == ["conv", "multiply", "add"]
    assert new_graph.nodes[0] == graph.nodes[0]


def test_bias_that_varies_spatially_is_not_folded(check_pass) -> None:
    b, conv = conv_builder()
    biased = b.add("add", [conv, b.param("c", weight((5, 5), seed=1))], name="biased")
    y = batch_norm(b, biased)
    graph, params = b.build([y])
    new_graph, _ = check_pass(fold_batch_norm, graph, params)
    assert [n.op for n in new_graph.nodes] == ["conv", "add", "multiply", "add"]


def test_batch_norm_after_other_ops_and_on_other_axes_becomes_multiply_add(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 4, 3))
    relu = b.add("relu", [x], name="relu")
    y = batch_norm(b, relu, name="bn_relu")
    dense = b.add("dense", [y, b.param("w", weight((3, 3)))], name="fc")
    z = batch_norm(b, dense, axis=1, name="bn_fc")  # axis 1 is not dense's channels
    graph, params = b.build([z])
    new_graph, _ = check_pass(fold_batch_norm, graph, params)
    assert [n.op for n in new_graph.nodes] == [
        "relu", "multiply", "add", "dense", "multiply", "add"
    ]  # fmt: skip


def test_shared_weight_is_scaled_separately_for_each_conv(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5, 5))
    w = b.param("w", weight((4, 3, 3, 3)))
    first = batch_norm(b, b.add("conv", [x, w], CONV_NCHW, name="c1"), name="bn1")
    second = b.add("conv", [x, w], CONV_NCHW, name="c2")
    y = b.add("add", [first, batch_norm(b, second, name="bn2")], name="y")
    graph, params = b.build([y])
    new_graph, new_params = check_pass(fold_batch_norm, graph, params)
    assert "batch_norm" not in new_graph.op_histogram()
    assert {"w_folded", "w_folded_1"} <= new_params.keys() and "w" not in new_params


def test_statistics_computed_at_run_time_stay_a_batch_norm(check_pass) -> None:
    """Issue 18 (the fuzzer): a variance fed as a graph input raised GraphError in the
    build; such a batch norm stays, and its kernel computes it."""
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    ones = b.param("ones", np.ones(3, "float32"))
    scale = b.add("exp", [b.input("log_scale", (3,))], name="scale")
    y = b.add("batch_norm", [x, scale, ones, ones, ones], BatchNormAttrs(1e-5, 1), name="bn")
    graph, params = b.build([y])
    new_graph, _ = check_pass(fold_batch_norm, graph, params)
    assert new_graph.op_histogram()["batch_norm"] == 1


def test_builtin_mobilenet_nhwc_folds_every_batch_norm(check_pass) -> None:
    graph, params = get_workload(
        "mobilenet", layout="NHWC", image_shape=(32, 32, 3), num_classes=10
    )
    assert graph.op_histogram()["batch_norm"] == 27
    new_graph, _ = check_pass(fold_batch_norm, graph, params)
    histogram = new_graph.op_histogram()
    # Every batch norm follows a conv (depthwise ones included) and folds: one bias add
    # each, no multiply left over.
    assert "batch_norm" not in histogram and "multiply" not in histogram
    assert histogram["add"] == graph.op_histogram().get("add", 0) + 27
