"""Transform steps: what each does to a State, the errors a search or user sees for an
illegal step, JSON round trip, and replay rebuilding a state exactly."""

from __future__ import annotations

import json
import re

import pytest

from ember import te
from ember.schedule import (
    Annotation,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
    FuseStep,
    IteratorKind,
    Location,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    ScheduleError,
    SplitStep,
    State,
    Step,
    replay,
    step_from_json,
)
from ember.schedule.state import FuseRelation, SplitRelation
from ember.schedule.steps import STEP_TYPES
from ember.te.printer import format_operation


def conv_dag() -> te.ComputeDAG:
    """placeholder, pad_temp, placeholder, conv2d_nhwc, T_relu (stages 0..4)."""
    data = te.placeholder((1, 6, 6, 4))
    kernel = te.placeholder((3, 3, 4, 8))
    pad = te.compute(
        (1, 8, 8, 4),
        lambda i0, i1, i2, i3: te.select(
            te.logical_and(te.logical_and(i1 >= 1, i1 < 7), te.logical_and(i2 >= 1, i2 < 7)),
            data[i0, i1 - 1, i2 - 1, i3],
            0.0,
        ),
        name="pad_temp",
    )
    ry, rx, rc = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx"), te.reduce_axis(4, "rc")
    conv = te.compute(
        (1, 6, 6, 8),
        lambda nn, yy, xx, ff: te.reduce_sum(
            pad[nn, yy + ry, xx + rx, rc] * kernel[ry, rx, rc, ff], [ry, rx, rc]
        ),
        name="conv2d_nhwc",
    )
    relu = te.compute(
        conv.shape, lambda a0, a1, a2, a3: te.maximum(conv[a0, a1, a2, a3], 0.0), name="T_relu"
    )
    return te.ComputeDAG([relu])


PAD, CONV, RELU = 1, 3, 4


def apply(state: State, *steps: Step) -> State:
    for step in steps:
        state = step.apply(state)
    return state


def initial() -> State:
    return State.initial(conv_dag())


# -- effects -----------------------------------------------------------------------------


def test_split_adds_digits_with_a_tail_outer_extent() -> None:
    state = SplitStep(CONV, 2, (4,)).apply(initial())  # xx: 6 -> 2 x 4
    stage = state.stages[CONV]
    assert [(it.name, it.extent) for it in stage.iters[2:4]] == [("xx.0", 2), ("xx.1", 4)]
    assert stage.relations == (SplitRelation("xx", ("xx.0", "xx.1"), (2, 4), 6),)
    assert state.steps == (SplitStep(CONV, 2, (4,)),)


def test_fuse_reorder_annotate_and_pragma() -> None:
    state = apply(
        initial(),
        FuseStep(CONV, (0, 1)),
        ReorderStep(CONV, (0, 1, 3, 4, 5, 2)),
        AnnotationStep(CONV, 0, Annotation.PARALLEL),
        PragmaStep(CONV, 0, 64),
    )
    stage = state.stages[CONV]
    assert [it.name for it in stage.iters] == ["nn@yy", "xx", "ry", "rx", "rc", "ff"]
    assert stage.iters[0].extent == 6 and stage.iters[0].annotation is Annotation.PARALLEL
    assert stage.relations == (FuseRelation(("nn", "yy"), (1, 6), "nn@yy"),)
    assert stage.unroll_max_step == (("nn@yy", 64),)


def test_fusing_spatial_and_reduce_iterators_makes_a_mixed_one() -> None:
    state = FuseStep(CONV, (3, 4)).apply(initial())
    assert state.stages[CONV].iters[3].kind is IteratorKind.MIXED


def test_cache_write_inserts_the_local_stage_and_shifts_attachments() -> None:
    state = apply(initial(), CacheWriteStep(RELU))
    assert [s.name for s in state.stages][3:] == ["conv2d_nhwc", "T_relu.local", "T_relu"]
    assert state.stages[4].scope == "local" and state.stages[4].location is Location.ROOT
    assert state.stages[5].tensor is state.dag.outputs[0]  # readers keep their tensor
    # pad is attached at conv (#3); cache_write of pad inserts #1, so conv moves to #4.
    state = apply(initial(), ComputeAtStep(PAD, CONV, 2), CacheWriteStep(PAD))
    assert [s.name for s in state.stages][1:3] == ["pad_temp.local", "pad_temp"]
    assert state.stages[2].location is Location.ATTACHED and state.stages[2].attach_stage == 4
    with pytest.raises(ScheduleError, match="apply cache_write before compute_at"):
        CacheWriteStep(4).apply(state)


