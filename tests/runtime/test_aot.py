"""The C ABI of a built library, through bare ctypes: instances from borrowed params
and from a safetensors file, the errors ember_last_error reports, the benchmark loop,
parallel instances, and the exported symbols."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from library_abi import LibraryABI, pointers

import ember
from ember.build import Library
from ember.graph.interpret import interpret
from ember.runtime.abi import ABI_SYMBOLS, OPTIONAL_SIGNATURES
from ember.runtime.aot import c_string
from ember.testing import get_workload

RTOL = 1e-4
ATOL = 1e-5


@pytest.fixture(scope="module")
def mobilenet() -> tuple[Library, dict[str, np.ndarray], np.ndarray]:
    """A small MobileNet (its arena is used), an input, and the interpreter's output."""
    graph, params = get_workload("mobilenet", image_shape=(3, 32, 32))
    library = ember.build(graph, "llvm", params=params)
    data = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = interpret(graph, params, {"data": data})[graph.outputs[0].name]
    return library, {"data": data}, expected


@pytest.fixture(scope="module")
def abi(mobilenet: tuple[Library, dict[str, np.ndarray], np.ndarray]) -> LibraryABI:
    return LibraryABI(mobilenet[0])


def save_params(path: Path, params: dict[str, np.ndarray], **metadata: str) -> bytes:
    safetensors.numpy.save_file(params, str(path), metadata=metadata or None)
    return str(path).encode()


def test_create_from_a_safetensors_file(mobilenet, abi: LibraryABI, tmp_path: Path) -> None:
    library, feeds, expected = mobilenet
    # Extra tensors and a metadata block are skipped; order in the file does not matter.
    params = dict(reversed(library.params.items())) | {"unused": np.zeros(3, "int8")}
    handle = abi.so.ember_create_from_file(save_params(tmp_path / "mod.params", params, a="b"))
    assert handle, abi.last_error()
    try:
        (output,) = abi.run(handle, feeds)
    finally:
        abi.so.ember_destroy(handle)
    np.testing.assert_allclose(output, expected, rtol=RTOL, atol=ATOL)


def bad_file_error(abi: LibraryABI, path: Path) -> str:
    handle = abi.so.ember_create_from_file(str(path).encode())
    assert not handle
    return abi.last_error()


def test_create_from_file_reports_what_is_wrong(mobilenet, abi: LibraryABI, tmp_path: Path):
    params = dict(mobilenet[0].params)
    first, second = [name for name, array in params.items() if array.ndim > 1][:2]
    path = tmp_path / "mod.params"
    assert "cannot open params file" in bad_file_error(abi, tmp_path / "missing.params")
    path.write_bytes(b"hello")
    assert "is not a safetensors file" in bad_file_error(abi, path)
    save_params(path, {**params, first: params[first].astype("float64")})
    shape = ", ".join(str(d) for d in params[first].shape)
    assert f"tensor '{first}' is F64[{shape}], the library needs F32[{shape}]" in bad_file_error(
        abi, path
    )
    save_params(path, {**params, second: params[second].reshape(-1)})
    assert f"tensor '{second}' is F32[" in bad_file_error(abi, path)
    save_params(path, {name: array for name, array in params.items() if name != second})
    assert f"has no tensor '{second}'" in bad_file_error(abi, path)
    save_params(path, params)
    path.write_bytes(path.read_bytes()[:-100])
    assert "truncated or corrupt" in bad_file_error(abi, path)
    path.write_bytes(b"\x05\0\0\0\0\0\0\0{[}]}")
    assert "not valid JSON of the expected form" in bad_file_error(abi, path)


def test_null_pointers_are_reported(mobilenet, abi: LibraryABI) -> None:
    assert not abi.so.ember_create(None)
    assert "params is NULL" in abi.last_error()
    arrays = abi.param_arrays()
    nulls = (ctypes.c_void_p * len(arrays))(*([a.ctypes.data for a in arrays[:-1]] + [None]))
    assert not abi.so.ember_create(nulls)
    last = mobilenet[0].metadata["params"][-1]["name"]
    assert f"param {len(arrays) - 1} ('{last}') is NULL" in abi.last_error()
    handle = abi.create()
    try:
        assert abi.so.ember_run(handle, None, pointers(abi.output_arrays())) == -1
        assert "ember_run: inputs is NULL" in abi.last_error()
        outputs = (ctypes.c_void_p * 1)(None)
        assert abi.so.ember_run(handle, pointers([mobilenet[1]["data"]]), outputs) == -1
        assert "outputs[0] ('" in abi.last_error()
    finally:
        abi.so.ember_destroy(handle)
    assert abi.so.ember_run(None, None, None) == -1
    assert "instance is NULL" in abi.last_error()


