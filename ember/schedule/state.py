"""`State`: a ComputeDAG plus the transform steps applied to it, and what they built.

A schedule is data. `State` is immutable: every transform returns a new State with the
step appended, so a search can branch from any state for free, and `replay(dag,
steps)` rebuilds a saved state exactly. Steps (in `ember.schedule.steps`) are frozen
dataclasses naming stages and iterators by position, which is what records store.

What a State holds per stage is what lowering needs and no more:
- `iters`: the current loop nest of the stage, outermost first, with extents, kinds
  (spatial / reduce / mixed) and annotations (parallel, vectorize, unroll);
- `relations`: how the current iterators derive from the stage's original axes
  (splits and fuses, in the order applied), so lowering can express every original
  axis as an index expression of loop variables;
- `location`: root, inlined, or attached inside another stage's loop at an iterator;
- `tensor` (the identity other stages read it by) and `op` (what it computes now:
  cache_write / cache_read / rfactor replace a stage's op and add stages).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from ember.errors import EmberError
from ember.te.dag import ComputeDAG
from ember.te.tensor import ComputeOp, IterKind, Operation, PlaceholderOp, Tensor


class ScheduleError(EmberError):
    """An illegal transform step (the search generates these; the message says why)."""


class Annotation(enum.Enum):
    NONE = "none"
    PARALLEL = "parallel"
    VECTORIZE = "vectorize"
    UNROLL = "unroll"


class IteratorKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"
    MIXED = "mixed"  # fused from spatial and reduce iterators

    @staticmethod
    def of(kind: IterKind) -> IteratorKind:
        return IteratorKind.SPATIAL if kind is IterKind.SPATIAL else IteratorKind.REDUCE


@dataclass(frozen=True, slots=True)
class Iterator:
    """One loop of a stage. Names are unique within the stage (`ff.0`, `ff.1`, `nn@yy`)."""

    name: str
    extent: int
    kind: IteratorKind
    annotation: Annotation = Annotation.NONE


@dataclass(frozen=True, slots=True)
class SplitRelation:
    """`parent = ((outputs[0] * extents[1] + outputs[1]) * extents[2] + outputs[2]) ...`,
    i.e. the outputs are the digits of `parent` in the mixed radix of their extents. The
    product of the extents may exceed the parent's extent (a tail): lowering guards the
    iterations past it."""

    parent: str
    outputs: tuple[str, ...]
    extents: tuple[int, ...]
    parent_extent: int


@dataclass(frozen=True, slots=True)
class FuseRelation:
    """`fused` runs over the product of `parents` (outermost first): each parent is a
    digit of `fused` in the mixed radix of `extents`."""

    parents: tuple[str, ...]
    extents: tuple[int, ...]
    fused: str


Relation = SplitRelation | FuseRelation


class Location(enum.Enum):
    ROOT = "root"
    INLINED = "inlined"
    ATTACHED = "attached"


@dataclass(frozen=True, slots=True)
class Stage:
    """A stage of the schedule; see the module docstring."""

    tensor: Tensor
    op: Operation
    iters: tuple[Iterator, ...] = ()
    relations: tuple[Relation, ...] = ()
    location: Location = Location.ROOT
    # With location ATTACHED: the index of the stage, and the name of its iterator,
    # inside whose loop this stage is computed.
    attach_stage: int = -1
    attach_iter: str = ""
    # Pragmas on iterators: iterator name -> auto-unroll max step.
    unroll_max_step: tuple[tuple[str, int], ...] = ()
    scope: str = "global"

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def compute_op(self) -> ComputeOp:
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"stage {self.name!r} is a placeholder and has no loops")
        return self.op

    def iter_index(self, name: str) -> int:
        for index, iterator in enumerate(self.iters):
            if iterator.name == name:
                return index
        raise ScheduleError(f"stage {self.name!r} has no iterator {name!r}")

    def check_iter(self, index: int) -> Iterator:
        if not 0 <= index < len(self.iters):
            raise ScheduleError(
                f"stage {self.name!r} has {len(self.iters)} iterators; #{index} does not exist"
            )
        return self.iters[index]


def initial_stage(tensor: Tensor) -> Stage:
    """A stage with one iterator per original axis (spatial, then reduce)."""
    op = tensor.op
    if isinstance(op, PlaceholderOp):
        return Stage(tensor, op)
    iters = tuple(
        Iterator(axis.name, axis.extent, IteratorKind.of(axis.kind))
        for axis in op.axes + op.reduce_axes
    )
    return Stage(tensor, op, iters)


@dataclass(frozen=True)
class State:
    """A ComputeDAG with a sequence of applied transform steps."""

    dag: ComputeDAG
    stages: tuple[Stage, ...]
    steps: tuple[object, ...] = field(default=())  # tuple[Step, ...]; see steps.py

    @staticmethod
    def initial(dag: ComputeDAG) -> State:
        return State(dag, tuple(initial_stage(t) for t in dag.tensors))

    def stage_index(self, stage: int | str) -> int:
        """A stage by index or by (unique) name."""
        if isinstance(stage, int):
            if not 0 <= stage < len(self.stages):
                raise ScheduleError(f"there is no stage #{stage} ({len(self.stages)} stages)")
            return stage
        matches = [i for i, s in enumerate(self.stages) if s.name == stage]
        if len(matches) != 1:
            raise ScheduleError(
                f"stage name {stage!r} matches {len(matches)} stages; use the stage index"
            )
        return matches[0]

    def stage(self, stage: int | str) -> Stage:
        return self.stages[self.stage_index(stage)]

    def with_stage(self, index: int, stage: Stage) -> State:
        stages = list(self.stages)
        stages[index] = stage
        return replace(self, stages=tuple(stages))

    def with_step(self, step: object) -> State:
        return replace(self, steps=(*self.steps, step))

    def consumers(self, index: int) -> list[int]:
        """Stages whose op reads stage `index`'s tensor."""
        tensor = self.stages[index].tensor
        return [
            i
            for i, s in enumerate(self.stages)
            if isinstance(s.op, ComputeOp) and any(t is tensor for t in s.op.input_tensors)
        ]

    def attached_under(self, index: int, target: int, iterator: str) -> bool:
        """Whether stage `index` is computed at loop `iterator` of stage `target`, or
        inside a stage that is (its chain of compute_at points passes through it)."""
        stage = self.stages[index]
        while stage.location is Location.ATTACHED:
            if stage.attach_stage == target and stage.attach_iter == iterator:
                return True
            stage = self.stages[stage.attach_stage]
        return False

    def __str__(self) -> str:
        from ember.schedule.printer import format_state

        return format_state(self)