def test_cache_read_redirects_the_readers() -> None:
    state = CacheReadStep(2, "local", (CONV,)).apply(initial())
    cache = state.stages[3]
    assert cache.name == "placeholder.local" and cache.scope == "local"
    conv = state.stages[4].compute_op
    assert any(t is cache.tensor for t in conv.input_tensors)


def test_rfactor_builds_partial_and_final_reductions() -> None:
    state = apply(initial(), SplitStep(CONV, 6, (2,)), RfactorStep(CONV, 7, 4))
    rf, final = state.stages[CONV], state.stages[CONV + 1]
    assert rf.name == "conv2d_nhwc.rf" and rf.tensor.shape == (1, 6, 6, 8, 2)
    assert format_operation(rf.compute_op) == (
        "conv2d_nhwc.rf(nn, yy, xx, ff, rc.1) += (pad_temp[nn, (yy + ry), (xx + rx), "
        "((rc.0*2) + rc.1)]*placeholder[ry, rx, ((rc.0*2) + rc.1), ff])"
    )
    assert format_operation(final.compute_op) == (
        "conv2d_nhwc(nn, yy, xx, ff) += conv2d_nhwc.rf[nn, yy, xx, ff, rc.1]"
    )
    assert final.tensor is state.stages[RELU + 1].compute_op.input_tensors[0]
    assert [it.kind for it in rf.iters].count(IteratorKind.REDUCE) == 3  # ry rx rc.0


def test_rfactor_with_a_tail_guards_the_source() -> None:
    state = apply(initial(), SplitStep(CONV, 6, (3,)), RfactorStep(CONV, 6, 0))
    body = format_operation(state.stages[CONV].compute_op)
    assert body.startswith("conv2d_nhwc.rf(rc.0, nn, yy, xx, ff) += tir.if_then_else(")
    assert "((rc.0*3) + rc.1) < 4" in body


# -- legality: the message says why ----------------------------------------------------

ILLEGAL: list[tuple[Step, str]] = [
    (SplitStep(9, 0, (2,)), "there is no stage #9"),
    (SplitStep(0, 0, (2,)), "'placeholder' is a placeholder and has no loops"),
    (SplitStep(CONV, 7, (2,)), "has 7 iterators; #7 does not exist"),
    (SplitStep(CONV, 0, (0,)), "split factors [0] must be positive"),
    (SplitStep(CONV, 0, ()), "split factors [] must be positive"),
    (ReorderStep(CONV, (0, 1)), "needs a permutation of 0..6"),
    (FuseStep(CONV, (0, 2)), "two or more consecutive iterators"),
    (FuseStep(CONV, (3,)), "two or more consecutive iterators"),
    (AnnotationStep(CONV, 4, Annotation.PARALLEL), "race on the accumulator"),
    (AnnotationStep(CONV, 4, Annotation.VECTORIZE), "race on the accumulator"),
    (PragmaStep(CONV, 0, -1), "auto_unroll_max_step must be >= 0"),
    (ComputeAtStep(RELU, CONV, 0), "is an output and must stay at root"),
    (ComputeAtStep(PAD, RELU, 0), "'T_relu' does not read 'pad_temp'"),
    (ComputeInlineStep(CONV), "is a reduction and cannot be inlined"),
    (ComputeInlineStep(RELU), "is an output and cannot be inlined"),
    (ComputeRootStep(0), "is a placeholder"),
    (CacheReadStep(2, "local", (RELU,)), "must be consumers of 'placeholder'"),
    (CacheReadStep(2, "local", ()), "must be consumers"),
    (RfactorStep(RELU, 0, 0), "'T_relu' is not a reduction"),
    (RfactorStep(CONV, 0, 0), "needs a reduce iterator; 'nn' is spatial"),
    (RfactorStep(CONV, 4, 5), "axis position 5 must be in 0..4"),
]


