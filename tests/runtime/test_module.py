"""The Python runtime module: inputs, outputs, errors a user sees, benchmark, isolation
between modules of one library. Libraries are real `ember.build` results."""

from __future__ import annotations

import ctypes.util
import math
import random
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.autoschedule import extract_tasks
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.sketch import generate_sketches
from ember.backend import compile_kernel
from ember.build import Library, build
from ember.errors import ArtifactError, ExecutionError, InputError
from ember.graph.interpret import interpret
from ember.graph.ir import Graph
from ember.runtime import BenchmarkResult, Module, ModuleInfo, load
from ember.toolchain import find_compiler


@pytest.fixture(scope="module")
def mlp() -> tuple[Graph, dict[str, np.ndarray], Library]:
    graph, params = ember.testing.get_workload("mlp", image_shape=(1, 8, 8), num_classes=10)
    return graph, params, build(graph, "llvm", params=params)


@pytest.fixture
def module(mlp: tuple[object, object, Library]) -> Module:
    return Module.from_library(mlp[2])


def _image(seed: int, shape: tuple[int, ...] = (1, 1, 8, 8)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_from_library_matches_interpreter(mlp, module: Module) -> None:
    graph, params, _ = mlp
    x = _image(0)
    module.set_input("data", x)
    module.run()
    want = interpret(graph, params, {"data": x})["output"]
    np.testing.assert_allclose(module.get_output(0), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(module.get_output("output"), want, rtol=1e-4, atol=1e-5)


def test_signature(module: Module) -> None:
    assert module.get_input_info() == {"data": ((1, 1, 8, 8), "float32")}
    assert module.get_output_info() == {"output": ((1, 10), "float32")}
    assert (module.get_num_inputs(), module.get_num_outputs()) == (1, 1)
    assert module.target == "llvm"
    assert "data (1, 1, 8, 8) float32" in repr(module)


def test_call_sets_inputs_and_returns_outputs_by_name(mlp, module: Module) -> None:
    graph, params, _ = mlp
    x = _image(1)
    got = module(data=x)
    assert list(got) == ["output"]
    want = interpret(graph, params, {"data": x})["output"]
    np.testing.assert_allclose(got["output"], want, rtol=1e-4, atol=1e-5)


def test_set_input_by_index_copies_the_array(mlp, module: Module) -> None:
    graph, params, _ = mlp
    x = _image(2)
    module.set_input(0, x)
    x[...] = 0  # the module holds its own copy
    module.run()
    want = interpret(graph, params, {"data": _image(2)})["output"]
    np.testing.assert_allclose(module.get_output(0), want, rtol=1e-4, atol=1e-5)


def test_get_output_is_a_copy(module: Module) -> None:
    module(data=_image(3))
    first = module.get_output(0)
    first[...] = -1
    assert (module.get_output(0) >= 0).all()  # softmax output, untouched


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("image", _image(0), "the module has no input 'image'; its inputs are 0: data"),
        (1, _image(0), "the module has no input 1; its inputs are 0: data (1, 1, 8, 8)"),
        ("data", _image(0).astype(np.float64), "input 'data' must be float32, got float64"),
        ("data", _image(0, (1, 8, 8, 1)), "input 'data' must have shape (1, 1, 8, 8), got (1, 8,"),
        ("data", [[1.0]], "must be float32, got float64"),
    ],
)
def test_set_input_errors(module: Module, key, value, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        module.set_input(key, value)


def test_output_errors(module: Module) -> None:
    with pytest.raises(InputError, match=re.escape("no output 1; its outputs are 0: output")):
        module.get_output(1)
    with pytest.raises(InputError, match="no output 'logits'"):
        module.get_output("logits")


def test_run_before_set_input(module: Module) -> None:
    with pytest.raises(InputError, match=re.escape("input 'data' not set: call set_input")):
        module.run()
    with pytest.raises(InputError, match="not set"):
        module.benchmark(repeat=1, min_repeat_ms=0)


def test_closed_module_refuses_to_run(module: Module) -> None:
    module.set_input("data", _image(0))
    module.close()
    module.close()  # idempotent
    with pytest.raises(ExecutionError, match="the module was closed; load it again"):
        module.run()


def test_benchmark_times_in_c(module: Module) -> None:
    module.set_input("data", _image(0))
    start = time.perf_counter()
    result = module.benchmark(repeat=4, number=2, min_repeat_ms=25)
    elapsed = time.perf_counter() - start
    assert len(result.seconds) == 4
    assert all(s > 0 for s in result.seconds)
    # Bounds that hold under any load: every repeat lasted min_repeat_ms, and a
    # repeat's seconds per run are at most its duration, inside the call.
    assert elapsed >= 4 * 0.025
    assert sum(result.seconds) <= elapsed
    assert result.min <= result.median <= result.max
    assert result.min <= result.mean <= result.max
    assert result.mean == pytest.approx(np.mean(result.seconds) * 1e3)
    assert result.std == pytest.approx(np.std(result.seconds) * 1e3)
    # The outputs still hold a correct result after timing.
    np.testing.assert_allclose(module.get_output(0), module(data=_image(0))["output"])


def test_benchmark_rejects_bad_settings(module: Module) -> None:
    module.set_input("data", _image(0))
    with pytest.raises(ValueError, match="repeat >= 1"):
        module.benchmark(repeat=0)
    with pytest.raises(ValueError, match="both <= 2147483647"):
        module.benchmark(number=2**31)  # would wrap to a negative int32 in C
    with pytest.raises(ValueError, match="finite min_repeat_ms"):
        module.benchmark(min_repeat_ms=float("nan"))  # would grow `number` forever


def test_benchmark_result_format() -> None:
    result = BenchmarkResult((0.001, 0.002, 0.006))
    assert (result.mean, result.median, result.max, result.min) == pytest.approx((3, 2, 6, 1))
    assert result.std == pytest.approx(np.std([1, 2, 6]))
    assert str(result) == (
        "Execution time summary:\n"
        " mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)\n"
        "   3.0000       2.0000       6.0000       1.0000       2.1602"
    )


def test_profile_has_a_row_per_group_in_run_order(mlp, module: Module) -> None:
    groups = mlp[2].metadata["groups"]
    module.set_input("data", _image(0))
    profile = module.profile(repeat=3)
    assert profile.repeat == 3
    assert [(row.step, row.group, row.kernel) for row in profile.rows] == [
        (step, group["name"], group["kernel"]) for step, group in enumerate(groups)
    ]
    assert [row.flops for row in profile.rows] == [group.get("flops") for group in groups]
    assert all(row.seconds > 0 for row in profile.rows)
    assert sum(row.share for row in profile.rows) == pytest.approx(1.0)
    assert profile.slowest_first()[0].seconds == max(row.seconds for row in profile.rows)
    np.testing.assert_allclose(module.get_output(0), module(data=_image(0))["output"])
    with pytest.raises(ValueError, match="repeat=0"):
        module.profile(repeat=0)
    module.close()
    with pytest.raises(ExecutionError, match="the module was closed"):
        module.profile()


def test_profile_gflops_come_from_the_recorded_flops(mlp) -> None:
    library = mlp[2]
    groups = [
        {**group, "flops": 1000 * (i + 1)} for i, group in enumerate(library.metadata["groups"])
    ]
    info = ModuleInfo.from_metadata({**library.metadata, "groups": groups}, "mlp")
    module = Module(library.so_path, info, library.params)
    module.set_input("data", _image(0))
    profile = module.profile(repeat=2)
    for row in profile.rows:
        assert row.flops == 1000 * (row.step + 1)
        assert row.gflops == pytest.approx(row.flops / row.seconds * 1e-9)
    assert profile.total_flops == sum(1000 * (i + 1) for i in range(len(groups)))
    assert f"({profile.total_flops * 1e-9:.3f} GFLOP)" in str(profile).splitlines()[-1]


def test_modules_of_one_library_run_independently(tmp_path: Path) -> None:
    graph, params = ember.testing.get_workload("mobilenet", image_shape=(3, 32, 32), num_classes=10)
    library = build(graph, "llvm", params=params)
    library.export_library(tmp_path / "net.tar")
    modules = [load(tmp_path / "net.tar"), load(tmp_path / "net.tar")]
    images = [_image(10, (1, 3, 32, 32)), _image(11, (1, 3, 32, 32))]
    wants = [interpret(graph, params, {"data": x})["output"] for x in images]
    failures: list[str] = []

    def run_many(index: int) -> None:
        # Both threads run at once (ctypes drops the GIL): a shared arena would mix them.
        for _ in range(30):
            got = modules[index](data=images[index])["output"]
            if not np.allclose(got, wants[index], rtol=1e-4, atol=1e-5):
                failures.append(f"module {index} computed a wrong result")

    threads = [threading.Thread(target=run_many, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_missing_params_file_reports_the_c_error(mlp) -> None:
    library = mlp[2]
    info = Module.from_library(library).info
    with pytest.raises(ExecutionError, match=r"creating the module failed: .*nowhere\.params"):
        Module(library.so_path, info, "/nowhere.params")


def test_params_of_another_build_are_refused(mlp) -> None:
    library = mlp[2]
    params = dict(library.params)
    name = library.metadata["params"][0]["name"]
    params[name] = params[name][:1]
    with pytest.raises(ArtifactError, match=f"param '{name}' is .* the library expects"):
        Module.from_library(Library(library.so_path, library.metadata, params))


def test_a_library_without_the_abi_is_refused(mlp) -> None:
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to load")
    info = Module.from_library(mlp[2]).info
    with pytest.raises(ArtifactError, match="does not export ember_create"):
        Module(libm, info, mlp[2].params)


def test_one_module_shared_by_threads_gives_each_call_its_own_result(mlp) -> None:
    graph, params, library = mlp
    module = library.load()
    images = [_image(20 + i) for i in range(4)]
    wants = [interpret(graph, params, {"data": x})["output"] for x in images]
    failures: list[str] = []

    def run_many(index: int) -> None:
        # Without the module's lock, another thread's set_input lands between this
        # thread's set_input and run, or two runs share the arena at once.
        for _ in range(50):
            got = module(data=images[index])["output"]
            if not np.allclose(got, wants[index], rtol=1e-4, atol=1e-5):
                failures.append(f"thread {index} got another input's result")

    threads = [threading.Thread(target=run_many, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_close_waits_for_a_run_on_another_thread(mlp, monkeypatch) -> None:
    _, _, library = mlp
    module = library.load()
    module.set_input("data", _image(0))
    errors: list[BaseException] = []
    # Events around the C call, rather than a sleep, so that close() is called while
    # the benchmark runs however slowly the thread is scheduled.
    inside, finished = threading.Event(), threading.Event()
    c_benchmark = module._abi.library.ember_benchmark

    def benchmark_in_c(*args: object) -> int:
        inside.set()
        status = c_benchmark(*args)
        finished.set()
        return status

    monkeypatch.setattr(module._abi.library, "ember_benchmark", benchmark_in_c)

    def bench() -> None:
        try:
            module.benchmark(repeat=2, min_repeat_ms=20)
        except BaseException as error:  # reported by the assert below
            errors.append(error)

    thread = threading.Thread(target=bench)
    thread.start()
    assert inside.wait(timeout=600), "the benchmark never started"
    module.close()  # must not free the instance under the running benchmark
    assert finished.is_set()  # close returned only after the benchmark
    thread.join()
    assert not errors
    with pytest.raises(ExecutionError, match="closed"):
        module.run()


def test_a_step_runs_a_swapped_in_kernel_until_given_its_own_back(mlp, tmp_path: Path) -> None:
    """set_step_kernel: a tuning candidate of a step's task, compiled on its own, runs
    in the network in the step's place (same outputs); a kernel that computes
    something else shows the swap took; None gives the step its own kernel back."""
    graph, params, library = mlp
    module = Module.from_library(library)
    x = _image(1)
    want = interpret(graph, params, {"data": x})["output"]
    tasks, _ = extract_tasks(graph, params, "llvm")
    task = tasks[-1]  # the last dense: it writes the network's output
    steps = module.kernel_steps(task.workload_key)
    assert steps and steps[-1] == len(mlp[2].metadata["groups"]) - 1
    sketch = generate_sketches(task)
    (state,) = sample_initial_population(task, sketch, 1, random.Random(3))
    candidate = compile_kernel(state, "llvm", "candidate", path=tmp_path / "candidate.so")
    try:
        _swaps_and_restores(module, library, steps, candidate, x, want, tmp_path)
    finally:
        module.close()  # the steps get their own kernels back, for the other tests


def _swaps_and_restores(module, library, steps, candidate, x, want, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for step in steps:
        module.set_step_kernel(step, candidate.path, candidate.kernel.packed_symbol)
    np.testing.assert_allclose(module(data=x)["output"], want, rtol=1e-4, atol=1e-5)

    # A "kernel" that fills its output (the last argument) with 7s.
    size = math.prod(module.outputs[0].shape)
    source = tmp_path / "sevens.c"
    source.write_text(
        "#include <stdint.h>\n"
        "int32_t sevens(void* const* args, int32_t num_args) {\n"
        f"  float* out = (float*)args[num_args - 1];\n"
        f"  for (int i = 0; i < {size}; ++i) out[i] = 7.0f;\n"
        "  return 0;\n"
        "}\n"
    )
    sevens = tmp_path / "sevens.so"
    subprocess.run(
        find_compiler("llvm").argv("-shared", str(source), "-o", str(sevens)), check=True
    )
    module.set_step_kernel(steps[-1], sevens, "sevens")
    assert (module(data=x)["output"] == 7.0).all()
    module.set_step_kernel(steps[-1], None)
    np.testing.assert_allclose(module(data=x)["output"], want, rtol=1e-4, atol=1e-5)

    # The swap holds for the library, until the module that made it is closed.
    module.set_step_kernel(steps[-1], sevens, "sevens")
    other = Module.from_library(library)
    assert (other(data=x)["output"] == 7.0).all()
    module.close()
    np.testing.assert_allclose(other(data=x)["output"], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ExecutionError, match="the module was closed"):
        module.set_step_kernel(steps[-1], sevens, "sevens")


def test_set_step_kernel_errors(mlp, module: Module, tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="step 99 is not a kernel step"):
        module.set_step_kernel(99, None)
    with pytest.raises(ExecutionError, match="cannot take the kernel 'nowhere'"):
        module.set_step_kernel(0, mlp[2].so_path, "nowhere")
    with pytest.raises(ExecutionError, match="cannot take the kernel"):
        module.set_step_kernel(0, tmp_path / "missing.so", "kernel")
    assert module.kernel_steps("no such workload") == []
