"""LocalBuilder: default-schedule candidates build; unlowerable, uncompilable and slow
candidates become INSTANTIATION, COMPILE and TIMEOUT results; helpers are reaped."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

import ember
from ember.autoschedule import SearchTask, extract_tasks
from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.measure import MeasureInput, release
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.runner import LocalRunner
from ember.errors import EmberError, TargetError, ToolchainError
from ember.schedule.default import default_schedule
from ember.schedule.state import Location, State


@pytest.fixture(scope="module")
def tasks() -> dict[str, SearchTask]:
    """A resnet-18 (32x32) conv, its max pool and its softmax, by description."""
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    found, _ = extract_tasks(graph, params, "llvm")
    by_desc = {task.desc: task for task in found}
    return {
        "conv": by_desc["conv_pack_add"],
        "pool": by_desc["max_pool"],
        "softmax": by_desc["softmax"],
    }


def default_input(task: SearchTask) -> MeasureInput:
    return MeasureInput(task, default_schedule(task.compute_dag, task.target))


def unlowerable_input(task: SearchTask) -> MeasureInput:
    """softmax's max stage attached inside its normalisation, which another stage
    between them also reads: lowering refuses it (a ScheduleError)."""
    state = State.initial(task.compute_dag)
    stage = replace(state.stages[1], location=Location.ATTACHED, attach_stage=4, attach_iter="i0")
    return MeasureInput(task, state.with_stage(1, stage))


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_default_schedules_build(tasks: dict[str, SearchTask]) -> None:
    inputs = [default_input(task) for task in tasks.values()]
    with LocalBuilder(n_parallel=2) as builder:
        results = builder.build(inputs)
        for measure_input, result in zip(inputs, results, strict=True):
            assert result.ok, result.message
            assert result.path is not None and Path(result.path).is_file()
            assert Path(result.path).parent == builder.directory
            assert result.symbol == "candidate_0_packed"
            assert result.time_cost > 0
            dag = measure_input.task.compute_dag
            assert [a.shape for a in result.args] == [t.shape for t in dag.inputs + dag.outputs]
            assert [a.is_output for a in result.args] == [False] * len(dag.inputs) + [True]
        release(results)
        assert not any(Path(str(r.path)).exists() for r in results)
        assert list(builder.directory.iterdir()) == []  # the sources went too
        pids = [worker.process.pid for worker in builder._pool.workers]
        # The pool persists across calls: a second build uses the same helpers.
        again = builder.build(inputs[:1])
        assert again[0].ok and [w.process.pid for w in builder._pool.workers] == pids
        directory = builder.directory
    assert all(process_gone(pid) for pid in pids)
    assert not directory.exists()
    with pytest.raises(EmberError, match="closed"):
        builder.build(inputs)


def test_bad_candidates_are_results(tasks: dict[str, SearchTask], tmp_path: Path) -> None:
    inputs = [unlowerable_input(tasks["softmax"]), default_input(tasks["pool"])]
    with LocalBuilder(n_parallel=1) as builder:
        bad, good = builder.build(inputs)
    assert bad.error is ErrorKind.INSTANTIATION and bad.path is None
    assert "ScheduleError" in bad.message and "compute it at root" in bad.message
    assert good.ok


def test_compiler_failure_is_compile(
    tasks: dict[str, SearchTask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = tmp_path / "broken-cc"
    compiler.write_text(
        '#!/bin/sh\necho "candidate.c:1:1: note: context"\n'
        'echo "candidate.c:3:7: error: injected failure" >&2\nexit 1\n'
    )
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(compiler))  # the helpers inherit it when they start
    with LocalBuilder(n_parallel=1) as builder:
        (result,) = builder.build([default_input(tasks["softmax"])])
    assert result.error is ErrorKind.COMPILE and result.path is None
    assert "exited with status 1" in result.message
    assert "error: injected failure" in result.message


def test_timeout_kills_and_replaces_helper(tasks: dict[str, SearchTask]) -> None:
    inputs = [default_input(tasks["conv"]), default_input(tasks["softmax"])]
    # Nothing lowers and compiles in a millisecond: every candidate times out, and
    # its helper (killed mid-work) is replaced.
    with LocalBuilder(n_parallel=1, timeout=0.001) as builder:
        results = builder.build(inputs)
        assert [r.error for r in results] == [ErrorKind.TIMEOUT] * 2
        assert "timeout of 0.001 s" in results[0].message
        assert all(r.time_cost >= 0.001 for r in results)
        builder.timeout = 600.0  # a guard against a hang, not a limit to race
        (result,) = builder.build(inputs[1:])
        assert result.ok, result.message
        release([result])


def test_a_batch_compiles_together_and_each_candidate_is_its_own(
    tasks: dict[str, SearchTask],
) -> None:
    """Eight candidates, one helper: two batches of four, each compiled in one
    compiler run into one library, which each candidate has under its own name; each
    computes what the reference does, also after another of its batch is released."""
    inputs = [default_input(task) for task in tasks.values()] * 3
    inputs = inputs[:8]
    with LocalBuilder(n_parallel=1) as builder, LocalRunner() as runner:
        results = builder.build(inputs)
        assert all(result.ok for result in results), [r.message for r in results]
        paths = [str(result.path) for result in results]
        assert len(set(paths)) == 8
        files = [os.stat(path) for path in paths]
        assert [(f.st_dev, f.st_ino) for f in files[:4]] == [(files[0].st_dev, files[0].st_ino)] * 4
        assert (files[4].st_dev, files[4].st_ino) != (files[0].st_dev, files[0].st_ino)
        assert [r.symbol for r in results] == [f"candidate_{i}_packed" for i in range(4)] * 2
        release(results[:1])
        assert not Path(paths[0]).exists()
        for measure_input, result in zip(inputs[1:], results[1:], strict=True):
            verdict = runner.check(measure_input, result)
            assert verdict.error is ErrorKind.NONE, verdict.message
        release(results)
        assert list(builder.directory.iterdir()) == []


def test_given_known_code_a_repeated_candidate_is_not_compiled_again(
    tasks: dict[str, SearchTask],
) -> None:
    """Each result carries a digest of its code, equal for equal code. Given the known
    code, a candidate whose code is known or repeats an earlier one of its batch comes
    back a duplicate, without a library; without it, every candidate is compiled."""
    conv, pool, softmax = (default_input(tasks[name]) for name in ("conv", "pool", "softmax"))
    with LocalBuilder(n_parallel=1) as builder:
        (known,) = builder.build([pool])
        plain = builder.build([conv, conv, pool, softmax])
        assert all(result.ok for result in plain)
        keys = [result.code_key for result in plain]
        assert keys[0] == keys[1] and keys[2] == known.code_key and len(set(keys)) == 3
        # Batches of two: [conv, conv], [pool, softmax].
        deduplicated = builder.build([conv, conv, pool, softmax], {known.code_key})
        assert [r.duplicate for r in deduplicated] == [False, True, True, False]
        assert [r.code_key for r in deduplicated] == keys
        assert [r.path is None for r in deduplicated] == [False, True, True, False]
        assert deduplicated[0].ok and deduplicated[3].ok
        release([known, *plain, *deduplicated])


def test_a_batch_the_compiler_rejects_is_built_one_by_one(
    tasks: dict[str, SearchTask], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler that rejects any source with a second candidate (`candidate_1`):
    each batch of two fails as a whole and is compiled again one candidate at a time,
    so only the second of each batch is a COMPILE result, with the compiler's error."""
    gcc = shutil.which(os.environ.get("CC", "gcc")) or "gcc"
    compiler = tmp_path / "picky-cc"
    compiler.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in *.c) if grep -q "candidate_1(" "$arg"; then\n'
        '  echo "$arg:1:1: error: injected failure" >&2; exit 1; fi;; esac; done\n'
        f'exec {gcc} "$@"\n'
    )
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(compiler))
    inputs = [default_input(tasks["pool"]), default_input(tasks["softmax"])] * 2
    with LocalBuilder(n_parallel=1) as builder:
        results = builder.build(inputs)
        assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.COMPILE] * 2
        assert all("error: injected failure" in r.message for r in results[1::2])
        release(results)


