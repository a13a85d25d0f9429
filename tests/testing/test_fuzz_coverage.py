"""The coverage-guided fuzzer (ember.testing.fuzz.coverage): its target accepts the seed
models and raises nothing but `EmberError` on mutated ones, its mutator keeps to libFuzzer's
size limit, it reads libFuzzer's report, and (where atheris is installed) a short run
finds nothing."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import traceback
from pathlib import Path

import onnx
import pytest

from ember.testing.fuzz import SEED_GRAPHS, coverage, mutate_bytes, seed_model
from ember.testing.fuzz.runner import innermost_ember_frame

SEEDS = sorted(SEED_GRAPHS)


@pytest.mark.parametrize("name", SEEDS)
def test_the_target_accepts_each_seed_model(name: str) -> None:
    coverage.check_model(seed_model(name).SerializeToString())


def _mutated_models(count: int) -> list[bytes]:
    """`count` inputs like the fuzzer's, without atheris: seed models after up to 3 of
    the custom mutator's structural mutations (its byte mutations left out: libFuzzer's
    are atheris's), a fifth of them then edited byte-wise, and a tenth random bytes; the
    same every run. About 40% import."""
    models = []
    for index in range(count):
        rng = random.Random(f"ember-coverage-test/{index}")
        if index % 10 == 0:
            models.append(rng.randbytes(rng.randint(0, 200)))
            continue
        data = seed_model(rng.choice(SEEDS)).SerializeToString()
        for _ in range(rng.randint(1, 3)):
            data = coverage.mutate_model(data, 4096, rng.randrange(2**32), lambda d, n: d)
        if rng.random() < 0.2:
            data = mutate_bytes(data, rng)[0]
        models.append(data)
    return models


def test_the_target_raises_only_ember_errors_on_mutated_models() -> None:
    """Every distinct exception (type, innermost ember/ frame) is listed on failure."""
    failures: dict[tuple[str, str], str] = {}
    for index, data in enumerate(_mutated_models(300)):
        try:
            coverage.check_model(data)
        except Exception as error:
            frames = traceback.extract_tb(error.__traceback__)
            frame = innermost_ember_frame((f.filename, f.lineno or 0) for f in frames)
            key = (type(error).__name__, frame)
            failures.setdefault(key, f"model {index}: {type(error).__name__} at {frame}: {error}")
    assert not failures, "\n".join(failures.values())


def test_the_mutator_edits_the_structure_within_the_size_limit() -> None:
    """Structure-aware results parse as models; what does not parse, or would exceed
    `max_size`, goes to the byte mutator."""
    data = seed_model("conv_relu").SerializeToString()
    results = [
        coverage.mutate_model(data, len(data) + 64, seed, lambda d, n: b"bytes")
        for seed in range(100)
    ]
    structural = [r for r in results if r != b"bytes"]
    assert 20 < len(structural) < 80  # about STRUCTURE_MUTATION_SHARE of them
    assert all(len(r) <= len(data) + 64 for r in structural)
    assert any(r != data for r in structural)
    for result in structural:
        onnx.ModelProto.FromString(result)
    assert coverage.mutate_model(b"\xff\xff not a model", 100, 0, lambda d, n: b"x") == b"x"
    # Nothing fits in 10 bytes: always the byte mutator.
    assert {coverage.mutate_model(data, 10, s, lambda d, n: b"x") for s in range(20)} == {b"x"}


CRASH_REPORT = """\
#2\tINITED cov: 845 ft: 1708 corp: 23/5841b exec/s: 0 rss: 115Mb

 === Uncaught Python exception: ===
ValueError: first
Traceback (most recent call last):
  File "/somewhere/ember/frontend/onnx/loader.py", line 76, in from_onnx
    return _convert_model(proto, shapes or {})
ValueError: first

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{ember}/graph/ops/tensor.py", line 62, in _reshape_infer
    count = int(np.prod(attrs.shape, dtype=np.int64))
  File "/venv/numpy/_core/fromnumeric.py", line 83, in _wrapreduction
    return ufunc.reduce(obj, axis, dtype, out, **passkwargs)
TypeError: (): incompatible function arguments. The following are supported:
    1. (self, arg: int, /) -> None

Invoked with types: CheckerContext, int

