"""ONNX's backend node tests through Ember, per op type of the foundation op list.

Unsupported cases are allowed (each is printed with its reason: run pytest with -s or
look at the captured output of a failing test); a failed case is a bug.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_models import graph_model, value_info

from ember.testing.onnx_conformance import (
    KNOWN_DEVIATIONS,
    CaseResult,
    ConformanceCase,
    case_op_types,
    format_table,
    load_cases,
    main,
    run_case,
    run_conformance,
    summarize,
)

FOUNDATION_OPS = (
    "Conv",
    "ConvTranspose",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Erf",
    "Gelu",
    "Softplus",
    "Elu",
    "Selu",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Neg",
    "Abs",
    "Pow",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Min",
    "Max",
    "Sum",
    "Mean",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Gemm",
    "MatMul",
    "Flatten",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "Squeeze",
    "Unsqueeze",
    "Shape",
    "Expand",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "Not",
    "Cast",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "Softmax",
    "LogSoftmax",
    "Pad",
    "Resize",
    "Upsample",
    "Dropout",
    "Identity",
    "Constant",
    "ConstantOfShape",
    "Range",
    "Tile",
    "DepthToSpace",
    "SpaceToDepth",
    "ArgMax",
    "TopK",
)


@pytest.mark.parametrize("op_type", FOUNDATION_OPS)
def test_backend_node_cases(op_type: str) -> None:
    results = run_conformance({op_type})
    assert results, f"no ONNX backend cases map to {op_type}"
    for result in results:
        if result.status != "passed":
            print(f"{result.status.upper()} {result.name}: {result.reason}")
    failed = [f"{r.name}: {r.reason}" for r in results if r.status == "failed"]
    assert not failed, "\n".join(failed)
    stale = [r.name for r in results if r.name in KNOWN_DEVIATIONS and r.status != "deviates"]
    assert not stale, f"listed in KNOWN_DEVIATIONS but no longer deviating: {stale}"


# -- the runner's own mechanics, on hand-made cases ----------------------------------------


def _case(
    name: str,
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    opset: int = 13,
) -> ConformanceCase:
    model = graph_model(
        [node],
        [value_info(n, a) for n, a in inputs.items()],
        [value_info(n, a) for n, a in expected.items()],
        opset=opset,
    )
    return ConformanceCase(name, model, ((tuple(inputs.values()), tuple(expected.values())),))


X = np.array([-1.0, 0.5, 2.0], np.float32)


def test_correct_numbers_pass() -> None:
    case = _case("relu", helper.make_node("Relu", ["x"], ["y"]), {"x": X}, {"y": np.maximum(X, 0)})
    assert run_case(case, "Relu").status == "passed"


def test_wrong_numbers_fail_with_the_first_difference() -> None:
    case = _case("relu", helper.make_node("Relu", ["x"], ["y"]), {"x": X}, {"y": X})
    result = run_case(case, "Relu")
    assert result.status == "failed"
    assert "1 of 3 values differ, e.g. at (0,)" in result.reason


def test_wrong_dtype_fails() -> None:
    case = _case("relu", helper.make_node("Relu", ["x"], ["y"]), {"x": X}, {"y": X})
    wrong = ((X,), (np.maximum(X, 0).astype(np.float64),))
    result = run_case(ConformanceCase(case.name, case.model, (wrong,)), "Relu")
    assert result.status == "failed"
    assert "dtype float32, expected float64" in result.reason


def test_unsupported_operator_is_unsupported() -> None:
    boxes = np.zeros((1, 2, 4), np.float32)
    scores = np.zeros((1, 1, 2), np.float32)
    node = helper.make_node("NonMaxSuppression", ["b", "s"], ["i"])
    case = _case("nms", node, {"b": boxes, "s": scores}, {"i": np.zeros((0, 3), np.int64)})
    result = run_case(case, "NonMaxSuppression")
    assert result.status == "unsupported"
    assert "NonMaxSuppression (x1" in result.reason


def test_shape_inputs_are_frozen_into_constants() -> None:
    data = np.arange(6, dtype=np.float32)
    shape = np.array([2, 3], np.int64)
    node = helper.make_node("Reshape", ["data", "shape"], ["y"])
    case = _case("reshape", node, {"data": data, "shape": shape}, {"y": data.reshape(2, 3)})
    result = run_case(case, "Reshape")
    assert (result.status, result.frozen) == ("passed", ("shape",))


def test_table_and_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    results = [
        CaseResult("a", "Relu", "passed"),
        CaseResult("b", "Relu", "failed", "wrong"),
        CaseResult("c", "Add", "unsupported", "why"),
    ]
    assert summarize(results) == {
        "Add": {"passed": 0, "failed": 0, "unsupported": 1, "deviates": 0},
        "Relu": {"passed": 1, "failed": 1, "unsupported": 0, "deviates": 0},
    }
    assert list(format_table(results)) == [
        "Add    0 passed, 0 failed, 1 unsupported",
        "Relu   1 passed, 1 failed, 0 unsupported",
        "total  1 passed, 1 failed, 1 unsupported",
    ]
    assert main(["--ops", "Relu,Abs"]) == 0
    printed = capsys.readouterr().out
    assert "Abs   " in printed and "Relu  " in printed and "total" in printed


def test_bool_outputs_compare_exactly() -> None:
    node = helper.make_node("Not", ["x"], ["y"])
    x = np.array([True, False])
    assert run_case(_case("not", node, {"x": x}, {"y": ~x}), "Not").status == "passed"
    assert run_case(_case("not", node, {"x": x}, {"y": x}), "Not").status == "failed"


def test_reads_cases_laid_out_like_the_onnx_data_directory(tmp_path: Path) -> None:
    """model.onnx plus test_data_set_N/input_K.pb and output_K.pb, as ONNX ships them."""
    x = np.array([-2.0, 3.0], np.float32)
    case = _case("abs", helper.make_node("Abs", ["x"], ["y"]), {"x": x}, {"y": np.abs(x)})
    case_dir = tmp_path / "test_abs"
    data_dir = case_dir / "test_data_set_0"
    data_dir.mkdir(parents=True)
    onnx.save(case.model, str(case_dir / "model.onnx"))
    (data_dir / "input_0.pb").write_bytes(onnx.numpy_helper.from_array(x).SerializeToString())
    expected = onnx.numpy_helper.from_array(np.abs(x)).SerializeToString()
    (data_dir / "output_0.pb").write_bytes(expected)
    (tmp_path / "not_a_case").mkdir()
    cases = load_cases(tmp_path)
    assert [c.name for c in cases] == ["test_abs"]
    assert case_op_types(cases) == {"test_abs": "Abs"}
    assert run_case(cases[0], "Abs").status == "passed"


def test_expanded_cases_count_under_the_op_they_expand() -> None:
    x = np.array([1.0], np.float32)
    plain = _case("test_thing", helper.make_node("Relu", ["x"], ["y"]), {"x": x}, {"y": x})
    expanded = _case(
        "test_thing_expanded_ver18", helper.make_node("Max", ["x"], ["y"]), {"x": x}, {"y": x}
    )
    assert case_op_types([plain, expanded]) == {
        "test_thing": "Relu",
        "test_thing_expanded_ver18": "Relu",
    }
