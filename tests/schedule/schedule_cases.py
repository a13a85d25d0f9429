"""Small compute DAGs and helpers for schedule tests: lower a State, run it in the
loop-IR interpreter, and compare with the NumPy evaluation of its DAG."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from hypothesis import strategies as st

from ember import te
from ember.loop.interpret import run_func
from ember.loop.ir import Allocate, For, PrimFunc, Stmt, walk_stmts
from ember.loop.verify import verify
from ember.schedule import (
    Annotation,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    ScheduleError,
    SplitStep,
    State,
    Step,
    lower,
)
from ember.te.evaluate import evaluate_dag

# -- workloads (small, so the interpreter is fast) -------------------------------------


def conv2d_dag(h: int = 5, w: int = 5, c: int = 3, k: int = 4, relu: bool = True) -> te.ComputeDAG:
    """NHWC 3x3 conv, padding 1, with a pad stage and an optional ReLU epilogue; both
    inputs keep the default name "placeholder" (lowering must uniquify)."""
    data = te.placeholder((1, h, w, c))
    kernel = te.placeholder((3, 3, c, k))
    pad = _pad(data, h, w, c)
    ry, rx, rc = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx"), te.reduce_axis(c, "rc")
    conv = te.compute(
        (1, h, w, k),
        lambda nn, yy, xx, ff: te.reduce_sum(
            pad[nn, yy + ry, xx + rx, rc] * kernel[ry, rx, rc, ff], [ry, rx, rc]
        ),
        name="conv2d_nhwc",
    )
    if not relu:
        return te.ComputeDAG([conv])
    out = te.compute(
        conv.shape, lambda a0, a1, a2, a3: te.maximum(conv[a0, a1, a2, a3], 0.0), name="T_relu"
    )
    return te.ComputeDAG([out])


def _pad(data: te.Tensor, h: int, w: int, c: int) -> te.Tensor:
    def padded(i0: te.Expr, i1: te.Expr, i2: te.Expr, i3: te.Expr) -> te.Expr:
        inside = te.logical_and(
            te.logical_and(i1 >= 1, i1 < h + 1), te.logical_and(i2 >= 1, i2 < w + 1)
        )
        return te.select(inside, data[i0, i1 - 1, i2 - 1, i3], 0.0)

    return te.compute((1, h + 2, w + 2, c), padded, name="pad_temp")


def dense_dag(m: int = 5, n: int = 6, k: int = 7) -> te.ComputeDAG:
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    bias = te.placeholder((n,), name="bias")
    rk = te.reduce_axis(k, "k")
    dense = te.compute(
        (m, n), lambda i, j: te.reduce_sum(data[i, rk] * weight[j, rk], rk), name="T_dense"
    )
    out = te.compute((m, n), lambda i, j: dense[i, j] + bias[j], name="T_add")
    return te.ComputeDAG([out])


def depthwise_dag(h: int = 5, w: int = 4, c: int = 3) -> te.ComputeDAG:
    data = te.placeholder((1, h, w, c), name="data")
    kernel = te.placeholder((3, 3, c), name="kernel")
    pad = _pad(data, h, w, c)
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    out = te.compute(
        (1, h, w, c),
        lambda b, i, j, ch: te.reduce_sum(
            pad[b, i + ry, j + rx, ch] * kernel[ry, rx, ch], [ry, rx]
        ),
        name="depthwise_conv2d",
    )
    return te.ComputeDAG([out])


def max_dag(rows: int = 4, cols: int = 5, depth: int = 3, dtype: str = "float32") -> te.ComputeDAG:
    data = te.placeholder((rows, cols, depth), dtype=dtype, name="data")
    rc, rd = te.reduce_axis(cols, "rc"), te.reduce_axis(depth, "rd")
    out = te.compute((rows,), lambda i: te.reduce_max(data[i, rc, rd], [rc, rd]), name="T_max")
    return te.ComputeDAG([out])


def softmax_dag(rows: int = 3, cols: int = 7) -> te.ComputeDAG:
    data = te.placeholder((rows, cols), name="data")
    k1, k2 = te.reduce_axis(cols, "k1"), te.reduce_axis(cols, "k2")
    top = te.compute((rows,), lambda i: te.reduce_max(data[i, k1], k1), name="T_max")
    exp = te.compute((rows, cols), lambda i, j: te.call("exp", data[i, j] - top[i]), name="T_exp")
    total = te.compute((rows,), lambda i: te.reduce_sum(exp[i, k2], k2), name="T_sum")
    out = te.compute((rows, cols), lambda i, j: exp[i, j] / total[i], name="T_softmax")
    return te.ComputeDAG([out])


# -- running ---------------------------------------------------------------------------


def random_inputs(dag: te.ComputeDAG, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for tensor in dag.inputs:
        if tensor.dtype.startswith("int"):
            arrays.append(rng.integers(-50, 50, tensor.shape).astype(tensor.dtype))
        else:
            arrays.append(rng.uniform(-1, 1, tensor.shape).astype(tensor.dtype))
    return arrays


def run_lowered(
    func: PrimFunc, dag: te.ComputeDAG, inputs: Sequence[np.ndarray]
) -> list[np.ndarray]:
    outputs = [
        np.full(t.shape, np.nan if t.dtype.startswith("float") else 7, t.dtype) for t in dag.outputs
    ]
    run_func(func, [*inputs, *outputs])
    return outputs


def check(state: State) -> PrimFunc:
    """Lower `state`, run it, and compare every output with the DAG's NumPy value."""
    func = lower(state)
    verify(func)
    inputs = random_inputs(state.dag)
    expected = evaluate_dag(state.dag, inputs)
    for got, want in zip(run_lowered(func, state.dag, inputs), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(func))
    return func


