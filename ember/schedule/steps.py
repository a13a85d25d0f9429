"""Transform steps: frozen dataclasses, JSON round-trip, and their effect on a State.

Every step names its stage and iterators by position in the state it applies to (what
a record stores). `step.apply(state)` checks legality first, cheaply and precisely,
raising `ScheduleError` with the reason, then returns the new state with the step
appended. `replay(dag, steps)` rebuilds a state from a saved step list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from ember.schedule.lower import reduction_identity
from ember.schedule.state import (
    Annotation,
    FuseRelation,
    Iterator,
    IteratorKind,
    Location,
    ScheduleError,
    SplitRelation,
    Stage,
    State,
    initial_stage,
)
from ember.te.dag import ComputeDAG
from ember.te.expr import Expr, Reduce, Select, TensorRead, Var
from ember.te.tensor import ComputeOp, IterKind, IterVar, Tensor, compute
from ember.te.visit import map_expr, substitute


class Step:
    """Base of transform steps. `kind` is the tag used in records."""

    kind: ClassVar[str] = ""

    def apply(self, state: State) -> State:
        raise NotImplementedError

    def to_json(self) -> list[Any]:
        values: list[Any] = [self.kind]
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            values.append(value.value if isinstance(value, Annotation) else _plain(value))
        return values


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _attached_at(state: State, stage_index: int, iterator: str) -> list[str]:
    """Names of stages computed inside `iterator` of stage `stage_index`."""
    return [
        s.name
        for s in state.stages
        if s.location is Location.ATTACHED
        and s.attach_stage == stage_index
        and s.attach_iter == iterator
    ]


def _effective_readers(state: State, index: int) -> list[int]:
    """Stages that read stage `index` once inlined stages are substituted away: an
    inlined consumer stands for its own readers."""
    found: list[int] = []
    for consumer in state.consumers(index):
        if state.stages[consumer].location is Location.INLINED:
            more = _effective_readers(state, consumer)
        else:
            more = [consumer]
        found += [i for i in more if i not in found]
    return found


def _readers_outside(state: State, readers: list[int], target: int, loop: str) -> list[int]:
    """Those of `readers` that are neither `target` nor computed at its loop `loop`
    (or inside a stage that is): where a buffer living inside that loop is out of reach."""
    return [i for i in readers if i != target and not state.attached_under(i, target, loop)]


def _require_compute(stage: Stage) -> None:
    if stage.is_placeholder:
        raise ScheduleError(f"stage {stage.name!r} is a placeholder and has no loops")


def _loop_stage(state: State, stage_id: int) -> Stage:
    stage = state.stage(stage_id)
    _require_compute(stage)
    if stage.location is Location.INLINED:
        raise ScheduleError(f"stage {stage.name!r} is inlined and has no loops of its own")
    return stage


@dataclass(frozen=True, slots=True)
class SplitStep(Step):
    """Split iterator `iter_id` into `1 + len(factors)` iterators: an outer one with
    extent ceil(extent / prod(factors)), then one per factor (outermost first)."""

    kind: ClassVar[str] = "SP"
    stage_id: int
    iter_id: int
    factors: tuple[int, ...]

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        iterator = stage.check_iter(self.iter_id)
        if not self.factors or any(f < 1 for f in self.factors):
            raise ScheduleError(f"split factors {list(self.factors)} must be positive")
        if iterator.annotation is not Annotation.NONE:
            raise ScheduleError(f"cannot split annotated iterator {iterator.name!r}")
        if _attached_at(state, self.stage_id, iterator.name):
            raise ScheduleError(
                f"cannot split {iterator.name!r}: stages are computed at it "
                f"({', '.join(_attached_at(state, self.stage_id, iterator.name))})"
            )
        outer = math.ceil(iterator.extent / math.prod(self.factors))
        extents = (outer, *self.factors)
        names = tuple(f"{iterator.name}.{k}" for k in range(len(extents)))
        new_iters = tuple(
            Iterator(n, e, iterator.kind) for n, e in zip(names, extents, strict=True)
        )
        iters = stage.iters[: self.iter_id] + new_iters + stage.iters[self.iter_id + 1 :]
        relation = SplitRelation(iterator.name, names, extents, iterator.extent)
        new_stage = replace(stage, iters=iters, relations=(*stage.relations, relation))
        return state.with_stage(self.stage_id, new_stage).with_step(self)


@dataclass(frozen=True, slots=True)
class ReorderStep(Step):
    """Reorder all iterators of a stage: `order` lists the old indices, outermost first."""

    kind: ClassVar[str] = "RE"
    stage_id: int
    order: tuple[int, ...]

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        if sorted(self.order) != list(range(len(stage.iters))):
            raise ScheduleError(
                f"reorder of stage {stage.name!r} needs a permutation of "
                f"0..{len(stage.iters) - 1}, got {list(self.order)}"
            )
        iters = tuple(stage.iters[i] for i in self.order)
        return state.with_stage(self.stage_id, replace(stage, iters=iters)).with_step(self)


@dataclass(frozen=True, slots=True)
class FuseStep(Step):
    """Fuse consecutive iterators `iter_ids` into one."""

    kind: ClassVar[str] = "FU"
    stage_id: int
    iter_ids: tuple[int, ...]

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        ids = list(self.iter_ids)
        if len(ids) < 2 or ids != list(range(ids[0], ids[0] + len(ids))):
            raise ScheduleError(f"fuse needs two or more consecutive iterators, got {ids}")
        parts = [stage.check_iter(i) for i in ids]
        for part in parts:
            if part.annotation is not Annotation.NONE:
                raise ScheduleError(f"cannot fuse annotated iterator {part.name!r}")
            if _attached_at(state, self.stage_id, part.name):
                raise ScheduleError(f"cannot fuse {part.name!r}: stages are computed at it")
        kinds = {p.kind for p in parts}
        kind = kinds.pop() if len(kinds) == 1 else IteratorKind.MIXED
        name = "@".join(p.name for p in parts)
        fused = Iterator(name, math.prod(p.extent for p in parts), kind)
        iters = (*stage.iters[: ids[0]], fused, *stage.iters[ids[-1] + 1 :])
        relation = FuseRelation(tuple(p.name for p in parts), tuple(p.extent for p in parts), name)
        new_stage = replace(stage, iters=iters, relations=(*stage.relations, relation))
        return state.with_stage(self.stage_id, new_stage).with_step(self)


@dataclass(frozen=True, slots=True)
class AnnotationStep(Step):
    """Mark an iterator parallel, vectorized or unrolled."""

    kind: ClassVar[str] = "AN"
    stage_id: int
    iter_id: int
    annotation: Annotation

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        iterator = stage.check_iter(self.iter_id)
        if iterator.annotation is not Annotation.NONE:
            raise ScheduleError(
                f"iterator {iterator.name!r} is already {iterator.annotation.value}"
            )
        if self.annotation in (Annotation.PARALLEL, Annotation.VECTORIZE) and (
            iterator.kind is not IteratorKind.SPATIAL
        ):
            raise ScheduleError(
                f"cannot {self.annotation.value} {iterator.kind.value} iterator "
                f"{iterator.name!r}: iterations would race on the accumulator"
            )
        if self.annotation is Annotation.PARALLEL and any(
            it.annotation is Annotation.PARALLEL for it in stage.iters
        ):
            raise ScheduleError(
                f"stage {stage.name!r} already has a parallel loop; nested parallel loops "
                "oversubscribe the cores (fuse the loops and parallelise the fused one)"
            )
        if self.annotation is Annotation.PARALLEL and stage.location is not Location.ROOT:
            raise ScheduleError(
                f"stage {stage.name!r} is computed inside another loop; only root stages "
                "get parallel loops (nested parallelism oversubscribes the cores)"
            )
        iters = list(stage.iters)
        iters[self.iter_id] = replace(iterator, annotation=self.annotation)
        return state.with_stage(self.stage_id, replace(stage, iters=tuple(iters))).with_step(self)


@dataclass(frozen=True, slots=True)
class PragmaStep(Step):
    """`auto_unroll_max_step`: unroll loops inside `iter_id` up to `value` iterations."""

    kind: ClassVar[str] = "PR"
    stage_id: int
    iter_id: int
    value: int

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        iterator = stage.check_iter(self.iter_id)
        if self.value < 0:
            raise ScheduleError(f"auto_unroll_max_step must be >= 0, got {self.value}")
        pragmas = (*stage.unroll_max_step, (iterator.name, self.value))
        return state.with_stage(self.stage_id, replace(stage, unroll_max_step=pragmas)).with_step(
            self
        )


@dataclass(frozen=True, slots=True)
class ComputeAtStep(Step):
    """Compute stage `stage_id` inside iterator `target_iter_id` of a consumer stage,
    for just the region that one iteration of the consumer needs. Its other readers
    must be computed at that same loop already (or inside a stage that is): its
    buffer lives inside the loop, and they read it there after it."""

    kind: ClassVar[str] = "CA"
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        target = _loop_stage(state, self.target_stage_id)
        iterator = target.check_iter(self.target_iter_id)
        if any(stage.tensor is t for t in state.dag.outputs):
            raise ScheduleError(f"stage {stage.name!r} is an output and must stay at root")
        readers = _effective_readers(state, self.stage_id)
        others = _readers_outside(state, readers, self.target_stage_id, iterator.name)
        if self.target_stage_id not in readers and len(others) == len(readers):
            raise ScheduleError(
                f"stage {target.name!r} does not read {stage.name!r}; compute_at needs a consumer"
            )
        if others:
            names = ", ".join(state.stages[i].name for i in others)
            raise ScheduleError(
                f"stage {stage.name!r} is also read by {names}; compute_at needs every reader "
                "to be the target or computed at the same loop of it, or inside such a stage "
                "(its buffer lives inside the target's loop)"
            )
        if any(it.annotation is Annotation.PARALLEL for it in stage.iters):
            raise ScheduleError(f"stage {stage.name!r} has a parallel loop and must stay at root")
        new_stage = replace(
            stage,
            location=Location.ATTACHED,
            attach_stage=self.target_stage_id,
            attach_iter=iterator.name,
        )
        moved = state.with_stage(self.stage_id, new_stage)
        _check_attached_readers(moved, self.stage_id)
        return moved.with_step(self)


@dataclass(frozen=True, slots=True)
class ComputeInlineStep(Step):
    """Substitute the stage's expression into its consumers; it gets no loops."""

    kind: ClassVar[str] = "CI"
    stage_id: int

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        if isinstance(stage.compute_op.body, Reduce):
            raise ScheduleError(f"stage {stage.name!r} is a reduction and cannot be inlined")
        if any(stage.tensor is t for t in state.dag.outputs):
            raise ScheduleError(f"stage {stage.name!r} is an output and cannot be inlined")
        if any(
            s.attach_stage == self.stage_id for s in state.stages if s.location is Location.ATTACHED
        ):
            raise ScheduleError(f"stages are computed inside {stage.name!r}; it cannot be inlined")
        if not state.consumers(self.stage_id):
            raise ScheduleError(f"stage {stage.name!r} has no consumer to be inlined into")
        new_stage = replace(stage, location=Location.INLINED, attach_stage=-1, attach_iter="")
        return state.with_stage(self.stage_id, new_stage).with_step(self)


