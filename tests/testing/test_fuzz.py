"""The model fuzzer (ember.testing.fuzz): its seed models pass every check today, its
mutations are deterministic and change the model, its runner classifies what a check
does (raises, hangs, crashes) and recovers, and a fixed short run finds nothing."""

from __future__ import annotations

import os
import random
import time

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.parser
import pytest

from ember.errors import ShapeError
from ember.frontend import from_onnx
from ember.testing import fuzz
from ember.testing.fuzz import Case, StageLog, Verdict, check_case, make_case, seed_model
from ember.testing.fuzz.__main__ import main as fuzz_main
from ember.testing.fuzz.check import (
    MAX_RUN_BYTES,
    _run_bytes,
    comparable,
    compare_outputs,
    float32_overflow,
    rounding_edge,
)

SEEDS = sorted(fuzz.SEED_GRAPHS)
ALL_CHECKS = ["import", "interpreter", "onnxruntime", "build", "compiled"]


@pytest.fixture(autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fuzz-cache"))


# -- seed models --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SEEDS)
def test_each_seed_model_passes_every_check(name: str) -> None:
    """Imports, interprets like ONNX Runtime, compiles like the interpreter, on a few
    sets of inputs: a finding on a mutated seed is the mutation's doing."""
    data = seed_model(name).SerializeToString()
    for feed_seed in range(3):
        log = StageLog()
        assert check_case(Case(0, name, data, (), feed_seed=feed_seed), log) == Verdict()
        assert log.checked == ALL_CHECKS


def test_symbolic_input_dimensions_are_fixed_to_small_values() -> None:
    model = seed_model("conv_relu")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    data = model.SerializeToString()
    assert fuzz.fixed_shapes(data) == {"x": [2, 3, 8, 8]}
    log = StageLog()
    assert check_case(Case(0, "conv_relu", data, ()), log) == Verdict()
    assert log.checked == ALL_CHECKS
    with pytest.raises(ShapeError, match="batch"):
        check_case(Case(0, "conv_relu", data, (), fix_shapes=False), StageLog())


# -- mutations ----------------------------------------------------------------------------


def test_mutations_combine_without_raising() -> None:
    """A mutation that raises on a model other mutations made is skipped (a long run
    goes on) and says so in the case's mutations; none should."""
    for seed in (1, 2):
        for index in range(2000):
            mutations = make_case(seed, index).mutations
            assert not any(" raised " in m for m in mutations), (seed, index, mutations)


def test_cases_are_deterministic_and_differ_from_their_seed() -> None:
    for index in range(300):
        case = make_case(5, index)
        assert case == make_case(5, index)
        assert case.mutations
        assert case.model != seed_model(case.seed_name).SerializeToString()
    assert [make_case(5, i).model for i in range(20)] != [make_case(6, i).model for i in range(20)]
    assert {make_case(5, i).seed_name for i in range(300)} == set(SEEDS)


@pytest.mark.parametrize(
    "mutation", sorted(set(fuzz.MUTATIONS), key=lambda m: m.__name__), ids=lambda m: m.__name__
)
def test_every_mutation_applies_to_every_seed(mutation: fuzz.Mutation) -> None:
    """No mutation raises, whatever the seed; what it makes serializes; and each makes
    some change to some seed."""
    changed = 0
    for name in SEEDS:
        original = seed_model(name).SerializeToString()
        for draw in range(5):
            model = seed_model(name)
            if mutation(model, random.Random(draw)) is not None:
                changed += model.SerializeToString() != original
    assert changed > 0


def test_byte_mutations_change_the_bytes() -> None:
    data = seed_model("gemm").SerializeToString()
    for draw in range(50):
        mutated, description = fuzz.mutate_bytes(data, random.Random(draw))
        assert description.startswith("bytes: ")
        assert mutated != data or "overwrite" in description  # may write the same byte


# -- comparing outputs --------------------------------------------------------------------


def test_outputs_compare_by_name_shape_dtype_and_value() -> None:
    compare = fuzz.difference
    a = np.asarray([1.0, np.nan, np.inf], np.float32)
    assert compare(a, a.copy()) is None  # NaN equals NaN
    assert compare(a + 1e-6, a) is None
    assert compare(a.astype(np.float64), a)[0] == "dtype"
    assert compare(a[:2], a)[0] == "shape"
    assert compare(np.asarray([1.0, 2.0, 3.0], np.float32), a)[0] == "values"
    assert compare(np.asarray([1, 2]), np.asarray([1, 3]))[0] == "values"  # ints: exact
    assert compare(np.float32(1e5 + 5), np.float32(1e5)) is None  # rtol 1e-4
    assert compare(np.float32(1e5 + 50), np.float32(1e5))[0] == "values"


def test_topk_without_sorting_and_float32_overflow_are_not_ort_mismatches() -> None:
    # TopK with sorted=0 may return its k elements in any order: both sides are put in
    # one order before comparing. Inputs of 1e18 or more overflow ORT's float32 sums.
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[2, 5] x, int64[1] k) => (float[2, 3] v, int64[2, 3] i) {
            v, i = TopK <sorted = 0, largest = 1, axis = 1> (x, k)
        }"""
    )
    k = onnx.numpy_helper.from_array(np.asarray([3], np.int64), "k")
    model.graph.initializer.append(k)
    graph, _ = from_onnx(model)
    ours = {"v": np.asarray([[5.0, 4, 4], [3, 2, 1]]), "i": np.asarray([[0, 1, 3], [2, 0, 4]])}
    theirs = {"v": np.asarray([[4.0, 5, 4], [1, 3, 2]]), "i": np.asarray([[3, 0, 1], [4, 2, 0]])}
    left, right = comparable(graph, ours), comparable(graph, theirs)
    assert compare_outputs(graph, left, right, "mismatch_ort").outcome == "ok"
    assert compare_outputs(graph, ours, theirs, "mismatch_ort").outcome == "mismatch_ort"
    values = Verdict("mismatch_ort", "values", "lrn", "differs")
    huge = {"x": np.asarray([1.0, -1e30], np.float32)}
    assert float32_overflow(graph, {}, huge, values)
    assert not float32_overflow(graph, {}, {"x": np.ones(2, np.float32)}, values)
    assert not float32_overflow(graph, {}, huge, Verdict("mismatch_ort", "shape", "lrn", "-"))


def test_graphs_with_too_much_work_are_built_but_not_run() -> None:
    # Found by atheris: a 1000 x 1000 ConvTranspose kernel over a 1000 x 1000 image is
    # 16 MB of output but 10**12 multiply-adds, which the interpreter ground through.
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[1, 1, 1000, 1000] x) => (float[1, 1, 1999, 1999] y) {
            y = ConvTranspose (x, x)
        }"""
    )
    graph, _ = from_onnx(model)
    assert _run_bytes(graph) > MAX_RUN_BYTES