@pytest.mark.parametrize(("step", "message"), ILLEGAL, ids=lambda x: getattr(x, "kind", ""))
def test_illegal_steps_on_the_initial_state(step: Step, message: str) -> None:
    with pytest.raises(ScheduleError, match=re.escape(message)):
        step.apply(initial())


def test_illegal_steps_that_depend_on_earlier_ones() -> None:
    annotated = AnnotationStep(CONV, 3, Annotation.VECTORIZE).apply(initial())
    with pytest.raises(ScheduleError, match="cannot split annotated iterator 'ff'"):
        SplitStep(CONV, 3, (2,)).apply(annotated)
    with pytest.raises(ScheduleError, match="cannot fuse annotated iterator 'ff'"):
        FuseStep(CONV, (2, 3)).apply(annotated)
    with pytest.raises(ScheduleError, match="iterator 'ff' is already vectorize"):
        AnnotationStep(CONV, 3, Annotation.UNROLL).apply(annotated)
    with pytest.raises(ScheduleError, match="must come before its other transform steps"):
        CacheWriteStep(CONV).apply(annotated)
    with pytest.raises(ScheduleError, match="rfactor of 'conv2d_nhwc' must come before its"):
        RfactorStep(CONV, 6, 0).apply(annotated)

    attached = ComputeAtStep(PAD, CONV, 2).apply(initial())
    with pytest.raises(ScheduleError, match=r"cannot split 'xx': stages are computed at it"):
        SplitStep(CONV, 2, (2,)).apply(attached)
    with pytest.raises(ScheduleError, match="cannot fuse 'xx': stages are computed at it"):
        FuseStep(CONV, (1, 2)).apply(attached)
    target = apply(initial(), CacheWriteStep(RELU), ComputeAtStep(CONV, 4, 1))
    with pytest.raises(ScheduleError, match=r"stages are computed inside 'T_relu\.local'"):
        ComputeInlineStep(4).apply(target)
    with pytest.raises(ScheduleError, match="stages are computed at 'conv2d_nhwc'; rfactor"):
        RfactorStep(CONV, 6, 0).apply(attached)
    with pytest.raises(ScheduleError, match="'pad_temp' is computed inside another stage's"):
        CacheReadStep(PAD, "local", (CONV,)).apply(attached)
    with pytest.raises(ScheduleError, match="only root stages get parallel loops"):
        AnnotationStep(PAD, 0, Annotation.PARALLEL).apply(attached)

    parallel = AnnotationStep(PAD, 1, Annotation.PARALLEL).apply(initial())
    with pytest.raises(ScheduleError, match="has a parallel loop and must stay at root"):
        ComputeAtStep(PAD, CONV, 0).apply(parallel)

    inlined = ComputeInlineStep(PAD).apply(initial())
    with pytest.raises(ScheduleError, match="'pad_temp' is inlined and has no loops"):
        SplitStep(PAD, 0, (2,)).apply(inlined)

    fused = apply(initial(), SplitStep(CONV, 6, (2,)), FuseStep(CONV, (0, 1)))
    with pytest.raises(ScheduleError, match="must follow at most one split"):
        RfactorStep(CONV, 6, 0).apply(fused)
    other = apply(initial(), SplitStep(CONV, 6, (2,)))
    with pytest.raises(ScheduleError, match="of the reduce axis that 'rx' comes from"):
        RfactorStep(CONV, 5, 0).apply(other)

    # A stage computed at a loop for a sibling there (a cache read at the loop the conv
    # is computed at): moving the conv out would leave the cache read's reader outside.
    siblings = apply(
        initial(),
        ComputeAtStep(CONV, 4, 1),
        CacheReadStep(PAD, "local", (CONV,)),
        ComputeAtStep(2, 5, 1),  # pad_temp.local at T_relu, beside the conv (now 4)
    )
    for move in (ComputeRootStep(4), ComputeAtStep(4, 5, 2)):
        with pytest.raises(ScheduleError, match=r"compute 'pad_temp\.local' at root first"):
            move.apply(siblings)


def test_stage_names_must_be_unique_to_be_used() -> None:
    with pytest.raises(ScheduleError, match="matches 2 stages; use the stage index"):
        initial().stage("placeholder")
    assert initial().stage_index("T_relu") == RELU


