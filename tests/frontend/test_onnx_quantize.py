"""QuantizeLinear / DequantizeLinear import, against ONNX Runtime: one-node models over
the opsets, types and axes the spec allows, and whole networks quantized by
`onnxruntime.quantization.quantize_static` (QDQ, per channel) both interpreted and
compiled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import test_torch_export as zoo
from onnx_models import check_one_node, one_node_model
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from quantized_models import moving_model

import ember
from ember.cli import main
from ember.errors import UnsupportedOperatorError
from ember.frontend import from_onnx
from ember.graph import interpret
from ember.graph.passes import fold_constants
from ember.testing.oracle import ATOL, RTOL, check_against_onnxruntime, run_onnxruntime


def _values(*shape: int) -> np.ndarray:
    # Includes exact halves of the scale below, where rounding to even matters.
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:4] = [0.25, 0.75, -0.25, 300.0]
    return x


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantize_per_tensor(opset: int, dtype: str) -> None:
    constants = {"scale": np.array(0.5, np.float32), "zero_point": np.array(3, dtype)}
    check_one_node("QuantizeLinear", _values(2, 3, 4), opset, constants)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16"])
def test_quantize_per_axis(dtype: str) -> None:
    constants = {
        "scale": np.array([0.5, 0.1, 2.0], np.float32),
        "zero_point": np.array([0, 5, 1], dtype),
    }
    check_one_node("QuantizeLinear", _values(2, 3, 4), 21, constants, axis=1)


def test_quantize_without_zero_point_is_uint8() -> None:
    out = check_one_node("QuantizeLinear", _values(5, 4), 13, {"scale": np.array(0.02, np.float32)})
    assert out["y0"].dtype == np.uint8


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_dequantize(dtype: str) -> None:
    x = np.random.default_rng(1).integers(-100 if dtype != "uint8" else 0, 200, (2, 3, 4))
    model = one_node_model(
        "DequantizeLinear", x.astype(dtype), 13,
        {"scale": np.array([0.5, 0.25, 0.125], np.float32), "zero_point": np.zeros(3, dtype)},
        axis=1,
    )  # fmt: skip
    check_against_onnxruntime(model, {"x": x.astype(dtype)})


def test_dequantized_weights_stay_int8_until_fold_constants() -> None:
    """An int8 weight's dequantization stays as nodes at import (the quantized_ops pass
    reads the integers), and folds into a float param when nothing takes them."""
    weight = np.random.default_rng(2).integers(-127, 128, (4, 3)).astype(np.int8)
    model = one_node_model(
        "DequantizeLinear", weight, 13, input_names=["w", "scale"],
        constants={"w": weight, "scale": np.array([0.1, 0.2, 0.3, 0.4], np.float32)},
        axis=0,
    )  # fmt: skip
    graph, params = from_onnx(model)
    assert [n.op for n in graph.nodes] == ["cast", "multiply"]
    graph, params = fold_constants(graph, params)
    assert not graph.nodes or all(n.op == "identity" for n in graph.nodes)
    (array,) = params.values()
    np.testing.assert_array_equal(
        array, weight * np.array([0.1, 0.2, 0.3, 0.4], np.float32)[:, None]
    )


def test_blocked_quantization_is_refused() -> None:
    model = one_node_model(
        "DequantizeLinear", np.zeros((4, 4), np.int8), 21,
        {"scale": np.ones((4, 2), np.float32)}, axis=1, block_size=2,
    )  # fmt: skip
    with pytest.raises(UnsupportedOperatorError, match="blocked"):
        from_onnx(model)


# -- whole networks -------------------------------------------------------------------------


class _Calibration(CalibrationDataReader):
    def __init__(self, inputs: dict[str, np.ndarray], count: int = 8) -> None:
        rng = np.random.default_rng(3)
        self._items = iter(
            [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in inputs.items()}
             for _ in range(count)]
        )  # fmt: skip

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)


def quantized_zoo_model(
    name: str, work: Path, activations: QuantType, form: str = "qdq"
) -> tuple[Path, dict[str, np.ndarray]]:
    """The zoo network exported to ONNX and quantized as ORT's tool does it: static
    (int8 per-channel weights, calibrated on random inputs) as Q/DQ pairs ("qdq") or
    quantized operators ("qoperator"), or dynamic ("dynamic": MatMulInteger /
    ConvInteger behind DynamicQuantizeLinear)."""
    inputs = zoo.case_inputs(name, 1)
    float_path, quantized_path = work / "float.onnx", work / "int8.onnx"
    onnx.save(zoo.exported(name, 1), float_path)
    if form == "dynamic":
        quantize_dynamic(str(float_path), str(quantized_path), weight_type=QuantType.QInt8)
        return quantized_path, inputs
    quantize_static(
        str(float_path), str(quantized_path), _Calibration(inputs),
        quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
        per_channel=True, activation_type=activations, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return quantized_path, inputs


def _within_one_step(ours: np.ndarray, theirs: np.ndarray, step: float) -> None:
    """Ember's float arithmetic may round a value on the edge of a quantization step the
    other way from ORT's integer kernels: all elements within one step, and at least
    99.9% equal."""
    difference = np.abs(ours - theirs)
    assert difference.max() <= step * 1.0001, (difference.max(), step)
    assert (difference <= 1e-6).mean() >= 0.999


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the last QDQ'd value."""
    scales = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(np.max(scales[last.input[1]]))