==23751== ERROR: libFuzzer: fuzz target exited
SUMMARY: libFuzzer: fuzz target exited
artifact_prefix='/tmp/out/'; Test unit written to /tmp/out/crash-0f7df2a1
Base64: CAg6pwEKFAoBeAoBcxIBciIHUmVzaGFwZToACh4KAXISAX
stat::number_of_executed_units: 20244
stat::average_exec_per_sec:     5061
stat::new_units_added:          348
"""


def test_the_report_of_a_crash_names_the_exception_and_its_ember_frame() -> None:
    ember_root = coverage.__file__.rsplit("/testing/", 1)[0]
    report = coverage.LibFuzzerReport()
    for line in CRASH_REPORT.replace("{ember}", ember_root).splitlines():
        report.read(line)
    result = report.finish()
    assert (result.executions, result.execs_per_second, result.new_units) == (20244, 5061, 348)
    (finding,) = result.findings
    assert finding.kind == "crash"
    assert finding.exception.startswith("TypeError: (): incompatible function arguments")
    assert finding.frame == "ember/graph/ops/tensor.py:62"
    assert str(finding.path) == "/tmp/out/crash-0f7df2a1"
    assert "--replay /tmp/out/crash-0f7df2a1 --no-build" in coverage.summary(result)


def test_keep_going_writes_each_distinct_exception_once(tmp_path, capsys) -> None:
    def target(data: bytes) -> None:
        if data.startswith(b"k"):
            raise KeyError(data)
        if data.startswith(b"z"):
            raise ZeroDivisionError("division by zero")

    tolerant = coverage.keep_going_target(target, tmp_path)
    for data in (b"k1", b"ok", b"z1", b"k2", b"z2"):
        tolerant(data)
    (key_error,) = tmp_path.glob("bug-KeyError-*.onnx")
    (zero_division,) = tmp_path.glob("bug-ZeroDivisionError-*.onnx")
    assert len(list(tmp_path.iterdir())) == 4
    assert (key_error.read_bytes(), zero_division.read_bytes()) == (b"k1", b"z1")
    assert "raise KeyError(data)" in key_error.with_suffix(".txt").read_text()
    report = coverage.LibFuzzerReport()
    for line in capsys.readouterr().err.splitlines():
        report.read(line)
    assert [f.exception for f in report.result.findings] == [
        "KeyError: b'k1'",
        "ZeroDivisionError: division by zero",
    ]


def test_keep_going_restarts_libfuzzer_after_an_input_stops_it(tmp_path, monkeypatch) -> None:
    # A timeout ends libFuzzer whatever its flags: the run goes on from the corpus, with
    # the next seed, and an exception the second run finds again is reported once.
    bug = coverage.Finding("bug", "KeyError: 3", "ember/x.py:1", tmp_path / "bug-1.onnx")
    again = coverage.Finding("bug", "KeyError: 4", "ember/x.py:1", tmp_path / "bug-2.onnx")
    timeout = coverage.Finding("timeout", "timeout after 21 seconds", "", tmp_path / "t")
    runs = [
        coverage.CoverageResult(1000, 100, 5, 12.0, 70, [bug, timeout]),
        coverage.CoverageResult(3000, 100, 7, 31.0, 0, [again]),
    ]
    seeds = []

    def fake_run(minutes, seed, corpus, out, echo, keep_going):
        seeds.append(seed)
        return runs[len(seeds) - 1], False

    monkeypatch.setattr(coverage, "_fuzz_once", fake_run)
    messages: list[str] = []
    result = coverage.fuzz_with_coverage(
        1.0, 5, tmp_path / "corpus", tmp_path / "out", messages.append, keep_going=True
    )
    assert seeds == [5, 6]
    assert (result.executions, result.execs_per_second, result.new_units) == (4000, 100, 12)
    assert result.findings == [bug, timeout] and result.exit_status == 0
    assert any("restarting" in message for message in messages)


def test_without_atheris_the_command_says_how_to_install_it(monkeypatch, capsys) -> None:
    find_spec = importlib.util.find_spec

    def find_all_but_atheris(name: str, package: str | None = None):
        return None if name == "atheris" else find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_all_but_atheris)
    assert coverage.main(["--minutes", "0.01"]) == 2
    assert "pip install -e '.[fuzz]'" in capsys.readouterr().err


@pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is not installed (pip install -e '.[fuzz]'; wheels for x86-64 Linux only)",
)
def test_a_short_coverage_guided_run_reports_what_it_finds(tmp_path) -> None:
    """The harness works end to end: libFuzzer runs the instrumented target and each
    exception it finds is saved with its traceback. Whether a run this short finds one
    depends on how far a randomised search gets in 12 s on a busy machine, so the
    contract itself is held by the deterministic tests above and tests/testing/
    test_fuzz.py; each finding of a longer run becomes a regression test."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ember.testing.fuzz.coverage", "--minutes", "0.2"]
    command += ["--seed", "1", "--keep-going", "--out", str(out)]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert " executions (" in run.stdout, run.stderr[-3000:]
    assert run.returncode in (0, 1), run.stdout + run.stderr[-3000:]
    # Each finding leaves its input in `out`: "bug-*.onnx" (with its traceback in a .txt)
    # for an exception under --keep-going, "crash-", "timeout-" or "oom-" for what
    # stopped libFuzzer. The exit status says whether there were any.
    saved = sorted(path for path in out.iterdir() if path.suffix != ".txt")
    assert (run.returncode == 1) == bool(saved), run.stdout
    for model in out.glob("bug-*.onnx"):
        assert model.with_suffix(".txt").read_text().startswith("Traceback")


CORPUS = Path(__file__).parent / "fuzz_corpus"


# Checks every corpus model in a child process under an address-space limit: some of
# them ask NumPy for tens of GiB, which must fail as MemoryError (Ember's ResourceError),
# not be granted by overcommit and then draw the OOM killer onto the test run.
_CHECK_CORPUS = """
import resource, sys, traceback, warnings
warnings.simplefilter("ignore")
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
from ember.testing.fuzz.coverage import check_model
for path in sys.argv[1:]:
    try:
        check_model(open(path, "rb").read())
    except Exception:
        print(f"{path}:", traceback.format_exc(limit=-3))
"""


def test_each_input_a_fuzzer_found_is_now_handled() -> None:
    """The models the fuzzers found bugs with (issue 18: `ember-*` from
    `python -m ember.testing.fuzz`, `atheris-*` from this module's coverage-guided runs),
    kept as a regression corpus: each imports and interprets, or is refused with an
    EmberError (the compiled side of those findings has tests of its own)."""
    paths = sorted(str(path) for path in CORPUS.glob("*.onnx"))
    assert len(paths) >= 50
    command = [sys.executable, "-c", _CHECK_CORPUS, *paths]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and not run.stdout, run.stdout + run.stderr[-3000:]