def test_one_rounding_step_where_the_graph_rounds_is_not_a_compiled_mismatch() -> None:
    # Found by the 10-minute run: a QDQ conv's float32 sum and the float64 reference
    # fell on either side of -6.5, and QuantizeLinear's rounding made that -7 vs -6.
    rounds = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[100] x) => (float[100] y) { y = Round (x) }"""
    )
    graph, _ = from_onnx(rounds)
    want = np.arange(100, dtype=np.float32) * 0.5
    one_step = want.copy()
    one_step[7] += 0.5
    assert rounding_edge(graph, {"y": one_step}, {"y": want})
    two_steps, many = want.copy(), want.copy()
    two_steps[7] += 1.0
    many[:5] += 0.5
    assert not rounding_edge(graph, {"y": two_steps}, {"y": want})
    assert not rounding_edge(graph, {"y": many}, {"y": want})
    plain = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 13]>
        g (float[100] x) => (float[100] y) { y = Relu (x) }"""
    )
    assert not rounding_edge(from_onnx(plain)[0], {"y": one_step}, {"y": want})


# -- the runner ---------------------------------------------------------------------------


def fake_check(case: Case, log: StageLog) -> Verdict:
    """What case `index` does instead of checking a model (in the helper process)."""
    log.stage = "import"
    if case.index == 0:
        raise KeyError("a bug")
    if case.index == 1:
        raise ShapeError("a bad model")
    if case.index == 2:
        time.sleep(60)
    if case.index == 3:
        os.abort()
    if case.index == 5:
        log.stage = "interpret"
        raise ShapeError("a bad model that imported")
    if case.index == 6:
        return Verdict("mismatch_compiled", "values", "add", "output 'y' (add): differs")
    log.checked.append("import")
    return Verdict()


