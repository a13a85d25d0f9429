"""The check of one case, run in the helper process: import, verify, interpret, ONNX
Runtime, build and run, and the comparison of outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.parser

from ember.build import build
from ember.errors import ExecutionError, ShapeError
from ember.frontend import from_onnx
from ember.graph import Graph, interpret, verify
from ember.graph.ir import Params
from ember.graph.ops import node_macs
from ember.graph.ops.attrs import TopKAttrs
from ember.testing.fuzz.mutations import Case
from ember.testing.oracle import run_onnxruntime

# Larger graphs are imported and built but not run: random data for them, and their
# interpretation, would cost more time and memory than the case is worth.
MAX_RUN_BYTES = 256 * 2**20
MAX_VALUE_BYTES = 64 * 2**20
# ... nor are those with more multiply-adds than this (seconds in NumPy's references).
MAX_RUN_MACS = 2**30
RTOL, ATOL, FLOAT16_TOLERANCE = 1e-4, 1e-5, 4e-3


@dataclass(slots=True)
class StageLog:
    """How far a check got: the stage an exception escapes from, and what it compared."""

    stage: str = "start"
    checked: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A check's answer when it raised nothing: "ok", "mismatch_ort" or
    "mismatch_compiled", with what disagreed (kind: names, shape, dtype or values) in
    the output of which op (location)."""

    outcome: str = "ok"
    kind: str = ""
    location: str = ""
    message: str = ""


CheckFunction = Callable[[Case, StageLog], Verdict]


def check_case(case: Case, log: StageLog) -> Verdict:
    """Import, verify, interpret, ONNX Runtime, build and run; see the module docstring.
    Raises what Ember raises; the runner classifies it by `log.stage`."""
    log.stage = "import"
    graph, params = from_onnx(
        case.model, shapes=fixed_shapes(case.model) if case.fix_shapes else None
    )
    verify(graph, params)
    log.checked.append("import")
    runnable = _run_bytes(graph) <= MAX_RUN_BYTES
    if runnable:
        feeds = random_feeds(graph, case.feed_seed)
        log.stage = "interpret"
        try:
            expected = interpret(graph, params, feeds)
        except ShapeError as error:
            if _INDEX_OUT_OF_RANGE not in str(error):
                raise
            # Random indices out of range: the compiled module must refuse them too.
            return _check_refused_indices(graph, params, feeds, case, log)
        log.checked.append("interpreter")
        log.stage = "onnxruntime"
        theirs = _onnxruntime_outputs(case.model, feeds)
        if theirs is not None:
            log.checked.append("onnxruntime")
            ours, theirs = comparable(graph, expected), comparable(graph, theirs)
            verdict = compare_outputs(graph, ours, theirs, "mismatch_ort")
            if verdict.outcome != "ok" and not float32_overflow(graph, params, feeds, verdict):
                return verdict
    if not case.build:
        return Verdict()
    log.stage = "build"
    library = build(graph, "llvm", params=params, progress=False)
    log.checked.append("build")
    if not runnable:
        return Verdict()
    log.stage = "run"
    outputs = library.load()(**feeds)
    log.checked.append("compiled")
    verdict = compare_outputs(graph, outputs, expected, "mismatch_compiled")
    if verdict.outcome != "ok" and rounding_edge(graph, outputs, expected):
        return Verdict()
    return verdict


# What the interpreter and the compiled module say of an index out of range at run time.
_INDEX_OUT_OF_RANGE = "is out of range for an axis of size"


def _check_refused_indices(
    graph: Graph, params: Params, feeds: dict[str, np.ndarray], case: Case, log: StageLog
) -> Verdict:
    """The interpreter refused run-time indices (the random inputs put some out of
    range); the compiled module's run must fail the same way."""
    log.checked.append("interpreter")
    if not case.build:
        return Verdict()
    log.stage = "build"
    library = build(graph, "llvm", params=params, progress=False)
    log.checked.append("build")
    log.stage = "run"
    try:
        library.load()(**feeds)
    except ExecutionError as error:
        if _INDEX_OUT_OF_RANGE in str(error):
            log.checked.append("compiled")
            return Verdict()
        raise
    message = "the interpreter refused indices out of range; the compiled module ran"
    return Verdict("mismatch_compiled", "indices", "gather", message)


def fixed_shapes(model: bytes) -> dict[str, list[int]] | None:
    """`shapes=` for the graph inputs with symbolic or missing dimensions (set to 2), when
    the bytes parse and such inputs have a rank; otherwise None."""
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception:
        return None
    initializers = {tensor.name for tensor in proto.graph.initializer}
    shapes = {}
    for value in proto.graph.input:
        tensor_type = value.type.tensor_type
        if value.name in initializers or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if any(d.WhichOneof("value") != "dim_value" for d in dims):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else 2 for d in dims]
    return shapes or None


def _run_bytes(graph: Graph) -> int:
    """The bytes of every tensor of `graph`, or more than MAX_RUN_BYTES when it should
    not be run: a tensor that NumPy cannot make, or more than MAX_RUN_MACS of work (a
    1000 x 1000 ConvTranspose kernel over a 1000 x 1000 image is 16 MB of output and
    10**12 multiply-adds)."""
    if sum(node_macs(node) for node in graph.nodes) > MAX_RUN_MACS:
        return MAX_RUN_BYTES + 1
    sizes = [value.type.nbytes for value in graph.values()]
    # An empty tensor with a dimension of 2**62 holds no bytes, but NumPy cannot make it.
    huge = any(dim > 2**31 for value in graph.values() for dim in value.shape)
    too_big = huge or max(sizes, default=0) > MAX_VALUE_BYTES
    return MAX_RUN_BYTES + 1 if too_big else sum(sizes)


