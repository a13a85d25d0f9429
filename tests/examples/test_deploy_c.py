"""examples/deploy_c: build a network, export it, untar it, compile deploy.c with its
Makefile, run it with no Python, and compare its top-5 with the Python runtime's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.build import build
from ember.runtime import load

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deploy_c"
TOP_LINE = re.compile(r"^\s+(\d): class (\d+) score (\S+)$", re.MULTILINE)
TIME_LINE = re.compile(r"^time \(ms\) over 3 repeats: mean (\S+) median (\S+) min (\S+) max (\S+)$")

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or shutil.which("cc") is None,
    reason="the C example needs make and cc",
)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A ResNet-18 (32x32, 16 classes) exported, extracted, and deploy.c built."""
    work = tmp_path_factory.mktemp("deploy_c")
    graph, params = ember.testing.get_workload(
        "resnet-18", layout="NHWC", image_shape=(32, 32, 3), num_classes=16
    )
    artifact = build(graph, "llvm", params=params).export_library(work / "net.tar")
    with tarfile.open(artifact) as tar:
        tar.extractall(work / "model", filter="data")
    source = work / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("deploy"))
    subprocess.run(["make", "-s", "-C", str(source)], check=True, capture_output=True)
    return {"artifact": artifact, "model": work / "model", "deploy": source / "deploy"}


def _shape(entry: dict) -> str:
    return "x".join(map(str, entry["shape"]))


def _run_deploy(
    deployed: dict[str, Path], image: Path, *shapes: str
) -> subprocess.CompletedProcess:
    model = deployed["model"]
    command = [deployed["deploy"], model / "mod.so", model / "mod.params", image, *shapes, "3"]
    return subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=120)


def test_deploy_prints_the_python_runtimes_top5(deployed: dict[str, Path], tmp_path: Path) -> None:
    metadata = json.loads((deployed["model"] / "mod.json").read_text())
    x = np.random.default_rng(7).standard_normal(metadata["inputs"][0]["shape"]).astype(np.float32)
    x.tofile(tmp_path / "input.bin")
    result = _run_deploy(
        deployed,
        tmp_path / "input.bin",
        _shape(metadata["inputs"][0]),
        _shape(metadata["outputs"][0]),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"target: {metadata['target']}\n")

    scores = load(deployed["artifact"])(data=x)["output"].ravel()
    want = np.argsort(-scores, kind="stable")[:5]  # ties: lower class first, as deploy.c
    top = TOP_LINE.findall(result.stdout)
    assert [int(rank) for rank, _, _ in top] == [1, 2, 3, 4, 5]
    assert [int(cls) for _, cls, _ in top] == want.tolist()
    np.testing.assert_allclose([float(s) for _, _, s in top], scores[want], rtol=1e-5, atol=1e-6)

    timing = TIME_LINE.search(result.stdout.splitlines()[-1])
    assert timing is not None, result.stdout
    mean, median, low, high = map(float, timing.groups())
    assert 0 < low <= median <= high and low <= mean <= high


def test_deploy_checks_the_input_size(deployed: dict[str, Path], tmp_path: Path) -> None:
    np.zeros(10, np.float32).tofile(tmp_path / "small.bin")
    result = _run_deploy(deployed, tmp_path / "small.bin", "1x32x32x3", "1x16")
    assert result.returncode == 1
    assert "small.bin holds 40 bytes, the input shape needs 3072 float32" in result.stderr


def test_deploy_usage(deployed: dict[str, Path]) -> None:
    result = subprocess.run([str(deployed["deploy"])], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "INPUT_SHAPE OUTPUT_SHAPE" in result.stderr