@dataclass(frozen=True, slots=True)
class ComputeRootStep(Step):
    """Compute the stage in its own loop nest at the top level (undo compute_at)."""

    kind: ClassVar[str] = "CR"
    stage_id: int

    def apply(self, state: State) -> State:
        stage = state.stage(self.stage_id)
        _require_compute(stage)
        new_stage = replace(stage, location=Location.ROOT, attach_stage=-1, attach_iter="")
        moved = state.with_stage(self.stage_id, new_stage)
        _check_attached_readers(moved, self.stage_id)
        return moved.with_step(self)


def _check_attached_readers(state: State, moved: int) -> None:
    """After stage `moved` left its loop: every attached stage's readers must still be
    its target or computed at its loop (or inside such a stage), since its buffer
    lives inside that loop. A stage computed there for `moved` (a sibling of it, say a
    cache read) would otherwise be read from outside the loop."""
    for index, stage in enumerate(state.stages):
        if stage.location is not Location.ATTACHED:
            continue
        target, loop = stage.attach_stage, stage.attach_iter
        outside = _readers_outside(state, _effective_readers(state, index), target, loop)
        if outside:
            names = ", ".join(state.stages[i].name for i in outside)
            raise ScheduleError(
                f"stage {stage.name!r} is computed at {state.stages[target].name!r} and read by "
                f"{names}, which would be outside that loop after moving "
                f"{state.stages[moved].name!r}; compute {stage.name!r} at root first"
            )


