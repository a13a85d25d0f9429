"""Run the ONNX package's own backend node tests through Ember's frontend and interpreter.

    python -m ember.testing.onnx_conformance [--ops Conv,Relu,...] [--verbose]

Each case is a small model (usually one node) with input and expected output arrays.
The installed `onnx` wheel may ship them as files (`onnx/backend/test/data/node/*/
model.onnx` with `test_data_set_*/input_*.pb` and `output_*.pb`); when it does not
(recent wheels leave the data out), the same cases are generated in memory from the
generator scripts the wheel does ship (`onnx.backend.test.case.node`).

A case counts under the op type of its model's last non-Constant node. The
`*_expanded` cases (the op written out as its ONNX function body) count under the op
they expand, found through the sibling case without the suffix.

Outcomes: "passed"; "failed" for wrong numbers, shapes or dtypes, or any exception that
is not an `EmberError` during import, or any exception at all while interpreting an
imported graph (a `GraphError` at import, a graph that fails `verify`, is a converter
bug and fails too); "unsupported" when the import raises another `EmberError`
explaining a limitation (unsupported operator, dtype, non-tensor input, training-mode
op), with the message as the reason.

Tolerances: the case's own rtol (ONNX's backend default 1e-3), and an absolute
tolerance of at least 1e-5. The backend default atol of 1e-7 is below fp32 rounding
for results near zero computed in a different order (sin(pi), x - x*y...), and Ember's
rule for fp32 comparisons elsewhere is 1e-5. float16 results get rtol and atol of at
least 4e-3 (about four float16 rounding steps): the reference rounds to float16 after
every op, the generators once at the end.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ember.errors import EmberError, GraphError
from ember.graph.interpret import interpret
from ember.graph.ir import Graph, Params

MIN_ATOL = 1e-5
FLOAT16_TOLERANCE = 4e-3
STATUSES = ("passed", "failed", "unsupported", "deviates")

# Cases where ONNX's expected data and the spec text (which ONNX Runtime and Ember
# follow) disagree. Such a case is reported as "deviates", with the reason, instead of
# "failed"; the tests check that each entry still deviates, so none goes stale.
KNOWN_DEVIATIONS = {
    name: (
        "with align_corners and scales, ONNX's reference divides by the fractional output "
        "length (4 * 0.6 = 2.4); the spec's length_resized is the tensor's integer length "
        "(2), which ONNX Runtime and Ember use"
    )
    for name in (
        "test_resize_downsample_scales_linear_align_corners",
        "test_resize_downsample_scales_cubic_align_corners",
    )
}
_EXPANDED_SUFFIX = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True, slots=True)
class ConformanceCase:
    """One backend test: a model and its (inputs, expected outputs) data sets."""

    name: str
    model: onnx.ModelProto
    data_sets: tuple[tuple[tuple[object, ...], tuple[object, ...]], ...]
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    op_type: str
    status: str  # one of STATUSES
    reason: str = ""
    seconds: float = 0.0
    # Inputs turned into constants to make the import static (see `run_case`).
    frozen: tuple[str, ...] = ()


# -- finding cases --------------------------------------------------------------------


def data_directory() -> Path:
    """Where the onnx wheel keeps the node test files (absent in recent wheels)."""
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def load_cases(directory: Path | None = None) -> list[ConformanceCase]:
    """All node test cases, from the data files if the wheel has them (or from
    `directory`, laid out like the wheel's), else generated."""
    directory = directory or data_directory()
    if directory.is_dir():
        return [case for path in sorted(directory.iterdir()) if (case := _read_case_dir(path))]
    return _generate_cases()


def _read_case_dir(path: Path) -> ConformanceCase | None:
    model_path = path / "model.onnx"
    if not model_path.is_file():
        return None
    model = onnx.load(str(model_path), load_external_data=False)
    data_sets = []
    for set_dir in sorted(path.glob("test_data_set_*")):
        inputs = tuple(_read_tensor(p) for p in _numbered(set_dir, "input"))
        outputs = tuple(_read_tensor(p) for p in _numbered(set_dir, "output"))
        data_sets.append((inputs, outputs))
    return ConformanceCase(path.name, model, tuple(data_sets))


def _numbered(directory: Path, prefix: str) -> list[Path]:
    return sorted(directory.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))


def _read_tensor(path: Path) -> object:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return onnx.numpy_helper.to_array(tensor)