QUANTIZED = [
    ("resnet_v1_basic", QuantType.QUInt8, "qdq"),
    ("mobilenet_v2", QuantType.QInt8, "qdq"),
    ("efficientnet", QuantType.QUInt8, "qdq"),
    ("inception_v3", QuantType.QInt8, "qdq"),
    ("resnet_v1_basic", QuantType.QUInt8, "qoperator"),
    ("efficientnet", QuantType.QUInt8, "qoperator"),
    ("inception_v3", QuantType.QUInt8, "qoperator"),
    ("mobilenet_v3", QuantType.QUInt8, "qoperator"),
    ("bert", QuantType.QUInt8, "dynamic"),
    ("vit", QuantType.QUInt8, "dynamic"),
    ("resnet_v1_basic", QuantType.QUInt8, "dynamic"),
]


def _case_id(case: tuple[str, QuantType, str]) -> str:
    return f"{case[0]}-{case[2]}-{case[1].name}"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", QUANTIZED, ids=_case_id)
def test_quantized_model_matches_onnxruntime(
    case: tuple[str, QuantType, str], tmp_path: Path
) -> None:
    name, activations, form = case
    path, inputs = quantized_zoo_model(name, tmp_path, activations, form)
    model = onnx.load(path)
    graph, params = from_onnx(model)
    ours = interpret(graph, params, inputs)
    theirs = run_onnxruntime(model, inputs)
    for got, want in zip(ours.values(), theirs.values(), strict=True):
        if form == "dynamic":  # float outputs, quantized only inside: float tolerances
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        else:
            _within_one_step(got, want, _output_step(model))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("form", ["qdq", "qoperator", "dynamic"])
def test_quantized_model_compiles_and_runs(form: str, tmp_path: Path) -> None:
    path, inputs = quantized_zoo_model("mobilenet_v2", tmp_path, QuantType.QUInt8, form)
    artifact, feeds, saved = tmp_path / "q.tar", tmp_path / "in.npz", tmp_path / "out.npz"
    assert main(["compile", str(path), "-o", str(artifact)]) == 0
    np.savez(feeds, **inputs)
    assert main(["run", str(artifact), "--inputs", str(feeds), "-o", str(saved)]) == 0
    model = onnx.load(path)
    want = next(iter(run_onnxruntime(model, inputs).values()))
    with np.load(saved) as data:
        if form == "dynamic":
            np.testing.assert_allclose(data["output_0"], want, rtol=RTOL, atol=ATOL)
        else:
            _within_one_step(data["output_0"], want, _output_step(model))


