"""Artifacts: export -> load -> run equals the reference interpreter, and every way a
bad artifact is refused, with the message the user reads."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import ember
import ember.runtime.module as runtime_module
from ember.build import Library, build
from ember.device import host_cpu_features
from ember.errors import ArtifactError
from ember.graph.interpret import interpret
from ember.runtime import FORMAT_VERSION, load
from ember.runtime.artifact import MEMBERS
from ember.target import host_triple

NETWORKS = {
    "mlp": dict(image_shape=(1, 8, 8), num_classes=10),
    "resnet-18": dict(layout="NHWC", image_shape=(32, 32, 3), num_classes=10),
    "mobilenet": dict(layout="NCHW", image_shape=(3, 32, 32), num_classes=10),
}


@pytest.fixture(scope="module")
def mlp_library() -> Library:
    graph, params = ember.testing.get_workload("mlp", **NETWORKS["mlp"])
    return build(graph, "llvm", params=params)


@pytest.fixture
def artifact(mlp_library: Library, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The mlp exported to a tar; loads extract into a fresh cache (kernels built before)."""
    path = mlp_library.export_library(tmp_path / "net.tar")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    return path


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def _write_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def _edit_metadata(path: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the artifact with mod.json changed (its checksums cover the others)."""
    members = _members(path)
    metadata = json.loads(members["mod.json"])
    edit(metadata)
    members["mod.json"] = json.dumps(metadata).encode()
    return _write_tar(path.with_name("edited.tar"), members)


@pytest.mark.parametrize("name", NETWORKS)
def test_round_trip_matches_interpreter(name: str, tmp_path: Path) -> None:
    graph, params = ember.testing.get_workload(name, **NETWORKS[name])
    path = build(graph, "llvm", params=params).export_library(tmp_path / f"{name}.tar")
    module = load(path)
    x = np.random.default_rng(0).standard_normal(module.inputs[0].shape).astype(np.float32)
    got = module(data=x)
    for output, want in interpret(graph, params, {"data": x}).items():
        np.testing.assert_allclose(got[output], want, rtol=1e-4, atol=1e-5)


def test_export_writes_the_three_members(mlp_library: Library, artifact: Path) -> None:
    members = _members(artifact)
    assert sorted(members) == sorted(MEMBERS)
    metadata = json.loads(members["mod.json"])
    assert metadata["format_version"] == FORMAT_VERSION
    assert metadata["target"] == "llvm"
    assert metadata["versions"]["ember"] == ember.__version__
    assert metadata["inputs"] == [{"name": "data", "shape": [1, 1, 8, 8], "dtype": "float32"}]
    # What -march=native meant on the building machine: its ISA extensions.
    assert set(metadata["cpu_features"]) <= host_cpu_features() | {"sse2"}
    assert ("avx2" in metadata["cpu_features"]) == ("avx2" in host_cpu_features())
    assert metadata["checksums"]["mod.so"] == hashlib.sha256(members["mod.so"]).hexdigest()
    stored = safetensors.numpy.load(members["mod.params"])
    assert set(stored) == {p["name"] for p in metadata["params"]}
    for param, array in mlp_library.params.items():
        np.testing.assert_array_equal(stored[param], array)


def test_export_is_reproducible(mlp_library: Library, artifact: Path) -> None:
    again = mlp_library.export_library(artifact.with_name("again.tar"))
    assert again.read_bytes() == artifact.read_bytes()


def test_loads_share_one_extraction(artifact: Path, tmp_path: Path) -> None:
    def load_and_run() -> None:
        load(artifact)(data=np.ones((1, 1, 8, 8), np.float32))

    threads = [threading.Thread(target=load_and_run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    load_and_run()
    extracted = list((tmp_path / "cache" / "artifacts").iterdir())
    assert len(extracted) == 1  # one directory, no leftover private ones
    assert sorted(p.name for p in extracted[0].iterdir()) == sorted(MEMBERS)


def test_a_changed_file_at_the_same_path_is_loaded_afresh(artifact: Path) -> None:
    first = load(artifact)
    _edit_metadata(artifact, lambda m: m["outputs"][0].update(name="probabilities"))
    artifact.with_name("edited.tar").replace(artifact)
    assert load(artifact).get_output_info() == {"probabilities": ((1, 10), "float32")}
    assert first.get_output_info() == {"output": ((1, 10), "float32")}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"no artifact at .*nothing\.tar: build one with"):
        load(tmp_path / "nothing.tar")


def test_not_a_tar(artifact: Path) -> None:
    artifact.write_bytes(b"this is not an archive" * 100)
    with pytest.raises(ArtifactError, match=r"net\.tar is not a readable Ember artifact"):
        load(artifact)


def test_truncated_tar(artifact: Path) -> None:
    artifact.write_bytes(artifact.read_bytes()[: artifact.stat().st_size // 2])
    with pytest.raises(ArtifactError, match=r"net\.tar (is not a readable|lacks)"):
        load(artifact)


@pytest.mark.parametrize("missing", MEMBERS)
def test_missing_member(artifact: Path, missing: str) -> None:
    members = _members(artifact)
    del members[missing]
    broken = _write_tar(artifact.with_name("broken.tar"), members)
    with pytest.raises(ArtifactError, match=f"broken.tar lacks {re.escape(missing)}: "):
        load(broken)


@pytest.mark.parametrize("member", ["mod.so", "mod.params"])
def test_damaged_member(artifact: Path, member: str) -> None:
    members = _members(artifact)
    damaged = bytearray(members[member])
    damaged[len(damaged) // 2] ^= 0xFF
    members[member] = bytes(damaged)
    path = _write_tar(artifact.with_name("damaged.tar"), members)
    with pytest.raises(ArtifactError, match=f"{re.escape(member)} does not match its checksum"):
        load(path)


def test_unreadable_metadata(artifact: Path) -> None:
    members = _members(artifact)
    members["mod.json"] = b"{not json"
    path = _write_tar(artifact.with_name("bad.tar"), members)
    with pytest.raises(ArtifactError, match=r"mod\.json is unreadable"):
        load(path)


def test_other_format_version(artifact: Path) -> None:
    path = _edit_metadata(artifact, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    message = f"is Ember artifact format {FORMAT_VERSION + 1} (made by Ember {ember.__version__})"
    with pytest.raises(ArtifactError, match=re.escape(message) + ".*this Ember reads format 1"):
        load(path)


def test_built_for_another_architecture(artifact: Path) -> None:
    other = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
    if host_triple().startswith("aarch64"):
        other = "llvm -mtriple=x86_64-linux-gnu"
    path = _edit_metadata(artifact, lambda m: m.update(target=other))
    with pytest.raises(ArtifactError) as error:
        load(path)
    message = str(error.value)
    assert f"was built for target '{other}'" in message
    assert f"cannot run on this machine ({host_triple()}, target 'llvm')" in message


def test_built_for_cpu_features_this_one_lacks(
    artifact: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _edit_metadata(
        artifact, lambda m: m.update(cpu_features=["sse2", "avx512f", "avx512bw"])
    )
    without_avx512 = frozenset(f for f in host_cpu_features() if not f.startswith("avx512"))
    monkeypatch.setattr(runtime_module, "host_cpu_features", lambda: without_avx512 | {"sse2"})
    with pytest.raises(ArtifactError) as error:
        load(path)
    message = str(error.value)
    assert "was built for target 'llvm' on a CPU with avx512f, avx512bw" in message
    assert f"which this machine ({host_triple()}, target 'llvm') lacks" in message


def test_metadata_disagreeing_with_the_library(artifact: Path) -> None:
    if not host_triple().startswith("x86_64"):
        pytest.skip("the edited target names an x86-64 CPU")
    path = _edit_metadata(artifact, lambda m: m.update(target="llvm -mcpu=x86-64"))
    with pytest.raises(ArtifactError, match="the library was built for target 'llvm' but its "):
        load(path)


def test_params_file_of_another_build(artifact: Path) -> None:
    members = _members(artifact)
    stored = safetensors.numpy.load(members["mod.params"])
    stored["fc1_bias"] = stored["fc1_bias"][:3]
    members["mod.params"] = safetensors.numpy.save(stored)
    metadata = json.loads(members["mod.json"])
    metadata["checksums"]["mod.params"] = hashlib.sha256(members["mod.params"]).hexdigest()
    members["mod.json"] = json.dumps(metadata).encode()
    path = _write_tar(artifact.with_name("mixed.tar"), members)
    with pytest.raises(ArtifactError, match=r"param 'fc1_bias' in mod.params is \(3,\) F32"):
        load(path)


def test_export_refuses_params_that_do_not_fit(mlp_library: Library, tmp_path: Path) -> None:
    params = {**mlp_library.params, "fc1_bias": np.zeros(3, np.float64)}
    broken = Library(mlp_library.so_path, mlp_library.metadata, params)
    with pytest.raises(ArtifactError, match="param 'fc1_bias' is \\(3,\\) float64, the metadata"):
        broken.export_library(tmp_path / "broken.tar")
    assert not list(tmp_path.iterdir())  # nothing half-written left behind


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64", "float16", "bool"])
def test_params_of_every_dtype_the_c_reader_takes_pass_the_load_check(
    dtype: str, tmp_path: Path
) -> None:
    """The load-time header check used to know fewer dtypes than the C reader, so a
    uint16/uint32/uint64 param was refused as 'the library expects ...'."""
    from ember.runtime.artifact import _check_params_file
    from ember.runtime.module import ModuleInfo, TensorSpec

    path = tmp_path / "mod.params"
    safetensors.numpy.save_file({"w": np.zeros((2, 3), dtype)}, str(path))
    spec = TensorSpec("w", (2, 3), dtype)
    _check_params_file(path, ModuleInfo("llvm", (), (), (spec,), ()), "net.tar")
