"""The `ember` command: `ember info` on workloads and ONNX files, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ember.cli import main, parse_shapes
from ember.testing import get_workload, to_onnx

# Published multiply-accumulate counts (convolutions and the classifier) at 224x224:
# ResNet-18 1.82 G, ResNet-50 4.09 G, MobileNet v1 569 M.
PUBLISHED_MACS = {"resnet-18": 1.82e9, "resnet-50": 4.09e9, "mobilenet": 0.569e9}


@pytest.mark.parametrize("name", sorted(PUBLISHED_MACS))
def test_info_json_macs_match_published_counts(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", name, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "data", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert summary["outputs"][0]["shape"] == [1, 1000]
    assert summary["total_macs"] == pytest.approx(PUBLISHED_MACS[name], rel=0.01)
    assert sum(op["count"] for op in summary["ops"]) == summary["nodes"]
    conv = next(op for op in summary["ops"] if op["op"] == "conv")
    assert conv["flops"] == 2 * conv["macs"]


def test_info_table_for_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph, params = get_workload("mlp", batch_size=4)
    path = tmp_path / "mlp.onnx"
    to_onnx(graph, params, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[4, 3, 224, 224]" in out and "[4, 1000]" in out
    assert "dense" in out and "total" in out


def test_info_batch_size_and_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "mobilenet", "--layout", "NHWC", "--batch-size", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"][0]["shape"] == [2, 224, 224, 3]


def test_info_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "resnet-19"]) == 2
    err = capsys.readouterr().err
    assert "'resnet-19' is neither an existing model file nor a built-in workload" in err
    assert "resnet-18" in err


def test_info_missing_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(tmp_path / "absent.onnx")]) == 2
    assert "absent.onnx" in capsys.readouterr().err


def test_parse_shapes() -> None:
    assert parse_shapes("data:1,3,224,224; mask:1,16") == {
        "data": (1, 3, 224, 224),
        "mask": (1, 16),
    }
    assert parse_shapes(None) is None
    assert parse_shapes("data:1,3;") == {"data": (1, 3)}


def test_parse_shapes_error_says_the_format() -> None:
    from ember.errors import EmberError

    with pytest.raises(EmberError, match=r"write NAME:D1,D2,\.\.\."):
        parse_shapes("data=1,3")