def _insert_stage(state: State, index: int, stage: Stage) -> State:
    """Insert a stage at `index`, shifting attach references to stages after it."""
    shifted = tuple(
        replace(s, attach_stage=s.attach_stage + 1) if s.attach_stage >= index else s
        for s in state.stages
    )
    return replace(state, stages=(*shifted[:index], stage, *shifted[index:]))


@dataclass(frozen=True, slots=True)
class CacheWriteStep(Step):
    """Compute the stage into a new `<name>.<scope>` stage (e.g. register-resident
    accumulators) and make the original stage a copy out of it. The new stage is
    inserted before the original, which moves one index up."""

    kind: ClassVar[str] = "CW"
    stage_id: int
    scope: str = "local"

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        op = stage.compute_op
        if stage.relations or stage.iters != initial_stage(stage.tensor).iters:
            raise ScheduleError(
                f"cache_write of {stage.name!r} must come before its other transform steps"
            )
        if any(s.attach_stage == self.stage_id for s in state.stages):
            raise ScheduleError(
                f"stages are computed at {stage.name!r}; apply cache_write before compute_at"
            )
        cache = Tensor(ComputeOp(f"{op.name}.{self.scope}", op.axes, op.body, op.tag))
        copy = ComputeOp(op.name, op.axes, cache[tuple(a.var for a in op.axes)], op.tag)
        cache_stage = replace(initial_stage(cache), scope=self.scope)
        copied = replace(
            initial_stage(Tensor(copy)),
            tensor=stage.tensor,
            location=stage.location,
            attach_stage=stage.attach_stage,
            attach_iter=stage.attach_iter,
        )
        state = state.with_stage(self.stage_id, copied)
        return _insert_stage(state, self.stage_id, cache_stage).with_step(self)