def test_benchmark_times_in_c(mobilenet, abi: LibraryABI) -> None:
    _, feeds, expected = mobilenet
    handle = abi.create()
    outputs = abi.output_arrays()
    args = (handle, pointers(abi.input_arrays(feeds)), pointers(outputs))
    try:
        seconds = (ctypes.c_double * 3)()
        start = time.perf_counter()
        assert abi.so.ember_benchmark(*args, 1, 3, 20.0, 0, seconds) == 0, abi.last_error()
        wall = time.perf_counter() - start
        # Bounds that hold however busy the machine is (no ratio of two timings):
        # `number` grows until each repeat lasts min_repeat_ms, so the call lasts at
        # least 3 x 20 ms; a repeat's seconds per run are at most that repeat's
        # duration, and the repeats lie inside the call (the same monotonic clock).
        assert wall >= 3 * 0.020
        assert all(s > 0 for s in seconds) and sum(seconds) <= wall, (list(seconds), wall)
        np.testing.assert_allclose(outputs[0], expected, rtol=RTOL, atol=ATOL)
        # With the cache flushed before each repeat (one run each: a cold run).
        start = time.perf_counter()
        assert abi.so.ember_benchmark(*args, 1, 2, 0.0, 1, seconds) == 0, abi.last_error()
        wall = time.perf_counter() - start
        assert all(s > 0 for s in seconds[:2]) and sum(seconds[:2]) <= wall, list(seconds)
        assert abi.so.ember_benchmark(*args, 0, 3, 0.0, 0, seconds) == -1
        assert "needs number >= 1, repeat >= 1" in abi.last_error()
    finally:
        abi.so.ember_destroy(handle)


def test_profile_times_every_step_in_c(mobilenet, abi: LibraryABI) -> None:
    library, feeds, expected = mobilenet
    so = abi.so
    # One step per fused group, in the order of mod.json's groups, named after it.
    groups = library.metadata["groups"]
    count = so.ember_num_steps()
    assert count == len(groups)
    for step, group in enumerate(groups):
        assert so.ember_step_name(step).decode() == group["name"]
        assert so.ember_step_kernel(step).decode() == f"{group['kernel']}_packed"
    assert so.ember_step_name(count) is None and so.ember_step_name(-1) is None
    handle = abi.create()
    outputs = abi.output_arrays()
    args = (handle, pointers(abi.input_arrays(feeds)), pointers(outputs))
    try:
        seconds = (ctypes.c_double * count)()
        start = time.perf_counter()
        assert so.ember_profile(*args, 5, seconds) == 0, abi.last_error()
        wall = time.perf_counter() - start
        np.testing.assert_allclose(outputs[0], expected, rtol=RTOL, atol=ATOL)
        # Every step was timed (each runs a kernel, so its time is positive), and the
        # steps are parts of the runs inside the call: a step's median is at most the
        # sum of its 5 samples, so the medians sum to at most the 5 runs. Bounds that
        # hold under any load; how the parts compare with a separately timed run
        # depends on the machine's load, and belongs in benchmarks/.
        assert all(s > 0 for s in seconds), list(seconds)
        assert sum(seconds) <= wall, (sum(seconds), wall)
        assert so.ember_profile(*args, 0, seconds) == -1
        assert "needs repeat >= 1" in abi.last_error()
        assert so.ember_profile(*args, 3, None) == -1
    finally:
        abi.so.ember_destroy(handle)
    assert so.ember_profile(None, None, None, 1, seconds) == -1
    assert "instance is NULL" in abi.last_error()


def test_instances_run_in_parallel(mobilenet, abi: LibraryABI) -> None:
    """Each instance owns its arena: two threads running at once get exact results."""
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((1, 3, 32, 32)).astype("float32") for _ in range(2)]
    handles = [abi.create() for _ in inputs]
    try:
        alone = [abi.run(h, {"data": x})[0] for h, x in zip(handles, inputs, strict=True)]
        failures: list[str] = []

        def hammer(handle: int, data: np.ndarray, expected: np.ndarray) -> None:
            for _ in range(30):
                if not np.array_equal(abi.run(handle, {"data": data})[0], expected):
                    failures.append("different result while running in parallel")

        threads = [
            threading.Thread(target=hammer, args=case)
            for case in zip(handles, inputs, alone, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures
    finally:
        for handle in handles:
            abi.so.ember_destroy(handle)


def test_the_library_exports_exactly_the_abi(mobilenet, abi: LibraryABI) -> None:
    assert abi.so.ember_target() == b"llvm"
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(mobilenet[0].so_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    functions = {line.split()[-1] for line in listing.splitlines() if " T " in line}
    assert functions == set(ABI_SYMBOLS) | set(OPTIONAL_SIGNATURES)


def test_c_string_escapes() -> None:
    assert c_string('a"b\\c?') == '"a\\"b\\\\c\\?"'
    assert c_string("é\n") == '"\\303\\251\\012"'