def test_the_runner_classifies_what_a_check_does_and_recovers(tmp_path) -> None:
    result = fuzz.fuzz(seed=0, cases=8, timeout=2.0, check=fake_check, out=tmp_path)
    assert result.outcomes == [
        "bug", "rejected", "hang", "crash", "ok", "internal_error", "mismatch_compiled", "ok",
    ]  # fmt: skip
    assert result.rejected_by == {"ShapeError": 1}
    assert result.checked == {"import": 2}
    findings = {key[0]: finding.result for key, finding in result.findings.items()}
    assert set(findings) == {"bug", "hang", "crash", "internal_error", "mismatch_compiled"}
    assert findings["bug"].error_type == "KeyError"
    assert findings["bug"].location.startswith("test_fuzz.py:")
    # The stacks of a hang and a crash come from the helper's faulthandler.
    assert findings["hang"].location.startswith("test_fuzz.py:")
    assert "SIGABRT" in findings["crash"].error_type
    assert findings["crash"].location.startswith("test_fuzz.py:")
    assert findings["mismatch_compiled"].key == ("mismatch_compiled", "values", "add")
    written = sorted(path.name for path in tmp_path.iterdir())
    assert len(written) == 2 * len(findings)
    text = (tmp_path / "001-bug-KeyError.txt").read_text()
    assert "replay: python -m ember.testing.fuzz --replay" in text and "KeyError" in text
    onnx.load(tmp_path / "001-bug-KeyError.onnx")


def test_the_command_line_exit_status_says_whether_there_are_findings(capsys) -> None:
    status = fuzz_main(["--cases", "30", "--seed", "2"])
    out = capsys.readouterr().out
    assert "ember fuzz: seed 2, 30 cases" in out
    assert ("distinct findings: 0" in out) == (status == 0)


# -- fuzzing ------------------------------------------------------------------------------


def test_a_short_fuzz_run_finds_nothing() -> None:
    """About a minute of cases; every finding is a bug to fix (the summary says which,
    and `--out` writes the models: python -m ember.testing.fuzz --cases 3000 --seed 11
    --out DIR)."""
    result = fuzz.fuzz(seed=11, cases=3000)
    assert not result.findings, fuzz.summary(result)


@pytest.mark.slow
def test_a_long_fuzz_run_finds_nothing() -> None:
    """Ten minutes of cases (40,000 or so), for `make test-all`."""
    result = fuzz.fuzz(seed=12, minutes=10)
    assert not result.findings, fuzz.summary(result)


def test_run_time_indices_out_of_range_must_fail_the_compiled_run_too() -> None:
    """The interpreter refuses random indices out of range (ShapeError); that is fine
    when the compiled module's run refuses them too (issue 18's index check), and a
    compiled run that reads a wrapped row instead would be a mismatch."""
    model = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x, int64[6] i) => (float[6, 3] y) { y = Gather<axis = 0>(x, i) }"""
    )
    data = model.SerializeToString()
    outcomes = set()
    for feed_seed in range(6):  # indices drawn from 0..2: some runs have a 2
        log = StageLog()
        assert check_case(Case(0, "gather", data, (), feed_seed=feed_seed), log) == Verdict()
        outcomes.add(tuple(log.checked))
    assert ("import", "interpreter", "build", "compiled") in outcomes  # refused both ways