@dataclass(frozen=True, slots=True)
class CacheReadStep(Step):
    """Copy the stage's tensor into a new `<name>.<scope>` stage read by `reader_ids`
    instead (inserted right after the stage)."""

    kind: ClassVar[str] = "CHR"
    stage_id: int
    scope: str
    reader_ids: tuple[int, ...]

    def apply(self, state: State) -> State:
        stage = state.stage(self.stage_id)
        if stage.location is Location.ATTACHED:
            raise ScheduleError(
                f"stage {stage.name!r} is computed inside another stage's loop; apply "
                "cache_read before compute_at"
            )
        consumers = state.consumers(self.stage_id)
        if not self.reader_ids or any(r not in consumers for r in self.reader_ids):
            raise ScheduleError(
                f"cache_read readers {list(self.reader_ids)} must be consumers of "
                f"{stage.name!r} ({consumers})"
            )
        source = stage.tensor
        shape = source.shape
        cache = compute(
            shape,
            lambda *i: source[i],
            name=f"{stage.name}.{self.scope}",
            axis_names=[f"ax{k}" for k in range(len(shape))],
        )
        for reader_id in self.reader_ids:
            reader = state.stages[reader_id]
            op = reader.compute_op
            body = map_expr(
                op.body,
                lambda node: (
                    TensorRead(cache, node.indices)
                    if isinstance(node, TensorRead) and node.tensor is source
                    else None
                ),
            )
            state = state.with_stage(
                reader_id, replace(reader, op=ComputeOp(op.name, op.axes, body, op.tag))
            )
        new_stage = replace(initial_stage(cache), scope=self.scope)
        return _insert_stage(state, self.stage_id + 1, new_stage).with_step(self)


