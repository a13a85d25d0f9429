"""Lowering States to loop IR: every schedule computes what the DAG declares.

Each lowered kernel passes `verify`, runs in the loop-IR interpreter (bounds-checked,
allocations start as NaN) and is compared with the NumPy evaluation of the DAG. A
property test applies random legal step sequences to conv2d, dense, depthwise conv and
a reduction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from schedule_cases import (
    PROPERTY_DAGS,
    allocations,
    apply,
    check,
    conv2d_dag,
    dense_dag,
    depthwise_dag,
    loops,
    max_dag,
    random_inputs,
    random_schedule,
    run_lowered,
    softmax_dag,
    stmts,
)

from ember import te
from ember.loop.ir import For, ForKind, IfThenElse, Seq, Store
from ember.loop.verify import verify
from ember.schedule import (
    Annotation,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    Location,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    ScheduleError,
    SplitStep,
    State,
    infer_bound,
    lower,
)
from ember.te.evaluate import evaluate_dag

# -- unscheduled and simple schedules --------------------------------------------------

ALL_DAGS: dict[str, Callable[[], te.ComputeDAG]] = {
    "conv2d": conv2d_dag,
    "dense": dense_dag,
    "depthwise": depthwise_dag,
    "max": max_dag,
    "softmax": softmax_dag,
    "max_int32": lambda: max_dag(dtype="int32"),
}


@pytest.mark.parametrize("workload", sorted(ALL_DAGS))
def test_unscheduled_state_matches_numpy(workload: str) -> None:
    check(State.initial(ALL_DAGS[workload]()))


def test_arguments_are_inputs_then_outputs_with_unique_c_names() -> None:
    state = State.initial(conv2d_dag())
    func = lower(state, "fused_conv")
    assert func.name == "fused_conv"
    assert [b.name for b in func.args] == ["placeholder", "placeholder_1", "T_relu"]
    assert [b.shape for b in func.args] == [(1, 5, 5, 3), (3, 3, 3, 4), (1, 5, 5, 4)]
    assert all(b.scope == "global" for b in func.args)
    # Intermediates get global allocations around the whole body.
    assert {name: a.buffer.shape for name, a in allocations(func).items()} == {
        "pad_temp": (1, 7, 7, 3),
        "conv2d_nhwc": (1, 5, 5, 4),
    }


def test_dotted_names_are_sanitised_and_cannot_collide() -> None:
    state = State.initial(conv2d_dag())
    state = CacheWriteStep(state.stage_index("conv2d_nhwc")).apply(state)
    conv = state.stage_index("conv2d_nhwc")
    state = apply(state, SplitStep(conv, 3, (2,)), FuseStep(conv, (0, 1)))
    func = check(state)
    names = [*allocations(func), *(loop.var.name for loop in loops(func))]
    assert "conv2d_nhwc_local" in names and "nn_yy" in names and "ff_1" in names
    assert all(name.isidentifier() for name in names)
    assert len(names) == len(set(names))


def test_inlined_pad_has_no_buffer_and_reads_the_input() -> None:
    state = State.initial(conv2d_dag())
    state = ComputeInlineStep(state.stage_index("pad_temp")).apply(state)
    func = check(state)
    assert "pad_temp" not in allocations(func)


def test_splits_with_tails_are_guarded() -> None:
    state = State.initial(dense_dag(m=5, n=6, k=7))
    dense = state.stage_index("T_dense")
    # i: 5 -> 3 x 2 (tail); j: 6 -> 1 x 4 x 2 (tail); k: 7 -> 3 x 3 (tail)
    state = apply(state, SplitStep(dense, 0, (2,)), SplitStep(dense, 2, (4, 2)))
    state = SplitStep(dense, 5, (3,)).apply(state)
    func = check(state)
    guards = [s for s in stmts(func.body) if isinstance(s, IfThenElse)]
    assert guards, "tails need guards"


def test_guard_of_a_spatial_tail_sits_outside_the_reduction() -> None:
    state = State.initial(dense_dag(m=5))
    dense = state.stage_index("T_dense")
    state = SplitStep(dense, 0, (2,)).apply(state)  # i.0, i.1, j, k: guard needs i.0 and i.1
    func = check(state)
    guard = next(s for s in stmts(func.body) if isinstance(s, IfThenElse))
    inside = [s.var.name for s in stmts(guard.then_body) if isinstance(s, For)]
    assert inside == ["j", "k"]


def test_exact_splits_have_no_guards() -> None:
    state = State.initial(dense_dag(m=4, n=6, k=8))
    dense = state.stage_index("T_dense")
    state = apply(state, SplitStep(dense, 0, (2,)), SplitStep(dense, 2, (3,)))
    state = SplitStep(dense, 4, (2, 2)).apply(state)
    func = check(state)
    assert not [s for s in stmts(func.body) if isinstance(s, IfThenElse)]


def test_fuse_and_reorder_with_reduce_axes_outermost() -> None:
    state = State.initial(conv2d_dag())
    conv = state.stage_index("conv2d_nhwc")
    # nn yy xx ff ry rx rc -> ry rc yy xx rx nn ff, then fuse (ry, rc) into a reduce loop
    state = apply(state, ReorderStep(conv, (4, 6, 1, 2, 5, 0, 3)), FuseStep(conv, (0, 1)))
    func = check(state)
    # The accumulator is initialised over every spatial element before the reduction.
    first = next(s for s in loops(func) if s.var.name == "ry_rc")
    assert first.extent == te.const(9, "int64")


def test_fuse_of_spatial_and_reduce_iterators() -> None:
    state = State.initial(dense_dag(m=3, n=4, k=5))
    dense = state.stage_index("T_dense")
    # i j k -> i (j@k) mixed; then split the mixed iterator with a tail.
    state = apply(state, FuseStep(dense, (1, 2)), SplitStep(dense, 1, (3,)))
    check(state)


def test_reduce_axis_between_spatial_axes() -> None:
    state = State.initial(max_dag())
    stage = state.stage_index("T_max")
    state = apply(state, SplitStep(stage, 0, (2,)), ReorderStep(stage, (0, 2, 1, 3)))
    check(state)


def test_zero_extent_axes_run_no_iterations() -> None:
    # A loop of extent 0 must not become "the loop of extent 1 left out": that reads
    # and writes element 0 of an empty buffer (and skips the reduction's identity).
    empty_reduction = max_dag(rows=3, cols=0, depth=2)
    check(State.initial(empty_reduction))
    data = te.placeholder((0, 4), name="data")
    out = te.compute((0, 4), lambda i, j: data[i, j] + 1.0, name="T_add")
    func = check(State.initial(te.ComputeDAG([out])))
    assert any(isinstance(s, For) and s.extent == te.const(0, "int64") for s in stmts(func.body))


def test_annotations_become_loop_kinds_and_keep_semantics() -> None:
    state = State.initial(conv2d_dag(k=8))
    conv = state.stage_index("conv2d_nhwc")
    state = apply(
        state,
        SplitStep(conv, 3, (4,)),
        FuseStep(conv, (0, 1)),
        ReorderStep(conv, (0, 1, 2, 4, 5, 6, 3)),  # nn@yy xx ff.0 ry rx rc ff.1
        AnnotationStep(conv, 0, Annotation.PARALLEL),
        AnnotationStep(conv, 6, Annotation.VECTORIZE),
        AnnotationStep(conv, 3, Annotation.UNROLL),
        PragmaStep(conv, 0, 16),
    )
    func = check(state)
    kinds = {loop.var.name: (loop.kind, loop.unroll_max_step) for loop in loops(func)}
    assert kinds["nn_yy"] == (ForKind.PARALLEL, 16)
    assert kinds["ff_1"] == (ForKind.VECTORIZED, 0)
    assert kinds["ry"] == (ForKind.UNROLLED, 0)
    # The accumulator initialisation keeps the vectorized loop.
    assert kinds["ff_1_init"] == (ForKind.VECTORIZED, 0)


def test_softmax_multi_stage_with_inlined_exp() -> None:
    state = State.initial(softmax_dag())
    state = ComputeInlineStep(state.stage_index("T_exp")).apply(state)
    out = state.stage_index("T_softmax")
    state = apply(state, SplitStep(out, 1, (3,)), AnnotationStep(out, 2, Annotation.VECTORIZE))
    check(state)


# -- compute_at ------------------------------------------------------------------------


@pytest.mark.parametrize("at", [0, 1, 2, 3, 4, 5, 6])
def test_pad_computed_at_each_conv_loop(at: int) -> None:
    state = State.initial(conv2d_dag())
    pad, conv = state.stage_index("pad_temp"), state.stage_index("conv2d_nhwc")
    state = ComputeAtStep(pad, conv, at).apply(state)
    func = check(state)
    shape = allocations(func)["pad_temp"].buffer.shape
    # Under yy (at=1) a conv row needs 3 padded rows; under xx, a 3 x 3 window.
    expected = {0: (1, 7, 7, 3), 1: (1, 3, 7, 3), 2: (1, 3, 3, 3), 3: (1, 3, 3, 3)}
    expected |= {4: (1, 1, 3, 3), 5: (1, 1, 1, 3), 6: (1, 1, 1, 1)}
    assert shape == expected[at]


def test_pad_computed_at_a_split_tiled_conv_with_tails() -> None:
    state = State.initial(conv2d_dag(h=5, w=5))
    pad, conv = state.stage_index("pad_temp"), state.stage_index("conv2d_nhwc")
    state = apply(
        state,
        SplitStep(conv, 1, (2,)),  # yy: 5 -> 3 x 2, a tail row
        SplitStep(conv, 3, (3,)),  # xx: 5 -> 2 x 3, a tail column
        ReorderStep(conv, (0, 1, 3, 2, 4, 5, 6, 7, 8)),
        SplitStep(pad, 3, (2,)),  # the attached stage's own split is re-based
    )
    state = ComputeAtStep(pad, conv, 2).apply(state)
    func = check(state)
    # (2 + 2) rows x (3 + 2) columns; the region past the edge is guarded, not read.
    assert allocations(func)["pad_temp"].buffer.shape == (1, 4, 5, 3)


def test_nested_compute_at_pad_in_local_accumulator_in_conv() -> None:
    state = State.initial(conv2d_dag(k=8))
    state = CacheWriteStep(state.stage_index("conv2d_nhwc")).apply(state)
    pad, local = state.stage_index("pad_temp"), state.stage_index("conv2d_nhwc.local")
    conv = state.stage_index("conv2d_nhwc")
    state = apply(state, SplitStep(conv, 3, (4,)), ComputeAtStep(local, conv, 3))
    state = ComputeAtStep(pad, local, 4).apply(state)  # inside local's ry loop
    func = check(state)
    assert allocations(func)["conv2d_nhwc_local"].buffer.shape == (1, 1, 1, 4)
    assert allocations(func)["pad_temp"].buffer.shape == (1, 1, 3, 3)


def test_register_tile_from_cache_write_and_compute_at() -> None:
    """DESIGN.md's micro-kernel shape: conv.local computed at conv's ko, a 4 x 8 tile of
    accumulators with the reduction loops around the unrolled/vectorized block."""
    state = State.initial(conv2d_dag(h=6, w=8, c=3, k=16))
    state = ComputeInlineStep(state.stage_index("pad_temp")).apply(state)
    state = CacheWriteStep(state.stage_index("conv2d_nhwc")).apply(state)
    local, conv = state.stage_index("conv2d_nhwc.local"), state.stage_index("conv2d_nhwc")
    # conv: nn yy xx.0 xx.1(4) ff.0 ff.1(2) ff.2(4) -> nn yy xx.0 ff.0 xx.1 ff.1 ff.2
    state = apply(
        state,
        SplitStep(conv, 2, (4,)),
        SplitStep(conv, 4, (2, 4)),
        ReorderStep(conv, (0, 1, 2, 4, 3, 5, 6)),
        FuseStep(conv, (0, 1)),
        AnnotationStep(conv, 0, Annotation.PARALLEL),
        # local: same tiling, reduce loops between the tile loops and the block
        SplitStep(local, 2, (4,)),
        SplitStep(local, 4, (2, 4)),
        ReorderStep(local, (0, 1, 2, 4, 7, 8, 9, 3, 5, 6)),
        AnnotationStep(local, 7, Annotation.UNROLL),
        AnnotationStep(local, 9, Annotation.VECTORIZE),
        ComputeAtStep(local, conv, 2),
    )
    func = check(state)
    tile = allocations(func)["conv2d_nhwc_local"]
    assert tile.buffer.shape == (1, 1, 4, 8) and tile.buffer.scope == "local"
    inside = [s for s in stmts(tile.body) if isinstance(s, For)]
    # The tile's outer loops have extent 1 and vanish: the init block, the reduction
    # around the unrolled and vectorized block, then the copy-out.
    names = [loop.var.name for loop in inside]
    assert names == [
        *("xx_1_1_init", "ff_1_1_init", "ff_2_1_init"),
        *("ry", "rx", "rc", "xx_1_1", "ff_1_1", "ff_2_1"),
        *("xx_1", "ff_1", "ff_2"),
    ]
    kinds = [loop.kind for loop in inside[:9]]
    unrolled, vectorized = ForKind.UNROLLED, ForKind.VECTORIZED
    assert kinds == [
        unrolled,
        ForKind.SERIAL,
        vectorized,
        *[ForKind.SERIAL] * 3,
        unrolled,
        ForKind.SERIAL,
        vectorized,
    ]


def test_local_accumulator_at_the_epilogue_with_the_copy_inlined() -> None:
    """The DESIGN.md form: conv.local at relu's tile loop, the copy stage inlined, so the
    epilogue stores max(accumulator, 0) straight from the register tile."""
    state = State.initial(conv2d_dag(h=6, w=8, c=3, k=16))
    state = ComputeInlineStep(state.stage_index("pad_temp")).apply(state)
    state = CacheWriteStep(state.stage_index("conv2d_nhwc")).apply(state)
    local, conv = state.stage_index("conv2d_nhwc.local"), state.stage_index("conv2d_nhwc")
    relu = state.stage_index("T_relu")
    state = apply(
        state,
        ComputeInlineStep(conv),
        SplitStep(relu, 2, (4,)),
        SplitStep(relu, 4, (2, 4)),
        ReorderStep(relu, (0, 1, 2, 4, 3, 5, 6)),
        FuseStep(relu, (0, 1)),
        AnnotationStep(relu, 0, Annotation.PARALLEL),
        AnnotationStep(relu, 5, Annotation.VECTORIZE),
        ComputeAtStep(local, relu, 2),
    )
    func = check(state)
    assert list(allocations(func)) == ["conv2d_nhwc_local"]
    assert allocations(func)["conv2d_nhwc_local"].buffer.shape == (1, 1, 4, 8)
    inferred = infer_bound(state).stages[local]
    assert [it.extent for it in inferred.iters] == [1, 1, 4, 8, 3, 3, 3]
    assert [it.extent for it in state.stages[local].iters] == [1, 6, 8, 16, 3, 3, 3]


def test_lowering_rejects_an_attached_stage_with_another_reader() -> None:
    # Steps refuse to build this; lowering still checks states built by hand.
    state = State.initial(softmax_dag())
    exp, total = state.stage_index("T_exp"), state.stage_index("T_sum")
    attached = replace(
        state.stages[exp], location=Location.ATTACHED, attach_stage=total, attach_iter="i"
    )
    with pytest.raises(ScheduleError, match="'T_exp' is computed at 'T_sum' but also read by"):
        lower(state.with_stage(exp, attached))


def test_compute_at_with_fused_target_loops() -> None:
    state = State.initial(softmax_dag(rows=4, cols=6))
    top, exp = state.stage_index("T_max"), state.stage_index("T_exp")
    total, out = state.stage_index("T_sum"), state.stage_index("T_softmax")
    state = apply(state, ComputeInlineStep(exp), FuseStep(out, (0, 1)))
    state = apply(state, ComputeAtStep(total, out, 0))
    # T_max is read by T_sum, computed at the same loop, and by T_softmax through
    # the inlined exp: it may be computed there too, before T_sum.
    state = apply(state, ComputeAtStep(top, out, 0))
    func = check(state)
    assert allocations(func)["T_sum"].buffer.shape == (1,)
    assert allocations(func)["T_max"].buffer.shape == (1,)


def test_stage_read_by_its_target_and_a_stage_at_the_same_loop() -> None:
    # One pass per row: exp (read by the sum and the division), the sum and the max
    # at the division's row loop; exp's buffer is one row, what both readers read.
    state = State.initial(softmax_dag(rows=4, cols=6))
    top, exp = state.stage_index("T_max"), state.stage_index("T_exp")
    total, out = state.stage_index("T_sum"), state.stage_index("T_softmax")
    state = apply(state, SplitStep(total, 1, (4,)))  # the sum reads past its row in tails
    state = apply(state, ComputeAtStep(total, out, 0), ComputeAtStep(exp, out, 0))
    state = apply(state, ComputeAtStep(top, out, 0))
    func = check(state)
    assert {name: a.buffer.shape for name, a in allocations(func).items()} == {
        "T_max": (1,),
        "T_exp": (1, 6),
        "T_sum": (1,),
    }
    assert [loop.kind for loop in loops(func)][:1] == [ForKind.SERIAL]


def test_stage_read_at_another_loop_of_the_target_is_rejected() -> None:
    state = State.initial(softmax_dag(rows=4, cols=6))
    exp, total = state.stage_index("T_exp"), state.stage_index("T_sum")
    out = state.stage_index("T_softmax")
    state = apply(state, ComputeAtStep(total, out, 0))
    with pytest.raises(ScheduleError, match="'T_exp' is also read by T_sum"):
        ComputeAtStep(exp, out, 1).apply(state)


def test_attached_stage_with_a_reduction_recomputes_per_tile() -> None:
    state = State.initial(dense_dag(m=4, n=6))
    dense, add = state.stage_index("T_dense"), state.stage_index("T_add")
    state = apply(state, SplitStep(add, 1, (3,)), ComputeAtStep(dense, add, 1))
    func = check(state)
    assert allocations(func)["T_dense"].buffer.shape == (1, 3)


# -- cache_read and rfactor ------------------------------------------------------------


def test_cache_read_copy_computed_at_the_reader() -> None:
    state = State.initial(dense_dag())
    dense = state.stage_index("T_dense")
    weight = state.stage_index("weight")
    state = CacheReadStep(weight, "local", (dense,)).apply(state)
    dense = state.stage_index("T_dense")
    cache = state.stage_index("weight.local")
    state = apply(state, SplitStep(dense, 1, (2,)), ComputeAtStep(cache, dense, 1))
    func = check(state)
    buffer = allocations(func)["weight_local"].buffer
    assert buffer.shape == (2, 7) and buffer.scope == "local"


def test_cache_read_at_root() -> None:
    state = State.initial(conv2d_dag())
    data = state.stage_index("pad_temp")
    state = CacheReadStep(data, "global", (state.stage_index("conv2d_nhwc"),)).apply(state)
    check(state)


@pytest.mark.parametrize("factor_position", [0, 1, 2])
def test_rfactor_of_a_split_reduce_axis(factor_position: int) -> None:
    state = State.initial(dense_dag(k=7))
    dense = state.stage_index("T_dense")
    state = apply(state, SplitStep(dense, 2, (3,)), RfactorStep(dense, 3, factor_position))
    rf = state.stage_index("T_dense.rf")
    assert state.stages[rf].tensor.shape[factor_position] == 3
    state = AnnotationStep(rf, factor_position, Annotation.VECTORIZE).apply(state)
    check(state)


def test_rfactor_of_the_outer_split_part_of_a_max_reduction() -> None:
    state = State.initial(max_dag(cols=5, depth=3))
    stage = state.stage_index("T_max")
    state = apply(state, SplitStep(stage, 1, (2,)), RfactorStep(stage, 1, 1))
    final = state.stage_index("T_max")
    state = apply(state, SplitStep(final, 1, (2,)))  # the final reduction can be split too
    check(state)


def test_rfactor_of_an_unsplit_axis_and_compute_at() -> None:
    state = State.initial(max_dag())
    stage = state.stage_index("T_max")
    state = RfactorStep(stage, 2, 0).apply(state)  # rd becomes spatial; rc still reduces
    rf, final = state.stage_index("T_max.rf"), state.stage_index("T_max")
    state = ComputeAtStep(rf, final, 0).apply(state)
    func = check(state)
    assert allocations(func)["T_max_rf"].buffer.shape == (3, 1)


# -- property: any legal schedule computes the same result -----------------------------


@pytest.mark.parametrize("workload", sorted(PROPERTY_DAGS))
def test_random_legal_schedules_compute_the_same_result(workload: str) -> None:
    dag = PROPERTY_DAGS[workload]()
    inputs = random_inputs(dag)
    expected = evaluate_dag(dag, inputs)

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(random_schedule(dag))
    def property_holds(state: State) -> None:
        note(str([step.to_json() for step in state.steps]))  # type: ignore[attr-defined]
        func = lower(state)
        verify(func)
        got = run_lowered(func, dag, inputs)
        for value, want in zip(got, expected, strict=True):
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5, err_msg=str(func))

    property_holds()


def test_leaf_store_writes_every_output_element_once_per_reduction_step() -> None:
    # The init of a reduction covers exactly the spatial iterations inside its point:
    # with all reduce loops outermost, the init is one full nest before them.
    state = State.initial(dense_dag(m=2, n=3, k=4))
    dense = state.stage_index("T_dense")
    state = ReorderStep(dense, (2, 0, 1)).apply(state)
    func = check(state)
    dense_nest = next(
        s
        for s in stmts(func.body)
        if isinstance(s, Seq)
        and any(isinstance(c, For) and c.var.name == "i_init" for c in s.stmts)
    )
    init, update = dense_nest.stmts[0], dense_nest.stmts[1]
    assert isinstance(init, For) and isinstance(update, For) and update.var.name == "k"
    assert any(isinstance(s, Store) for s in stmts(init))
