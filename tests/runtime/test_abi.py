"""The contract of ember.runtime.abi: one alignment and one dtype table for the C
runtime, the compiler and the Python runtime; TensorSpec; loading a library."""

from __future__ import annotations

import ctypes.util
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from ember.device import dtype_bytes
from ember.errors import ArtifactError
from ember.graph.ir import DTYPES
from ember.runtime.abi import (
    ALIGNMENT,
    SAFETENSORS_DTYPES,
    CLibrary,
    TensorSpec,
)
from ember.runtime.module import ModuleInfo, aligned_empty


def test_the_c_runtime_aligns_as_the_python_side() -> None:
    header = resources.files("ember.runtime").joinpath("c", "ember_internal.h").read_text()
    match = re.search(r"#define EMBER_ALIGNMENT (\d+)", header)
    assert match is not None and int(match.group(1)) == ALIGNMENT


def test_every_graph_dtype_crosses_the_boundary_with_numpy_sizes() -> None:
    assert set(SAFETENSORS_DTYPES) == set(DTYPES)
    assert all(dtype_bytes(dtype) == np.dtype(dtype).itemsize for dtype in DTYPES)


def test_a_tensor_spec_knows_its_size_and_refuses_other_dtypes() -> None:
    spec = TensorSpec("data", (2, 3, 5), "float16")
    assert spec.nbytes == 60 and str(spec) == "data (2, 3, 5) float16"
    assert TensorSpec("scalar", (), "int64").nbytes == 8
    with pytest.raises(ValueError, match="tensor 'z' has dtype 'complex64'"):
        TensorSpec("z", (2,), "complex64")


def test_metadata_with_a_dtype_no_library_has_is_a_damaged_artifact() -> None:
    metadata = {
        "target": "llvm",
        "inputs": [{"name": "x", "shape": [2], "dtype": "complex64"}],
        "outputs": [],
        "params": [],
        "cpu_features": [],
    }
    with pytest.raises(ArtifactError, match=r"bad entry .* in metadata 'inputs'"):
        ModuleInfo.from_metadata(metadata, "net.tar")


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5), (7, 0, 2), (1000,)])
@pytest.mark.parametrize("dtype", ["float32", "int8", "float64", "bool"])
def test_aligned_arrays_start_on_the_alignment(shape: tuple[int, ...], dtype: str) -> None:
    array = aligned_empty(shape, dtype)
    assert array.shape == shape and array.dtype == np.dtype(dtype)
    assert array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0
    array[...] = 1  # writable, and as large as it claims
    assert int(array.sum()) == array.size


def test_loading_what_is_not_an_ember_library_says_so(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"net\.tar: cannot load the library"):
        CLibrary(tmp_path / "missing.so", "net.tar")
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to load")
    with pytest.raises(ArtifactError, match="does not export ember_create: the artifact is"):
        CLibrary(Path(libm), "net.tar")


# OpenMP's idle threads: a process that loads Ember kernels spins a bounded while
# (GOMP_SPINCOUNT=300000 for libgomp, KMP_BLOCKTIME=1 for clang's libomp; BENCHMARKS.md,
# "Threads under load"), each unless the user chose a wait policy or that runtime's
# spin. Checked in fresh processes: the runtimes read them once, when they start.
LOAD = """
import os, numpy as np, ember
from ember.graph import GraphBuilder
b = GraphBuilder()
y = b.add("relu", [b.input("x", (64,))])
graph, params = b.build([y])
ember.build(graph, "llvm", params=params).load()
print(*(os.environ.get(name) for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")))
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, "None 300000 1"),
        ({"OMP_WAIT_POLICY": "passive"}, "passive None None"),
        ({"GOMP_SPINCOUNT": "1000"}, "None 1000 1"),
        ({"KMP_BLOCKTIME": "0"}, "None 300000 0"),
    ],
)
def test_loading_kernels_bounds_the_spin_unless_the_user_chose(
    given: dict[str, str], expected: str
) -> None:
    chosen = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    env.update(given)
    result = subprocess.run(
        [sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == expected