def test_a_batch_that_times_out_is_built_one_by_one(tasks: dict[str, SearchTask]) -> None:
    """Two batches of two run past their time (nothing builds in milliseconds): each
    candidate is then built alone, and times out alone."""
    inputs = [default_input(tasks["pool"]), default_input(tasks["softmax"])] * 2
    with LocalBuilder(n_parallel=1, timeout=0.001) as builder:
        results = builder.build(inputs)
    assert [r.error for r in results] == [ErrorKind.TIMEOUT] * 4
    assert all("timeout of 0.001 s" in r.message for r in results)


def test_rejects_bad_settings() -> None:
    with pytest.raises(EmberError, match="n_parallel"):
        LocalBuilder(n_parallel=0)
    with pytest.raises(EmberError, match="timeout"):
        LocalBuilder(timeout=0)


def test_an_unknown_build_func_is_refused() -> None:
    with pytest.raises(EmberError, match="build_func='nkd' is unknown: use one of default, ndk"):
        LocalBuilder(build_func="nkd")


def test_ndk_build_func_needs_the_ndk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_NDK_CC", raising=False)
    with pytest.raises(ToolchainError, match=r"build_func='ndk'.*set EMBER_NDK_CC"):
        LocalBuilder(build_func="ndk")


def test_ndk_build_func_builds_with_ember_ndk_cc(
    tasks: dict[str, SearchTask], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The seed's use_ndk: candidates of an Android target are compiled by the command
    EMBER_NDK_CC names (here a stand-in that logs its calls and runs the aarch64 cross
    gcc, without clang's -static-openmp); a non-Android task is refused, not built
    with another compiler."""
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (make test installs it as root)")
    log = tmp_path / "calls.log"
    clang = tmp_path / "aarch64-linux-android28-clang"
    clang.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'for a in "$@"; do shift; [ "$a" = -static-openmp ] || set -- "$@" "$a"; done\n'
        'exec aarch64-linux-gnu-gcc "$@"\n'
    )
    clang.chmod(0o755)
    monkeypatch.setenv("EMBER_NDK_CC", str(clang))
    pool = tasks["pool"]
    android = SearchTask.create(pool.compute_dag, "llvm -mtriple=aarch64-linux-android")
    with LocalBuilder(n_parallel=1, build_func="ndk") as builder:
        [result] = builder.build([default_input(android)])
        assert result.ok, result.message
        assert "-static-openmp" in log.read_text()
        with pytest.raises(TargetError, match="is not an Android triple"):
            builder.build([default_input(pool)])
        release([result])