# -- records: JSON round trip and replay ---------------------------------------------------

ONE_OF_EACH: list[Step] = [
    SplitStep(3, 2, (4, 2)),
    ReorderStep(3, (1, 0, 2)),
    FuseStep(3, (0, 1, 2)),
    AnnotationStep(3, 1, Annotation.VECTORIZE),
    PragmaStep(3, 0, 512),
    ComputeAtStep(1, 3, 2),
    ComputeInlineStep(1),
    ComputeRootStep(1),
    CacheWriteStep(3, "local"),
    CacheReadStep(2, "shared", (3, 5)),
    RfactorStep(3, 7, 1),
]


def test_every_step_type_is_covered() -> None:
    assert {type(step) for step in ONE_OF_EACH} == set(STEP_TYPES.values())


@pytest.mark.parametrize("step", ONE_OF_EACH, ids=lambda s: s.kind)
def test_json_round_trip(step: Step) -> None:
    data = json.loads(json.dumps(step.to_json()))
    assert data[0] == step.kind
    assert step_from_json(data) == step


def test_json_format_is_stable() -> None:
    assert SplitStep(3, 2, (4, 2)).to_json() == ["SP", 3, 2, [4, 2]]
    assert AnnotationStep(3, 1, Annotation.PARALLEL).to_json() == ["AN", 3, 1, "parallel"]
    assert CacheReadStep(2, "local", (3,)).to_json() == ["CHR", 2, "local", [3]]
    assert RfactorStep(3, 7, 1).to_json() == ["RF", 3, 7, 1]


def test_step_from_json_rejects_unknown_and_malformed_steps() -> None:
    with pytest.raises(ScheduleError, match=r"unknown transform step \['XX'\]"):
        step_from_json(["XX", 1])
    with pytest.raises(ScheduleError, match="step SP takes 3 fields, got 2"):
        step_from_json(["SP", 1, 2])
    # What a damaged or hand-edited record may hold: a clear error, not a TypeError or
    # ValueError from deep inside (or a step that fails later, in lowering).
    with pytest.raises(ScheduleError, match="field annotation must be Annotation, got 'paralel'"):
        step_from_json(["AN", 1, 2, "paralel"])
    with pytest.raises(
        ScheduleError, match=r"field factors must be tuple\[int, ...\], got \[4.5\]"
    ):
        step_from_json(["SP", 1, 2, [4.5]])
    with pytest.raises(ScheduleError, match="field stage_id must be int, got '1'"):
        step_from_json(["CI", "1"])
    with pytest.raises(ScheduleError, match="a transform step is a list"):
        step_from_json([["SP"], 1])  # type: ignore[list-item]


def test_replay_of_saved_steps_rebuilds_the_state_exactly() -> None:
    state = apply(
        initial(),
        ComputeInlineStep(PAD),
        CacheWriteStep(CONV),
        SplitStep(CONV + 1, 2, (3,)),
        SplitStep(CONV + 1, 4, (2, 4)),
        ReorderStep(CONV + 1, (0, 1, 2, 4, 3, 5, 6)),
        FuseStep(CONV + 1, (0, 1)),
        AnnotationStep(CONV + 1, 0, Annotation.PARALLEL),
        AnnotationStep(CONV + 1, 5, Annotation.VECTORIZE),
        ComputeAtStep(CONV, CONV + 1, 2),
        PragmaStep(CONV + 1, 0, 16),
    )
    record = json.dumps([step.to_json() for step in state.steps])  # type: ignore[attr-defined]
    steps = [step_from_json(data) for data in json.loads(record)]
    again = replay(conv_dag(), steps)
    assert str(again) == str(state)
    assert again.steps == state.steps
    for old, new in zip(state.stages, again.stages, strict=True):
        assert (old.iters, old.relations, old.location) == (new.iters, new.relations, new.location)
        assert (old.attach_stage, old.attach_iter, old.scope) == (
            new.attach_stage,
            new.attach_iter,
            new.scope,
        )
    assert again.stages[CONV].location is Location.ATTACHED


def test_steps_do_not_change_the_state_they_apply_to() -> None:
    state = initial()
    SplitStep(CONV, 2, (2,)).apply(state)
    assert str(state) == str(initial()) and state.steps == ()