def apply(state: State, *steps: Step) -> State:
    for step in steps:
        state = step.apply(state)
    return state


def stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement, pre-order."""
    return walk_stmts(stmt)


def loops(func: PrimFunc) -> list[For]:
    return [s for s in stmts(func.body) if isinstance(s, For)]


def allocations(func: PrimFunc) -> dict[str, Allocate]:
    return {s.buffer.name: s for s in stmts(func.body) if isinstance(s, Allocate)}


# -- random legal schedules (for property tests) -------------------------------------

PROPERTY_DAGS: dict[str, Callable[[], te.ComputeDAG]] = {
    "conv2d": lambda: conv2d_dag(h=4, w=3, c=2, k=3),
    "dense": lambda: dense_dag(m=3, n=4, k=5),
    "depthwise": lambda: depthwise_dag(h=4, w=3, c=2),
    "max": lambda: max_dag(rows=3, cols=4, depth=2),
}


@st.composite
def random_step(draw: st.DrawFn, state: State) -> Step:
    """One step with random (maybe illegal) arguments for a random compute stage."""
    stage_id = draw(
        st.sampled_from([i for i, s in enumerate(state.stages) if not s.is_placeholder])
    )
    count = max(len(state.stages[stage_id].iters), 1)
    iterator = st.integers(0, count - 1)
    kinds = ["SP", "SP", "RE", "FU", "AN", "PR", "CA", "CA", "CI", "CR", "CHR", "RF"]
    kind = draw(st.sampled_from(kinds))
    if kind == "SP":
        factors = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
        return SplitStep(stage_id, draw(iterator), tuple(factors))
    if kind == "RE":
        return ReorderStep(stage_id, tuple(draw(st.permutations(range(count)))))
    if kind == "FU":
        start = draw(iterator)
        return FuseStep(stage_id, tuple(range(start, start + draw(st.integers(2, 3)))))
    if kind == "AN":
        annotation = draw(st.sampled_from([a for a in Annotation if a is not Annotation.NONE]))
        return AnnotationStep(stage_id, draw(iterator), annotation)
    if kind == "PR":
        return PragmaStep(stage_id, draw(iterator), draw(st.sampled_from([0, 16, 64])))
    if kind == "CA":
        # Mostly a consumer (legal more often), sometimes any stage.
        consumers = state.consumers(stage_id) or [stage_id]
        target = draw(st.sampled_from(consumers) | st.integers(0, len(state.stages) - 1))
        target_iters = max(len(state.stages[target].iters), 1)
        return ComputeAtStep(stage_id, target, draw(st.integers(0, target_iters - 1)))
    if kind == "CI":
        return ComputeInlineStep(stage_id)
    if kind == "CHR":
        source = draw(st.integers(0, len(state.stages) - 1))
        readers = draw(st.lists(st.sampled_from(state.consumers(source) or [0]), min_size=1))
        return CacheReadStep(source, draw(st.sampled_from(["local", "global"])), tuple(readers))
    if kind == "RF":
        return RfactorStep(stage_id, draw(iterator), draw(st.integers(0, 2)))
    return ComputeRootStep(stage_id)


@st.composite
def random_schedule(draw: st.DrawFn, dag: te.ComputeDAG) -> State:
    state = State.initial(dag)
    if draw(st.booleans()):
        # cache_write or rfactor first on the anchor reduction, as the search does
        anchor = max(
            i
            for i, s in enumerate(state.stages)
            if s.name != "T_add" and s.name != "T_relu" and not s.is_placeholder
        )
        first = draw(st.sampled_from(["CW", "RF"]))
        try:
            if first == "CW":
                state = CacheWriteStep(anchor).apply(state)
            else:
                reduce_iter = len(state.stages[anchor].iters) - 1
                state = SplitStep(anchor, reduce_iter, (2,)).apply(state)
                state = RfactorStep(anchor, reduce_iter + draw(st.integers(0, 1)), 0).apply(state)
        except ScheduleError:
            pass
    for _ in range(draw(st.integers(1, 16))):
        step = draw(random_step(state))
        try:
            state = step.apply(state)
        except ScheduleError:
            continue
    return state