@dataclass(frozen=True, slots=True)
class RfactorStep(Step):
    """Factor a reduction in two. Reduce iterator `iter_id` becomes a spatial axis (at
    position `factor_iter_id` among the spatial axes) of a new `<name>.rf` stage that
    computes partial reductions over the other reduce iterators; the stage itself then
    reduces over that axis. The `.rf` stage is inserted before the stage, which moves
    one index up, and both start with fresh loops.

    Legal on a reduction stage whose only transform so far is at most one split of a
    reduce axis (the chosen iterator is that axis or one of its split outputs), with no
    annotations and no stages computed at it: later steps then schedule the two stages."""

    kind: ClassVar[str] = "RF"
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def apply(self, state: State) -> State:
        stage = _loop_stage(state, self.stage_id)
        op = stage.compute_op
        iterator = stage.check_iter(self.iter_id)
        self._check(state, stage, iterator)
        assert isinstance(op.body, Reduce)
        combiner = op.body.combiner
        source, reduce_axes, new_axis = _factor_axes(stage, iterator)
        axes = (*op.axes[: self.factor_iter_id], new_axis, *op.axes[self.factor_iter_id :])
        body = Reduce(combiner, source, reduce_axes) if reduce_axes else source
        partial = Tensor(ComputeOp(f"{op.name}.rf", axes, body, op.tag))
        final_axis = IterVar(Var(iterator.name), iterator.extent, IterKind.REDUCE)
        index = tuple(a.var for a in op.axes)
        read = partial[
            (*index[: self.factor_iter_id], final_axis.var, *index[self.factor_iter_id :])
        ]
        final = ComputeOp(op.name, op.axes, Reduce(combiner, read, (final_axis,)), op.tag)
        final_stage = replace(
            initial_stage(Tensor(final)),
            tensor=stage.tensor,
            location=stage.location,
            attach_stage=stage.attach_stage,
            attach_iter=stage.attach_iter,
        )
        state = state.with_stage(self.stage_id, final_stage)
        return _insert_stage(state, self.stage_id, initial_stage(partial)).with_step(self)

    def _check(self, state: State, stage: Stage, iterator: Iterator) -> None:
        op = stage.compute_op
        if not isinstance(op.body, Reduce):
            raise ScheduleError(f"stage {stage.name!r} is not a reduction; rfactor needs one")
        if iterator.kind is not IteratorKind.REDUCE:
            raise ScheduleError(
                f"rfactor needs a reduce iterator; {iterator.name!r} is {iterator.kind.value}"
            )
        if not 0 <= self.factor_iter_id <= len(op.axes):
            raise ScheduleError(
                f"rfactor axis position {self.factor_iter_id} must be in 0..{len(op.axes)}"
            )
        relations = stage.relations
        if len(relations) > 1 or (
            relations
            and not (
                isinstance(relations[0], SplitRelation) and iterator.name in relations[0].outputs
            )
        ):
            raise ScheduleError(
                f"rfactor of {stage.name!r} must follow at most one split, of the reduce axis "
                f"that {iterator.name!r} comes from; apply other transforms afterwards"
            )
        if any(it.annotation is not Annotation.NONE for it in stage.iters):
            raise ScheduleError(f"rfactor of {stage.name!r} must come before its annotations")
        if any(s.attach_stage == self.stage_id for s in state.stages):
            raise ScheduleError(f"stages are computed at {stage.name!r}; rfactor it first")


