"""Small quantized ONNX models made the way users make them: a float model quantized by
`onnxruntime.quantization.quantize_static` (QDQ, per-channel int8 weights)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)


class _Samples(CalibrationDataReader):
    def __init__(self, shape: tuple[int, ...], count: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.items = iter(
            [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


def quantized(model: onnx.ModelProto, shape: tuple[int, ...], activations: str = "uint8",
              seed: int = 0) -> onnx.ModelProto:  # fmt: skip
    """`model` (one input `x` of `shape`) quantized statically: QDQ, per-channel int8
    weights, `activations` uint8 or int8, calibrated on 8 standard-normal samples."""
    activation_type = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
    # quantize_static reads and writes files.
    with tempfile.TemporaryDirectory() as work:
        float_path, int8_path = Path(work, "f32.onnx"), Path(work, "int8.onnx")
        onnx.save(model, str(float_path))
        quantize_static(
            str(float_path), str(int8_path), _Samples(shape, 8, seed),
            quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=activation_type, weight_type=QuantType.QInt8,
        )  # fmt: skip
        return onnx.load(str(int8_path))


def conv_chain(channels: int = 8, outputs: int = 32, size: tuple[int, int] = (10, 12),
               seed: int = 0) -> tuple[onnx.ModelProto, tuple[int, ...]]:  # fmt: skip
    """A float model: 3x3 conv (bias, padding 1) -> relu -> 1x1 conv to 16 channels ->
    3x3 stride-2 conv (no padding) to 20 channels, and its input shape."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    shape = (1, channels, *size)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Conv", ["c2", "w3"], ["y"], strides=[2, 2]),
    ]
    initializers = [
        numpy_helper.from_array(weight(outputs, channels, 3, 3), "w1"),
        numpy_helper.from_array(rng.standard_normal(outputs).astype(np.float32), "b1"),
        numpy_helper.from_array(weight(16, outputs, 1, 1), "w2"),
        numpy_helper.from_array(weight(20, 16, 3, 3), "w3"),
    ]
    out_size = [(s - 3) // 2 + 1 for s in size]
    graph = helper.make_graph(
        nodes, "conv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, *out_size])],
        initializer=initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), shape


def mixed_network(seed: int = 0) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """A float model with each kind of product the quantized_ops pass takes: 3x3 conv
    -> relu -> 3x3 depthwise conv -> global average pool -> flatten -> Gemm (transB=1,
    bias) -> MatMul by a constant [40, 24]; and its input shape."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    shape = (1, 8, 10, 12)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "dw"], ["c2"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "gb"], ["o1"], transB=1),
        helper.make_node("MatMul", ["o1", "m"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(weight(16, 8, 3, 3), "w1"),
        numpy_helper.from_array(weight(16, 1, 3, 3), "dw"),
        numpy_helper.from_array(weight(40, 16), "g"),
        numpy_helper.from_array(weight(40), "gb"),
        numpy_helper.from_array(weight(40, 24), "m"),
    ]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24])],
        initializer=initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), shape


def moving_model(second_scale: float) -> onnx.ModelProto:
    """x quantized twice (scales 0.1 and `second_scale`, zero point 3), each dequantized;
    a max pool (ceil mode, padding 1) of the first; a concat of both."""
    q = [
        helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"]),
        helper.make_node("QuantizeLinear", ["x", "s2", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["d2"]),
        helper.make_node(
            "MaxPool",
            ["d1"],
            ["p"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
        ),
        helper.make_node("Concat", ["d1", "d2"], ["c"], axis=1),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0.1, np.float32), "s1"),
        numpy_helper.from_array(np.array(second_scale, np.float32), "s2"),
        numpy_helper.from_array(np.array(3, np.uint8), "z"),
    ]
    graph = helper.make_graph(
        q, "moving", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 4, 4, 4]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 8, 6, 6])],
        initializer=initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