def _generate_cases() -> list[ConformanceCase]:
    from onnx.backend.test.case import node

    # The generators compute expected outputs with NumPy and warn about their own
    # deliberate overflows and divisions by zero; that is not Ember's output.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        generated = node.collect_testcases(None)
    cases = []
    for case in generated:
        if case.model is None or case.data_sets is None:
            continue
        data_sets = tuple(
            (tuple(map(_as_data, i)), tuple(map(_as_data, o))) for i, o in case.data_sets
        )
        cases.append(ConformanceCase(case.name, case.model, data_sets, case.rtol, case.atol))
    return cases


def _as_data(value: object) -> object:
    """Generators give arrays, some as TensorProto; sequences and optionals stay as is."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)  # a 0-d tensor given as a NumPy scalar
    return value


def case_op_types(cases: Sequence[ConformanceCase]) -> dict[str, str]:
    """Case name -> the op type it tests (see the module docstring)."""
    op_types = {case.name: _last_op_type(case.model) for case in cases}
    for name in op_types:
        sibling = _EXPANDED_SUFFIX.sub("", name)
        if sibling != name and sibling in op_types:
            op_types[name] = op_types[sibling]
    return op_types


def _last_op_type(model: onnx.ModelProto) -> str:
    op_types = [node.op_type for node in model.graph.node if node.op_type != "Constant"]
    if op_types:
        return op_types[-1]
    return model.graph.node[-1].op_type if model.graph.node else "(empty)"


# -- running cases --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ImportFailure:
    status: str  # "failed" or "unsupported"
    reason: str


def run_case(case: ConformanceCase, op_type: str) -> CaseResult:
    """Import, interpret and compare one case.

    Ember compiles static graphs, so inputs that a converter needs at import time
    (Reshape's shape, Slice's starts, Resize's scales...) must be constants. Many cases
    feed them as graph inputs; when the import fails, it is retried with the inputs
    after the first, then all inputs, turned into initializers holding the case's data
    (what an exporter writes for a static model). `CaseResult.frozen` names them."""
    start = time.perf_counter()
    names = _input_names(case.model)

    def result(status: str, reason: str = "", frozen: tuple[str, ...] = ()) -> CaseResult:
        seconds = time.perf_counter() - start
        return CaseResult(case.name, op_type, status, reason, seconds, frozen)

    first_inputs = case.data_sets[0][0] if case.data_sets else ()
    first_try = imported = _import(case.model, names, first_inputs, ())
    frozen: tuple[str, ...] = ()
    for attempt in (tuple(names[1:]), tuple(names)):
        if not isinstance(imported, _ImportFailure) or imported.status == "failed":
            break
        frozen = attempt
        imported = _import(case.model, names, first_inputs, frozen)
    if isinstance(imported, _ImportFailure):
        if imported is first_try or not frozen:
            return result(imported.status, imported.reason)
        return result(imported.status, f"with {', '.join(frozen)} constant: {imported.reason}")
    for index, (inputs, expected) in enumerate(case.data_sets):
        if frozen and index > 0:
            # The constants differ per data set: import again with this one's values.
            imported = _import(case.model, names, inputs, frozen)
            if isinstance(imported, _ImportFailure):
                return result("failed", f"data set {index}: {imported.reason}", frozen)
        feed = {n: v for n, v in zip(names, inputs, strict=False) if n not in frozen}
        problem = _check_data_set(*imported, feed, expected, case)
        if problem and case.name in KNOWN_DEVIATIONS:
            return result("deviates", f"{KNOWN_DEVIATIONS[case.name]} ({problem})", frozen)
        if problem:
            return result("failed", f"data set {index}: {problem}", frozen)
    return result("passed", frozen=frozen)


def _import(
    model: onnx.ModelProto,
    input_names: list[str],
    inputs: Sequence[object],
    frozen: tuple[str, ...],
) -> tuple[Graph, Params] | _ImportFailure:
    """`(graph, params)`, or why the import did not succeed."""
    from ember.frontend import from_onnx

    data = dict(zip(input_names, inputs, strict=False))
    if frozen:
        model = _freeze_inputs(model, {name: data.get(name) for name in frozen})
    shapes = {
        name: array.shape
        for name, array in data.items()
        if isinstance(array, np.ndarray) and name not in frozen
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # newer-opset notices
            return from_onnx(model, shapes=shapes)
    except GraphError as error:
        return _ImportFailure("failed", f"import produced an invalid graph: {error}")
    except EmberError as error:
        return _ImportFailure("unsupported", f"{type(error).__name__}: {error}")
    except Exception as error:
        return _ImportFailure("failed", f"import raised {type(error).__name__}: {error}")


def _freeze_inputs(model: onnx.ModelProto, values: dict[str, object]) -> onnx.ModelProto:
    """A copy of `model` in which the named graph inputs are initializers."""
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    kept = [value for value in frozen.graph.input if value.name not in values]
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            frozen.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    if frozen.ir_version < 4:
        # Before IR 4 every initializer also had to be listed as a graph input.
        frozen.ir_version = 4
    return frozen


def _input_names(model: onnx.ModelProto) -> list[str]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [value.name for value in model.graph.input if value.name not in initializers]


def _check_data_set(
    graph: Graph,
    params: Params,
    feed: dict[str, object],
    expected: Sequence[object],
    case: ConformanceCase,
) -> str:
    """An empty string if Ember's outputs match, else what went wrong."""
    try:
        with np.errstate(all="ignore"):
            actual = interpret(graph, params, {k: np.asarray(v) for k, v in feed.items()})
    except Exception as error:
        return f"interpreting raised {type(error).__name__}: {error}"
    got = list(actual.values())
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for output, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        rtol, atol = case.rtol, max(case.atol, MIN_ATOL)
        if ours.dtype == np.float16:
            rtol, atol = max(rtol, FLOAT16_TOLERANCE), max(atol, FLOAT16_TOLERANCE)
        problem = _compare(ours, np.asarray(theirs), rtol, atol)
        if problem:
            return f"output {output} ({graph.outputs[output].name}): {problem}"
    return ""


def _compare(ours: np.ndarray, theirs: np.ndarray, rtol: float, atol: float) -> str:
    if ours.shape != theirs.shape:
        return f"shape {ours.shape}, expected {theirs.shape}"
    if ours.dtype != theirs.dtype:
        return f"dtype {ours.dtype}, expected {theirs.dtype}"
    if ours.dtype.kind in "fc":
        close = np.isclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = ours == theirs
    if bool(np.all(close)):
        return ""
    bad = int(np.size(close) - np.count_nonzero(close))
    first = tuple(int(i) for i in np.argwhere(~close)[0])
    return (
        f"{bad} of {close.size} values differ, e.g. at {first}: "
        f"{ours[first]!r} vs expected {theirs[first]!r}"
    )


def run_conformance(op_types: set[str] | None = None) -> list[CaseResult]:
    """Run every case (or those of `op_types`) and return one result per case."""
    cases = _cached_cases()
    mapping = case_op_types(cases)
    return [
        run_case(case, mapping[case.name])
        for case in cases
        if op_types is None or mapping[case.name] in op_types
    ]


@functools.cache
def _cached_cases() -> tuple[ConformanceCase, ...]:
    # Generating the cases takes seconds; a test session asks for them per op type.
    return tuple(load_cases())


# -- reporting ------------------------------------------------------------------------


def summarize(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Op type -> {"passed": n, "failed": m, "unsupported": k, "deviates": d}, sorted."""
    table: dict[str, dict[str, int]] = {}
    for result in results:
        counts = table.setdefault(result.op_type, dict.fromkeys(STATUSES, 0))
        counts[result.status] += 1
    return dict(sorted(table.items()))


def _format_counts(counts: dict[str, int]) -> str:
    """`N passed, M failed, K unsupported`, plus `, D deviate (documented)` if any."""
    text = ", ".join(f"{counts[s]} {s}" for s in STATUSES[:3])
    if counts["deviates"]:
        text += f", {counts['deviates']} deviate (documented in KNOWN_DEVIATIONS)"
    return text


def format_table(results: Sequence[CaseResult]) -> Iterator[str]:
    """One line per op type, then the total."""
    table = summarize(results)
    width = max([len("total"), *(len(op) for op in table)])
    totals = dict.fromkeys(STATUSES, 0)
    for op_type, counts in table.items():
        yield f"{op_type:<{width}}  {_format_counts(counts)}"
        for status in STATUSES:
            totals[status] += counts[status]
    yield f"{'total':<{width}}  {_format_counts(totals)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ONNX op types (default: all)")
    parser.add_argument(
        "--verbose", action="store_true", help="print each failed or unsupported case"
    )
    args = parser.parse_args(argv)
    op_types = {op.strip() for op in args.ops.split(",") if op.strip()} if args.ops else None
    start = time.perf_counter()
    results = run_conformance(op_types)
    if args.verbose:
        for result in results:
            if result.status != "passed":
                print(
                    f"{result.status.upper():<11} {result.name} [{result.op_type}]: {result.reason}"
                )
        print()
    for line in format_table(results):
        print(line)
    print(f"({len(results)} cases in {time.perf_counter() - start:.1f} s)")
    return 1 if any(result.status == "failed" for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