def random_feeds(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Inputs for `graph`: normal floats, small non-negative integers (valid indices and
    counts more often than not), random booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in graph.inputs:
        kind = np.dtype(value.dtype).kind
        array: np.ndarray
        if kind == "f":
            array = rng.standard_normal(value.shape)
        elif kind == "b":
            array = rng.random(value.shape) < 0.5
        else:
            array = rng.integers(0, 3, value.shape)
        feeds[value.name] = array.astype(value.dtype)
    return feeds


def _onnxruntime_outputs(
    model: bytes, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray] | None:
    """ONNX Runtime's outputs, or None where it refuses the model or the inputs."""
    try:
        return run_onnxruntime(model, feeds)
    except Exception:
        return None


def comparable(graph: Graph, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`outputs` with those whose order ONNX leaves open put in one order: TopK with
    sorted=0 may return its k elements in any order (ORT's differs from Ember's), so
    its values and indices are ordered by value (largest or smallest first), then by
    index; applied to both sides of a comparison."""
    ordered = dict(outputs)
    for node in graph.nodes:
        attrs = node.attrs
        if node.op != "topk" or not isinstance(attrs, TopKAttrs) or attrs.sorted:
            continue
        values_name, indices_name = (value.name for value in node.outputs)
        if values_name not in outputs or indices_name not in outputs:
            continue
        values, indices = np.asarray(outputs[values_name]), np.asarray(outputs[indices_name])
        wide = values.astype(np.float64)
        order = np.lexsort((indices, -wide if attrs.largest else wide), axis=attrs.axis)
        ordered[values_name] = np.take_along_axis(values, order, attrs.axis)
        ordered[indices_name] = np.take_along_axis(indices, order, attrs.axis)
    return ordered


# Inputs this large make ONNX Runtime's float32 intermediates overflow (a square passes
# float32's 3.4e38 above about 1.8e19), where Ember's references compute in float64.
OVERFLOWING_MAGNITUDE = 1e18


def float32_overflow(
    graph: Graph, params: Params, feeds: dict[str, np.ndarray], verdict: Verdict
) -> bool:
    """Whether a disagreement with ONNX Runtime is its float32 arithmetic overflowing:
    the values differ and some float input or parameter is at least
    OVERFLOWING_MAGNITUDE (LRN of -1e30: ORT's running sum of squares is inf, and
    NaN once it subtracts it back)."""
    if verdict.kind != "values":
        return False
    arrays = [*feeds.values(), *params.values()]
    return any(
        array.dtype.kind == "f" and array.size and np.nanmax(np.abs(array)) >= OVERFLOWING_MAGNITUDE
        for array in map(np.asarray, arrays)
    )


def rounding_edge(
    graph: Graph, actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]
) -> bool:
    """Whether a disagreement is a float value on a rounding edge: the graph rounds
    (`round`, as QuantizeLinear does), and each output differs in at most 1% of its
    elements, each by one step of the output's grid of values (the smallest gap between
    its distinct values). A float32 kernel and the float64 reference that land on
    either side of x.5 round one step apart (a QDQ conv's -6.5 went to -6 and -7)."""
    if not any(node.op == "round" for node in graph.nodes):
        return False
    for name, want in expected.items():
        want, got = np.asarray(want), np.asarray(actual[name])
        if want.shape != got.shape or want.dtype.kind != "f":
            return False
        differ = ~np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
        if not differ.any():
            continue
        grid = np.diff(np.unique(want[np.isfinite(want)]))
        if differ.sum() > max(1, want.size // 100) or not grid.size:
            return False
        step = float(grid.min())
        if not np.allclose(np.abs(got[differ] - want[differ]), step, rtol=1e-3):
            return False
    return True


def compare_outputs(
    graph: Graph, actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], outcome: str
) -> Verdict:
    """Same output names, shapes, dtypes; floats within RTOL and ATOL times the largest
    finite magnitude (at least 1; NaN equals NaN), other types exactly."""
    if sorted(actual) != sorted(expected):
        message = f"outputs {sorted(actual)} != {sorted(expected)}"
        return Verdict(outcome, "names", "graph outputs", message)
    producers = graph.producers()
    for name, want in expected.items():
        got = np.asarray(actual[name])
        op = producers[name].op if name in producers else "an input or param"
        problem = difference(got, np.asarray(want))
        if problem is not None:
            kind, text = problem
            return Verdict(outcome, kind, op, f"output {name!r} ({op}): {text}")
    return Verdict()


def difference(got: np.ndarray, want: np.ndarray) -> tuple[str, str] | None:
    if got.shape != want.shape:
        return "shape", f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return "dtype", f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind not in "fc":
        if np.array_equal(got, want):
            return None
        return "values", f"{np.count_nonzero(got != want)} of {got.size} elements differ"
    loose = want.dtype.itemsize < 4
    rtol, atol = (FLOAT16_TOLERANCE, FLOAT16_TOLERANCE) if loose else (RTOL, ATOL)
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    if np.allclose(got, want, rtol=rtol, atol=atol * scale, equal_nan=True):
        return None
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol * scale, equal_nan=True)
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
    return "values", (
        f"{np.count_nonzero(bad)} of {bad.size} elements differ; first at {list(where)}: "
        f"{got[where].item()!r} vs {want[where].item()!r}"
    )
