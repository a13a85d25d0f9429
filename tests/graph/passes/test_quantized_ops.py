"""quantized_ops: convs of dequantized integers become qconv + scaling (golden ops,
results within one quantization step of the float form, which they equal exactly here),
and what does not match stays float and unchanged."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from quantized_models import (  # tests/ is on sys.path
    conv_chain,
    mixed_network,
    moving_model,
    quantized,
)

from ember.frontend import from_onnx
from ember.graph import interpret, verify
from ember.graph.passes import quantized_ops


def _ops(graph) -> list[str]:
    return [node.op for node in graph.nodes]


def test_quantized_convs_become_integer_convs() -> None:
    model, shape = conv_chain()
    graph, params = from_onnx(quantized(model, shape))
    assert _ops(graph).count("conv") == 3
    result, result_params = quantized_ops(graph, params)
    verify(result)
    assert "conv" not in _ops(result)
    qconvs = [node for node in result.nodes if node.op == "qconv"]
    assert len(qconvs) == 3
    # uint8 activations read directly, the int8 weights as params; the weights'
    # dequantizations are gone.
    assert all(node.inputs[0].dtype == "uint8" for node in qconvs)
    assert all(result_params[node.inputs[1].name].dtype == np.int8 for node in qconvs)
    assert not [n for n in result.nodes if n.op == "cast" and n.inputs[0].dtype == "int8"]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(
        interpret(result, result_params, {"x": x})["y"], interpret(graph, params, {"x": x})["y"]
    )


def test_int8_activations_keep_their_zero_point() -> None:
    model, shape = conv_chain(channels=5)
    graph, params = from_onnx(quantized(model, shape, activations="int8"))
    result, result_params = quantized_ops(graph, params)
    qconvs = [node for node in result.nodes if node.op == "qconv"]
    assert [node.inputs[0].dtype for node in qconvs] == ["int8"] * 3
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(
        interpret(result, result_params, {"x": x})["y"], interpret(graph, params, {"x": x})["y"]
    )


def _hand_quantized(data_scale: np.ndarray, weight: np.ndarray, group: int = 1,
                    weight_zero: int = 0) -> onnx.ModelProto:  # fmt: skip
    """x -> QuantizeLinear/DequantizeLinear (scale `data_scale` along channels) -> Conv
    with a dequantized int8 `weight` (its zero point `weight_zero`)."""
    channels = 4
    axis = {"axis": 1} if data_scale.size > 1 else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], **axis),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], **axis),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], group=group, pads=[1, 1, 1, 1]),
    ]
    outputs = weight.shape[0]
    zero = np.full(data_scale.shape, 3, np.uint8)
    initializers = [
        numpy_helper.from_array(data_scale.astype(np.float32), "xs"),
        numpy_helper.from_array(zero, "xz"),
        numpy_helper.from_array(weight, "wq"),
        numpy_helper.from_array(np.full(outputs, 0.05, np.float32), "ws"),
        numpy_helper.from_array(np.full(outputs, weight_zero, np.int8), "wz"),
    ]
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, outputs, 5, 5])],
        initializer=initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _stays_float(model: onnx.ModelProto) -> None:
    graph, params = from_onnx(model)
    result, result_params = quantized_ops(graph, params)
    assert "qconv" not in _ops(result)
    assert _ops(result).count("conv") == 1
    x = np.random.default_rng(3).standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        interpret(result, result_params, {"x": x})["y"], interpret(graph, params, {"x": x})["y"]
    )


def test_the_hand_made_pattern_golden(check_pass) -> None:
    """Before: Q, DQ of the data, DQ of the weight (cast, multiply), conv. After: the
    conv reads the uint8 data and the int8 weight; its sum is scaled by xs * ws."""
    weight = np.random.default_rng(4).integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    graph, params = from_onnx(_hand_quantized(np.array(0.1), weight))
    _, result_params = check_pass(
        quantized_ops, graph, params,
        expected="""
        graph hand(%x: float32[1, 4, 5, 5]) -> (%y: float32[1, 8, 5, 5]) {
          param %xs: float32[]
          param %QuantizeLinear_0_zp_float_1: float32[]
          param %Conv_3_weight_int8: int8[8, 4, 3, 3]
          param %Conv_3_scale: float32[8, 1, 1]
          %QuantizeLinear_0_scaled = divide(%x, %xs) : float32[1, 4, 5, 5]
          %QuantizeLinear_0_rounded = round(%QuantizeLinear_0_scaled) : float32[1, 4, 5, 5]
          %QuantizeLinear_0_shifted = add(%QuantizeLinear_0_rounded, %QuantizeLinear_0_zp_float_1) : float32[1, 4, 5, 5]
          %QuantizeLinear_0_saturated = clip(%QuantizeLinear_0_shifted) {low=0.0, high=255.0} : float32[1, 4, 5, 5]
          %QuantizeLinear_0 = cast(%QuantizeLinear_0_saturated) {dtype="uint8"} : uint8[1, 4, 5, 5]
          %Conv_3_qconv = qconv(%QuantizeLinear_0, %Conv_3_weight_int8) {strides=[1, 1], padding=[1, 1, 1, 1], dilations=[1, 1], groups=1, layout="NCHW", kernel_layout="OIHW", data_zero_point=3} : int32[1, 8, 5, 5]
          %Conv_3_float = cast(%Conv_3_qconv) {dtype="float32"} : float32[1, 8, 5, 5]
          %y = multiply(%Conv_3_float, %Conv_3_scale) : float32[1, 8, 5, 5]
        }
        """,  # noqa: E501
    )  # fmt: skip
    np.testing.assert_array_equal(result_params["Conv_3_weight_int8"], weight)
    np.testing.assert_array_equal(
        result_params["Conv_3_scale"], np.full((8, 1, 1), np.float32(0.1) * np.float32(0.05))
    )


def test_a_data_scale_per_channel_stays_float() -> None:
    weight = np.random.default_rng(5).integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    _stays_float(_hand_quantized(np.array([0.1, 0.2, 0.3, 0.4]), weight))


def test_a_weight_zero_point_stays_float() -> None:
    weight = np.random.default_rng(6).integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    _stays_float(_hand_quantized(np.array(0.1), weight, weight_zero=2))


def test_a_grouped_conv_stays_float() -> None:
    weight = np.random.default_rng(7).integers(-127, 128, (8, 2, 3, 3)).astype(np.int8)
    _stays_float(_hand_quantized(np.array(0.1), weight, group=2))


def test_depthwise_convs_and_products_become_integer_convs() -> None:
    """A depthwise conv is a grouped qconv; Gemm (transB) and MatMul by a constant are
    1x1 qconvs over their rows (2-d data reshaped to [1, rows, K] and back)."""
    model, shape = mixed_network()
    graph, params = from_onnx(quantized(model, shape))
    result, result_params = quantized_ops(graph, params)
    verify(result)
    qconvs = [node for node in result.nodes if node.op == "qconv"]
    assert [node.attrs.groups for node in qconvs] == [1, 16, 1, 1]
    assert not {"conv", "matmul", "dense"} & set(_ops(result))
    # 2-d data as [1, rows, K] for a 1-d 1x1 conv (NWC), the weight as WIO [1, K, N]
    assert [result_params[node.inputs[1].name].shape for node in qconvs[2:]] == [
        (1, 16, 40),
        (1, 40, 24),
    ]
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(
        interpret(result, result_params, {"x": x})["y"], interpret(graph, params, {"x": x})["y"]
    )


def test_max_pools_and_concats_of_one_grid_move_integers() -> None:
    """Dequantization commutes with a max pool and with a concat of values on one grid:
    they run on the uint8 values, dequantized after; a concat across grids stays
    float."""
    for second_scale, integer_concat in ((0.1, True), (0.2, False)):
        graph, params = from_onnx(moving_model(second_scale))
        result, result_params = quantized_ops(graph, params)
        verify(result)
        integer_ops = {n.op for n in result.nodes if n.inputs[0].dtype == "uint8"}
        assert "max_pool" in integer_ops
        assert ("concat" in integer_ops) == integer_concat
        x = np.random.default_rng(9).standard_normal((1, 4, 6, 6)).astype(np.float32) * 2
        want = interpret(graph, params, {"x": x})
        got = interpret(result, result_params, {"x": x})
        for name in ("p", "c"):
            np.testing.assert_array_equal(got[name], want[name])
