"""The extraction cache of loaded artifacts stays bounded: least recently used entries
go first, and never one this process holds or another may be loading from."""

from __future__ import annotations

import gc
import io
import json
import os
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.build import Library, build
from ember.errors import EmberError
from ember.runtime import artifact_cache, load


def _entry(root: Path, char: str, nbytes: int, age: float) -> Path:
    """A fake extraction `age` seconds after its last use, holding `nbytes`."""
    directory = root / (char * 40)
    directory.mkdir(parents=True)
    (directory / "mod.so").write_bytes(b"x" * nbytes)
    used = time.time() - age
    os.utime(directory, (used, used))
    return directory


def test_prune_removes_the_least_recently_used_beyond_the_limit(tmp_path: Path) -> None:
    _entry(tmp_path, "a", 100, age=3000)  # the oldest
    older = _entry(tmp_path, "b", 100, age=2000)
    newest = _entry(tmp_path, "c", 100, age=1000)
    artifact_cache.prune(tmp_path, limit_bytes=250)
    assert sorted(tmp_path.iterdir()) == [older, newest]


def test_prune_keeps_what_is_held_here_or_was_used_recently(tmp_path: Path) -> None:
    held = _entry(tmp_path, "a", 100, age=3000)
    recent = _entry(tmp_path, "b", 100, age=artifact_cache.GRACE_SECONDS / 2)
    old = _entry(tmp_path, "c", 100, age=2000)

    class Owner:
        pass

    owner = Owner()
    artifact_cache.hold_while_alive(owner, held)
    artifact_cache.prune(tmp_path, limit_bytes=0)
    assert held.exists() and recent.exists() and not old.exists()
    del owner
    gc.collect()
    artifact_cache.prune(tmp_path, limit_bytes=0)
    assert not held.exists() and recent.exists()


def test_prune_removes_private_directories_of_dead_extractions(tmp_path: Path) -> None:
    stale = tmp_path / ("d" * 40 + "-x1y2")
    fresh = tmp_path / ("d" * 40 + "-z3w4")
    for directory in (stale, fresh):
        directory.mkdir()
    long_ago = time.time() - artifact_cache.STALE_SECONDS - 60
    os.utime(stale, (long_ago, long_ago))
    artifact_cache.prune(tmp_path, limit_bytes=0)
    assert not stale.exists() and fresh.exists()


@pytest.fixture(scope="module")
def mlp_library() -> Library:
    graph, params = ember.testing.get_workload("mlp", image_shape=(1, 8, 8), num_classes=10)
    return build(graph, "llvm", params=params)


def _variants(library: Library, directory: Path, count: int) -> list[Path]:
    """`count` artifacts of one library with different bytes (so different entries):
    mod.json's name differs (its checksums cover the other members)."""
    with tarfile.open(library.export_library(directory / "net.tar")) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    paths = []
    for index in range(count):
        metadata = json.loads(members["mod.json"])
        metadata["name"] = f"variant{index}"
        blobs = {**members, "mod.json": json.dumps(metadata).encode()}
        path = directory / f"variant{index}.tar"
        with tarfile.open(path, "w") as tar:
            for name, blob in blobs.items():
                info = tarfile.TarInfo(name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
        paths.append(path)
    return paths


def test_loading_keeps_the_cache_bounded(
    mlp_library: Library, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = _variants(mlp_library, tmp_path, 3)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBER_ARTIFACT_CACHE_MB", "0")
    monkeypatch.setattr(artifact_cache, "GRACE_SECONDS", 0.0)
    root = tmp_path / "cache" / "artifacts"
    x = np.ones((1, 1, 8, 8), np.float32)

    kept = load(first)
    want = kept(data=x)["output"]
    load(second)  # dropped at once: nothing holds its entry
    gc.collect()
    load(third)
    assert len(list(root.iterdir())) == 2  # first's (in use) and third's (the newest)
    np.testing.assert_array_equal(kept(data=x)["output"], want)
    del kept
    gc.collect()
    np.testing.assert_array_equal(load(second)(data=x)["output"], want)  # extracted again
    assert len(list(root.iterdir())) == 1


def test_a_bad_cache_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_ARTIFACT_CACHE_MB", "lots")
    with pytest.raises(EmberError, match="EMBER_ARTIFACT_CACHE_MB='lots' is not a size"):
        ember.config.artifact_cache_bytes()
    monkeypatch.setenv("EMBER_ARTIFACT_CACHE_MB", "0.5")
    assert ember.config.artifact_cache_bytes() == 2**19
