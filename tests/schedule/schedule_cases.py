"""Small compute DAGs and helpers for schedule tests: lower a State, run it in the
loop-IR interpreter, and compare with the NumPy evaluation of its DAG; strategies of
random legal schedules, and larger DAGs (16-lane channel vectors, vector tails, packed
weights) with schedules built around a vector register tile for the compiled test."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from hypothesis import strategies as st

from ember import te
from ember.graph import GraphBuilder, Value
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.passes import fuse
from ember.graph.passes.pack_weights import pack_weights
from ember.loop.interpret import run_func
from ember.loop.ir import Allocate, For, ForKind, IfThenElse, PrimFunc, Stmt, walk_stmts
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
from ember.schedule.state import IteratorKind
from ember.target import Target
from ember.te.evaluate import evaluate_dag
from ember.topi import group_to_dag

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


# pack_weights' blocks for 16-lane (AVX-512 float32) vectors, whatever the test machine.
PACKING_TARGET = Target("llvm -mcpu=skylake-avx512")


def packed_conv2d_dag(h: int, w: int, c: int, k: int) -> te.ComputeDAG:
    """An NHWC 3x3 conv (+ bias + ReLU) as ember.build compiles it: its HWIO weight
    packed by pack_weights into conv_pack's [k/16, 3, 3, c, 16], the fused group's DAG."""
    builder = GraphBuilder()
    rng = np.random.default_rng(0)
    data = builder.input("data", (1, h, w, c))
    weight = builder.param("weight", rng.standard_normal((3, 3, c, k)).astype("float32"))
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
    return _packed_group_dag(builder, builder.add("conv", [data, weight], attrs), k, "conv_pack")


def packed_dense_dag(m: int, n: int, k: int) -> te.ComputeDAG:
    """dense (+ bias + ReLU) with its [n, k] weight packed into dense_pack's
    [n/16, k, 16], as ember.build compiles it."""
    builder = GraphBuilder()
    rng = np.random.default_rng(0)
    data = builder.input("data", (m, k))
    weight = builder.param("weight", rng.standard_normal((n, k)).astype("float32"))
    return _packed_group_dag(builder, builder.add("dense", [data, weight]), n, "dense_pack")


def _packed_group_dag(
    builder: GraphBuilder, product: Value, channels: int, op: str
) -> te.ComputeDAG:
    bias = builder.param("bias", np.linspace(-1, 1, channels, dtype="float32"))
    graph, params = builder.build([builder.add("relu", [builder.add("add", [product, bias])])])
    graph, params = pack_weights(graph, params, PACKING_TARGET)
    (group,) = fuse(graph, params).groups
    assert group.nodes[0].op == op, group.nodes[0].op  # the packed op, not the original
    return group_to_dag(group)[0]


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


# Split factors of random steps on PROPERTY_DAGS' small extents.
SMALL_FACTORS = st.integers(1, 4)


@st.composite
def random_step(
    draw: st.DrawFn, state: State, factors: st.SearchStrategy[int] = SMALL_FACTORS
) -> Step:
    """One step with random (maybe illegal) arguments for a random compute stage."""
    stage_id = draw(
        st.sampled_from([i for i, s in enumerate(state.stages) if not s.is_placeholder])
    )
    count = max(len(state.stages[stage_id].iters), 1)
    iterator = st.integers(0, count - 1)
    kinds = ["SP", "SP", "RE", "FU", "AN", "PR", "CA", "CA", "CI", "CR", "CHR", "RF"]
    kind = draw(st.sampled_from(kinds))
    if kind == "SP":
        split = draw(st.lists(factors, min_size=1, max_size=2))
        return SplitStep(stage_id, draw(iterator), tuple(split))
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


# -- register tiles of whole vectors, vector tails, packed weights ---------------------

# Larger than PROPERTY_DAGS (each is compiled once an example, so kept small all the
# same): 16-lane (AVX-512 float32) vectors of output channels, channel counts that leave
# a tail after the last whole vector, and weights packed as ember.build packs them.
WIDE_PROPERTY_DAGS: dict[str, Callable[[], te.ComputeDAG]] = {
    "conv2d_k32": lambda: conv2d_dag(h=3, w=4, c=8, k=32),  # 2 vectors of 16
    "conv2d_k20": lambda: conv2d_dag(h=3, w=3, c=4, k=20),  # 1 vector and a tail of 4
    "dense_n36": lambda: dense_dag(m=4, n=36, k=16),  # 2 vectors and a tail of 4
    "conv_pack_k48": lambda: packed_conv2d_dag(h=3, w=4, c=8, k=48),  # 3 blocks of 16
    "dense_pack_n32": lambda: packed_dense_dag(m=4, n=32, k=24),  # 2 blocks of 16
}
# Split factors of the random steps that follow the tile: lanes and tails among them.
WIDE_FACTORS = st.sampled_from([1, 2, 3, 4, 5, 8, 16])


@st.composite
def random_tiled_schedule(draw: st.DrawFn, dag: te.ComputeDAG, lanes: int = 16) -> State:
    """A random schedule around a register tile, as the search builds them: maybe a
    cache_write of the reduction first; on a random compute stage, `vector_tile` (its
    innermost spatial axis split by `lanes`, a guarded tail where they do not divide
    it, vectorized; maybe unrolled rows and vectors around it); then random steps with
    split factors up to 16 (attaching, splitting, fusing the tile)."""
    state = State.initial(dag)
    reductions = [
        i for i, s in enumerate(state.stages) if not s.is_placeholder and s.compute_op.reduce_axes
    ]
    if reductions and draw(st.booleans()):
        state = CacheWriteStep(reductions[-1]).apply(state)
    stages = [i for i, s in enumerate(state.stages) if not s.is_placeholder and s.iters]
    stage_id, rows = draw(st.sampled_from(stages)), draw(st.sampled_from([1, 2, 3, 4]))
    with contextlib.suppress(ScheduleError):
        state = vector_tile(state, stage_id, lanes, rows, unroll_vectors=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 6))):
        step = draw(random_step(state, WIDE_FACTORS))
        try:
            state = step.apply(state)
        except ScheduleError:
            continue
    return state


def vector_tile(
    state: State, stage_id: int, lanes: int, rows: int, unroll_vectors: bool = False
) -> State:
    """Stage `stage_id` with its innermost spatial iterator split by `lanes` and the
    inner part vectorized, innermost; with `rows` > 1 the spatial iterator before it
    split by `rows` and the inner part unrolled, just outside the vector loop; with
    `unroll_vectors` the loop over the vectors unrolled outside those (where `lanes`
    leave a tail, the whole vectors' copies lose the guard and the last keeps it)."""
    iters = state.stages[stage_id].iters
    spatial = [k for k, it in enumerate(iters) if it.kind is IteratorKind.SPATIAL and it.extent > 1]
    if not spatial:
        raise ScheduleError("no spatial iterator to vectorize")
    vector_axis = spatial[-1]
    inner: list[int] = []
    if rows > 1 and len(spatial) > 1:
        state = SplitStep(stage_id, spatial[-2], (rows,)).apply(state)
        inner.append(spatial[-2] + 1)
        vector_axis += 1
    state = SplitStep(stage_id, vector_axis, (lanes,)).apply(state)
    inner.append(vector_axis + 1)
    if unroll_vectors:
        inner.insert(0, vector_axis)
    count = len(state.stages[stage_id].iters)
    order = [k for k in range(count) if k not in inner] + inner
    state = ReorderStep(stage_id, tuple(order)).apply(state)
    state = AnnotationStep(stage_id, count - 1, Annotation.VECTORIZE).apply(state)
    for position in range(count - len(inner), count - 1):
        state = AnnotationStep(stage_id, position, Annotation.UNROLL).apply(state)
    return state


def has_guarded_vector_loop(func: PrimFunc) -> bool:
    """Whether a vectorized loop of `func` holds a guard (a split that leaves a tail)."""
    return any(
        isinstance(inner, IfThenElse)
        for loop in loops(func)
        if loop.kind is ForKind.VECTORIZED
        for inner in stmts(loop.body)
    )


def has_register_tile(func: PrimFunc) -> bool:
    """Whether an unrolled loop of `func` holds a vectorized one (copies of a vector of
    accumulators, or of stores)."""
    return any(
        isinstance(inner, For) and inner.kind is ForKind.VECTORIZED
        for loop in loops(func)
        if loop.kind is ForKind.UNROLLED
        for inner in stmts(loop.body)
    )