def test_integer_max_pools_and_concats_compile_exactly() -> None:
    """The max pool and the concat that quantized_ops runs on uint8 values, compiled,
    equal the interpreter of the imported graph."""
    graph, params = from_onnx(moving_model(0.1))
    library = ember.build(graph, "llvm", params)
    kernels = [group["kernel"] for group in library.metadata["groups"]]
    assert any(kernel.startswith("max_pool_cast") for kernel in kernels), kernels
    x = np.random.default_rng(9).standard_normal((1, 4, 6, 6)).astype(np.float32) * 2
    want, got = interpret(graph, params, {"x": x}), library.load()(x=x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


# -- ember quantize ------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore")
def test_ember_quantize_writes_a_qdq_model_ember_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    float_path = tmp_path / "net.onnx"
    onnx.save(zoo.exported("resnet_v1_basic", 1), float_path)
    rng = np.random.default_rng(4)
    # Samples without the model's batch axis of 1: (samples, C, H, W).
    np.savez(tmp_path / "calib.npz", input=rng.standard_normal((6, 3, 32, 32)).astype(np.float32))
    assert main(["quantize", str(float_path), "--calibration", str(tmp_path / "calib.npz")]) == 0
    out = tmp_path / "net.int8.onnx"
    assert "QuantizeLinear" in capsys.readouterr().out
    model = onnx.load(out)
    weights = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert weights and any(
        onnx.numpy_helper.to_array(i).size > 1
        for i in model.graph.initializer
        if i.name in {n.input[1] for n in weights}
    ), "per-channel weight scales"
    inputs = zoo.case_inputs("resnet_v1_basic", 1)
    graph, params = from_onnx(model)
    ours = next(iter(interpret(graph, params, inputs).values()))
    _within_one_step(ours, next(iter(run_onnxruntime(model, inputs).values())), _output_step(model))


def test_ember_quantize_checks_the_calibration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    float_path = tmp_path / "net.onnx"
    onnx.save(zoo.exported("resnet_v1_basic", 1), float_path)
    np.savez(tmp_path / "bad.npz", image=np.zeros((2, 3, 32, 32), np.float32))
    assert main(["quantize", str(float_path), "--calibration", str(tmp_path / "bad.npz")]) == 2
    assert "no array for model input(s) ['input']" in capsys.readouterr().err
    np.savez(tmp_path / "shape.npz", input=np.zeros((2, 3, 16, 16), np.float32))
    assert main(["quantize", str(float_path), "--calibration", str(tmp_path / "shape.npz")]) == 2
    assert "samples along the first axis" in capsys.readouterr().err


def test_channels_last_quantized_pooling_is_refused() -> None:
    from onnx import TensorProto, helper

    node = helper.make_node(
        "QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
        channels_last=1,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 1, 1, 3])],
        [onnx.numpy_helper.from_array(np.array(0.1, np.float32), "s"),
         onnx.numpy_helper.from_array(np.array(3, np.uint8), "z")],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    with pytest.raises(UnsupportedOperatorError, match="channels_last"):
        from_onnx(model)


def test_per_channel_vector_without_axis_dequantizes_along_its_only_axis() -> None:
    """ONNX Runtime's quantizer writes a Gemm's int32 bias with one scale per channel and
    no `axis` (the default 1 is out of range for a vector): Ember takes axis 0."""
    bias = np.array([100, -7, 40], np.int32)
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    model = one_node_model(
        "DequantizeLinear", bias, 17, input_names=["x", "scale"], constants={"scale": scale}
    )
    graph, params = from_onnx(model)
    (out,) = interpret(graph, params, {"x": bias}).values()
    np.testing.assert_array_equal(out, bias * scale)


def test_a_scalar_dequantizes_per_tensor() -> None:
    """A rank-0 tensor (a quantized pad value, as EfficientNet's static padding has)
    with the default axis 1: per-tensor, the axis does not apply."""
    model = one_node_model(
        "DequantizeLinear", np.array(7, np.uint8), 17,
        {"scale": np.array(0.5, np.float32), "zero_point": np.array(3, np.uint8)},
    )  # fmt: skip
    check_against_onnxruntime(model, {"x": np.array(7, np.uint8)})