def _factor_axes(stage: Stage, iterator: Iterator) -> tuple[Expr, tuple[IterVar, ...], IterVar]:
    """For rfactor: the reduction source over the new axes, the remaining reduce axes
    (in order) and the new spatial axis standing for `iterator`."""
    op = stage.compute_op
    assert isinstance(op.body, Reduce)
    source = op.body.source
    new_axis = IterVar(Var(iterator.name), iterator.extent, IterKind.SPATIAL)
    if not stage.relations:
        others = tuple(a for a in op.reduce_axes if a.name != iterator.name)
        return substitute(source, {_axis(op, iterator.name).var: new_axis.var}), others, new_axis
    split = stage.relations[0]
    assert isinstance(split, SplitRelation)
    parts = [
        new_axis if name == iterator.name else IterVar(Var(name), extent, IterKind.REDUCE)
        for name, extent in zip(split.outputs, split.extents, strict=True)
    ]
    value: Expr = parts[0].var
    for part in parts[1:]:
        value = value * part.extent + part.var
    source = substitute(source, {_axis(op, split.parent).var: value})
    if math.prod(split.extents) > split.parent_extent:
        # The tail of the split reads past the axis: it contributes the identity.
        identity = reduction_identity(op.body.combiner, source.dtype)
        source = Select(value < split.parent_extent, source, identity)
    remaining: list[IterVar] = []
    for axis in op.reduce_axes:
        if axis.name == split.parent:
            remaining += [p for p in parts if p is not new_axis]
        else:
            remaining.append(axis)
    return source, tuple(remaining), new_axis


def _axis(op: ComputeOp, name: str) -> IterVar:
    return next(a for a in op.axes + op.reduce_axes if a.name == name)


STEP_TYPES: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (
        SplitStep,
        ReorderStep,
        FuseStep,
        AnnotationStep,
        PragmaStep,
        ComputeAtStep,
        ComputeInlineStep,
        ComputeRootStep,
        CacheWriteStep,
        CacheReadStep,
        RfactorStep,
    )
}


def step_from_json(data: Sequence[Any]) -> Step:
    """Inverse of `Step.to_json`; a malformed step (from a damaged or foreign record)
    raises ScheduleError saying which field is wrong."""
    if not isinstance(data, list | tuple) or not data or not isinstance(data[0], str):
        raise ScheduleError(f"a transform step is a list starting with its kind, not {data!r}")
    if data[0] not in STEP_TYPES:
        raise ScheduleError(f"unknown transform step {list(data)[:1]}")
    cls = STEP_TYPES[data[0]]
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if len(data) - 1 != len(names):
        raise ScheduleError(f"step {data[0]} takes {len(names)} fields, got {len(data) - 1}")
    values = [
        _field_from_json(data[0], f.name, f.type, value)
        for f, value in zip(fields(cls), data[1:], strict=True)  # type: ignore[arg-type]
    ]
    return cls(*values)


def _field_from_json(kind: str, name: str, annotation: Any, value: Any) -> Any:
    """A step field from its JSON value, checked against the field's type."""
    expected = str(annotation)  # "int", "str", "tuple[int, ...]" or "Annotation"
    if expected == "Annotation" and value in {a.value for a in Annotation}:
        return Annotation(value)
    if expected == "str" and isinstance(value, str):
        return value
    if expected == "int" and _is_int(value):
        return value
    if expected == "tuple[int, ...]" and isinstance(value, list) and all(map(_is_int, value)):
        return tuple(value)
    raise ScheduleError(f"step {kind}: field {name} must be {expected}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def reorder_to(state: State, index: int, names: Sequence[str]) -> State:
    """Reorder stage `index`'s iterators to `names` (all of them, outermost first);
    no step when they already are in that order."""
    stage = state.stages[index]
    order = tuple(stage.iter_index(name) for name in names)
    if order == tuple(range(len(stage.iters))):
        return state
    return ReorderStep(index, order).apply(state)


def replay(dag: ComputeDAG, steps: Sequence[Step]) -> State:
    """Apply `steps` in order to the initial state of `dag`."""
    state = State.initial(dag)
    for step in steps:
        state = step.apply(state)
    return state


__all__ = [
    "STEP_TYPES",
    "AnnotationStep",
    "CacheReadStep",
    "CacheWriteStep",
    "ComputeAtStep",
    "ComputeInlineStep",
    "ComputeRootStep",
    "FuseStep",
    "PragmaStep",
    "ReorderStep",
    "RfactorStep",
    "SplitStep",
    "Step",
    "replay",
    "step_from_json",
]
