"""What the sketch rules, the random annotation and the mutations ask of a State: which
stages reuse data (and so deserve multi-level tiling), which output holds an anchor's
tile, which padding to materialise, how wide a vector a stage's reads allow, and what
region an attached stage computes.

Everything here reads a State and changes nothing; `ember.autoschedule.sketch` builds
sketches from these answers, `annotate` and `mutate` size their choices with them.
"""

from __future__ import annotations

import math

from ember.autoschedule.hardware import HardwareParams
from ember.schedule.default import broadcasts_from, contiguous_in
from ember.schedule.default import vector_lanes as stage_vector_lanes
from ember.schedule.lower import expanded_reads, loop_readers
from ember.schedule.state import FuseRelation, Location, SplitRelation, Stage, State
from ember.te.expr import Reduce, Select, Var
from ember.te.tensor import Tensor
from ember.te.visit import free_vars

# A reduction whose spatial extent is below the cores and whose reduction is at least
# this long gets an rfactor sketch: its partial sums give the vectors and threads.
RFACTOR_MIN_REDUCTION = 64


def index_of(state: State, tensor: Tensor) -> int:
    return next(i for i, s in enumerate(state.stages) if s.tensor is tensor)


def is_output(state: State, tensor: Tensor) -> bool:
    return any(tensor is t for t in state.dag.outputs)


def has_loops(stage: Stage) -> bool:
    return not stage.is_placeholder and stage.location is not Location.INLINED


def is_reduction(stage: Stage) -> bool:
    return (
        not stage.is_placeholder
        and isinstance(stage.compute_op.body, Reduce)
        and bool(stage.compute_op.reduce_axes)
    )


def has_data_reuse(state: State, index: int) -> bool:
    """Whether a reduction reads some element for more than one output element: a read
    that does not depend on one of its (non-trivial) spatial axes, as a conv's weights
    do not depend on the pixel or a matrix product's operands on the other's axis.
    Pools and row reductions read every input element once and gain nothing from
    tiles."""
    stage = state.stages[index]
    if not is_reduction(stage):
        return False
    spatial = {axis.var for axis in stage.compute_op.axes if axis.extent > 1}
    for read in expanded_reads(state, index):
        used: set[Var] = set().union(*(free_vars(i) for i in read.indices))
        if spatial - used:
            return True
    return False


def epilogue_output(state: State, anchor: int) -> int | None:
    """The output whose tile can hold the accumulators of reduction `anchor`: the
    anchor itself when it is an output, else the output that alone reads it at its own
    indices (its inlined bias/relu/residual chain); None when there is none."""
    stage = state.stages[anchor]
    if is_output(state, stage.tensor):
        return anchor
    readers = loop_readers(state).get(id(stage.tensor), [])
    if len(readers) != 1 or not is_output(state, state.stages[readers[0]].tensor):
        return None
    output = state.stages[readers[0]]
    own = tuple(axis.var for axis in output.compute_op.axes)
    reads = [r for r in expanded_reads(state, readers[0]) if r.tensor is stage.tensor]
    if output.tensor.shape != stage.tensor.shape or any(r.indices != own for r in reads):
        return None
    return readers[0]


def is_padding(stage: Stage) -> bool:
    if stage.is_placeholder:
        return False
    op = stage.compute_op
    return "pad" in op.tag and bool(op.axes) and not isinstance(op.body, Reduce)


def padding_choices(state: State, index: int) -> tuple[bool, ...]:
    """Whether to keep padding stage `index` at root, best first: materialised when a
    conv broadcasts it against vectors of weights (inlined, its select sits in the
    micro-kernel's innermost loop), inlined when read as vectors of channels (a
    depthwise conv or a pool), and always at root when its condition tests the
    innermost axis (inlined it would stop vectorization). The second choice, when
    there is one, is the other, for padding read by a stage that gets tiles (the
    search measures which is faster)."""
    op = state.stages[index].compute_op
    if not isinstance(op.body, Select):
        return (False,)  # a copy (1x1 conv's "padding"): nothing to materialise
    if op.axes[-1].var in free_vars(op.body.condition):
        return (True,)
    readers = [r for r in state.consumers(index) if is_reduction(state.stages[r])]
    broadcast = any(broadcasts_from(state, r, state.stages[index].tensor) for r in readers)
    if not any(has_data_reuse(state, r) for r in readers):
        return (broadcast,)
    return (broadcast, not broadcast)


def vector_lanes(state: State, index: int, hardware: HardwareParams) -> int:
    """Lanes of one vector register for the widest element type the stage touches."""
    return stage_vector_lanes(state, index, hardware.vector_bytes)


def vector_widths(state: State, index: int, axis: int, hardware: HardwareParams) -> list[int]:
    """Power-of-two vector widths (widest first, at least 4) dividing the extent of the
    stage's spatial axis `axis` along which every read is contiguous; [1] if none."""
    op = state.stages[index].compute_op
    var, extent = op.axes[axis].var, op.axes[axis].extent
    reads = expanded_reads(state, index)
    widths = []
    width = vector_lanes(state, index, hardware)
    while width >= 4:
        if extent % width == 0 and contiguous_in(reads, var, width):
            widths.append(width)
        width //= 2
    return widths or [1]


def needs_rfactor(stage: Stage, hardware: HardwareParams) -> bool:
    """A reduction with less spatial work than cores and a long reduction."""
    if not is_reduction(stage):
        return False
    op = stage.compute_op
    spatial = math.prod(axis.extent for axis in op.axes)
    reduction = math.prod(axis.extent for axis in op.reduce_axes)
    return spatial < hardware.num_cores and reduction >= RFACTOR_MIN_REDUCTION


def attached_region(state: State, index: int) -> tuple[int, ...] | None:
    """Extents of the region attached stage `index` computes per iteration of its
    attach loop, when its consumer reads it at the consumer's own indices (a
    cache_write's copy): per axis, the product of the consumer's loops inside the
    attach point that derive from that axis. None when not so simple."""
    stage = state.stages[index]
    if stage.location is not Location.ATTACHED:
        return None
    target = state.stages[stage.attach_stage]
    axes = target.compute_op.axes
    own = tuple(axis.var for axis in axes)
    reads = [r for r in expanded_reads(state, stage.attach_stage) if r.tensor is stage.tensor]
    if not reads or any(r.indices != own for r in reads):
        return None
    origin = iterator_origins(target)
    inside = target.iters[target.iter_index(stage.attach_iter) + 1 :]
    if any(origin.get(it.name) is None for it in inside):
        return None
    return tuple(
        min(axis.extent, math.prod(it.extent for it in inside if origin[it.name] == axis.name))
        for axis in axes
    )


def iterator_origins(stage: Stage) -> dict[str, str | None]:
    """Iterator name -> the original axis it derives from (None: fused from several)."""
    op = stage.compute_op
    origin: dict[str, str | None] = {a.name: a.name for a in op.axes + op.reduce_axes}
    for relation in stage.relations:
        if isinstance(relation, SplitRelation):
            for name in relation.outputs:
                origin[name] = origin.get(relation.parent)
        elif isinstance(relation, FuseRelation):
            parents = {origin.get(p) for p in relation.parents}
            origin[relation.fused] = parents.pop() if len(parents) == 1 else None
    return origin


def divisors(extent: int) -> list[int]:
    """The divisors of `extent`, ascending."""
    small = [d for d in range(1, math.isqrt(extent) + 1) if extent % d == 0]
    return sorted(set(small + [extent // d for d in small]))
