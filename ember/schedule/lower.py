"""Lowering: a State becomes a loop-IR `PrimFunc`. The one place where schedules become
loops; tuned and default schedules both come through here.

Per stage, in stage (topological) order:
- *inlined* stages get no loops: their expression is substituted into every reader;
- *root* stages get a loop nest at the top level, one loop per current iterator
  (outermost first, kinds from annotations, `unroll_max_step` from pragmas), writing a
  global buffer: an argument for the DAG's inputs and outputs, an allocation around
  the whole body for intermediates;
- *attached* stages (compute_at) are emitted inside their consumer's loop at the named
  iterator, for just the region that the consumer's iterations under that loop read
  (see `ember.schedule.bounds`), and that the stages attached after it at the same
  loop read (softmax's exp, read by its sum and its division, all computed per row),
  into a buffer of the region's size whose index 0 is the region's start. Their
  iterators that derive from spatial axes run over the region instead of the whole
  axis.

Every original axis is rebuilt from loop variables through the stage's relations
(split: mixed-radix digits; fuse: division and modulo). Iterations past a split that
does not divide (tails) and, for attached stages, past the tensor's edges are guarded
with IfThenElse, each guard placed just inside the innermost loop it depends on.

A reduction stores the combiner's identity just before its outermost reduce loop,
covering the spatial iterations inside that point, and updates the accumulator in the
innermost loop, so any legal iterator order computes the same result. Loops of extent
1 are not emitted (their variable is 0) unless a pragma names them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ember.loop.analysis import Interval, LinearForm, const_interval, from_linear, to_linear
from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    PrimFunc,
    Stmt,
    Store,
    seq,
)
from ember.loop.simplify import simplify_expr
from ember.names import C_KEYWORDS, NameSupply, c_identifier
from ember.schedule.bounds import Region, infer_region
from ember.schedule.state import (
    Annotation,
    IteratorKind,
    Location,
    ScheduleError,
    SplitRelation,
    Stage,
    State,
)
from ember.te.expr import (
    INDEX_DTYPE,
    Binary,
    BinaryOp,
    Combiner,
    Const,
    Expr,
    Reduce,
    TensorRead,
    Var,
    logical_and,
)
from ember.te.tensor import Tensor
from ember.te.visit import free_vars, map_expr, substitute, walk


@dataclass(frozen=True, slots=True)
class OutputView:
    """A DAG output stored as the block at `origin` of a larger tensor of `shape`, which
    the kernel receives in the output's place: how the producers of an in-place
    concatenation each write their slice of the concatenated tensor."""

    shape: tuple[int, ...]
    origin: tuple[int, ...]

    def __str__(self) -> str:
        return f"{list(self.shape)}@{list(self.origin)}"


def lower(
    state: State, name: str = "kernel", views: Mapping[int, OutputView] | None = None
) -> PrimFunc:
    """The loop program computing `state`'s DAG under its schedule.

    Arguments are one global buffer per DAG input (in `dag.inputs` order), then one per
    DAG output; buffer and loop-variable names are unique C identifiers derived from
    stage and iterator names (`placeholder`, `placeholder_1`, `conv2d_nhwc_local`).
    `views` (position in `dag.outputs` -> view) makes those outputs' arguments the
    larger tensors they are stored in. Schedules are unaffected: only addresses change."""
    return _Lowering(state).function(name, views or {})


def infer_bound(state: State) -> State:
    """`state` with the iterator extents its loops really have: those of an attached
    stage run over the region its consumer needs, not the whole tensor (what cost
    features and printouts should see). Steps and relations are unchanged."""
    lowering = _Lowering(state)
    lowering.function("kernel", {})
    stages = list(state.stages)
    for index, extents in lowering.loop_extents.items():
        stage = stages[index]
        iters = tuple(replace(it, extent=e) for it, e in zip(stage.iters, extents, strict=True))
        stages[index] = replace(stage, iters=iters)
    return replace(state, stages=tuple(stages))


_FOR_KINDS = {
    Annotation.NONE: ForKind.SERIAL,
    Annotation.PARALLEL: ForKind.PARALLEL,
    Annotation.VECTORIZE: ForKind.VECTORIZED,
    Annotation.UNROLL: ForKind.UNROLLED,
}


def expanded_body(state: State, index: int, cache: dict[int, Expr] | None = None) -> Expr:
    """Stage `index`'s body with every inlined producer substituted (recursively), as
    lowering computes it. `cache` (stage index -> body) is filled along the way."""
    cache = {} if cache is None else cache
    if index not in cache:
        stages = state.stages
        stage_of = {id(s.tensor): i for i, s in enumerate(stages)}

        def inline(node: Expr) -> Expr | None:
            if not isinstance(node, TensorRead):
                return None
            producer = stage_of.get(id(node.tensor))
            if producer is None or stages[producer].location is not Location.INLINED:
                return None
            axes = stages[producer].compute_op.axes
            mapping = {a.var: i for a, i in zip(axes, node.indices, strict=True)}
            return substitute(expanded_body(state, producer, cache), mapping)

        cache[index] = map_expr(stages[index].compute_op.body, inline)
    return cache[index]


def expanded_reads(state: State, index: int) -> list[TensorRead]:
    """The tensor reads of stage `index` once inlined producers are substituted."""
    return [n for n in walk(expanded_body(state, index)) if isinstance(n, TensorRead)]


def loop_readers(state: State, cache: dict[int, Expr] | None = None) -> dict[int, list[int]]:
    """id(tensor) -> the stages with loops of their own (root or attached, in stage
    order) that read it once inlined stages are substituted."""
    cache = {} if cache is None else cache
    readers: dict[int, list[int]] = {}
    for index, stage in enumerate(state.stages):
        if stage.is_placeholder or stage.location is Location.INLINED:
            continue
        for node in walk(expanded_body(state, index, cache)):
            if isinstance(node, TensorRead):
                found = readers.setdefault(id(node.tensor), [])
                if index not in found:
                    found.append(index)
    return readers


def _loop_name(hint: str) -> str:
    """A C identifier for a buffer or loop variable: `hint` cleaned, never a keyword."""
    base = c_identifier(hint) or "v"
    if base[0].isdigit():
        base = f"v{base}"
    return f"{base}_" if base in C_KEYWORDS else base


def _names() -> NameSupply:
    """Unique C identifiers for the buffers and loop variables of one function."""
    return NameSupply(clean=_loop_name)


@dataclass(frozen=True, slots=True)
class _Placed:
    """Where a tensor's values live: a buffer whose element 0 is the tensor element at
    `starts` (None: the buffer is the whole tensor), or whose element `origin` is the
    tensor's element 0 (an `OutputView`)."""

    buffer: Buffer
    starts: tuple[LinearForm, ...] | None = None
    origin: tuple[int, ...] | None = None

    def index(self, indices: Sequence[Expr], ranges: Mapping[Var, Interval]) -> tuple[Expr, ...]:
        if self.starts is not None:
            pairs = zip(indices, self.starts, strict=True)
            indices = [from_linear(to_linear(i) - start) for i, start in pairs]
        return tuple(simplify_expr(i, ranges) for i in self.in_view(indices))

    def in_view(self, indices: Sequence[Expr]) -> tuple[Expr, ...]:
        """Indices of the placed values (the tensor's, or its region's) in the buffer."""
        if self.origin is None:
            return tuple(indices)
        return tuple(
            from_linear(to_linear(i) + LinearForm.of_constant(o)) if o else i
            for i, o in zip(indices, self.origin, strict=True)
        )


@dataclass(frozen=True, slots=True)
class _Loop:
    """One loop of a stage; `var` is None for a loop of extent 1 that is not emitted."""

    name: str
    var: Var | None
    extent: int
    kind: IteratorKind
    for_kind: ForKind
    unroll_max_step: int


@dataclass(frozen=True, slots=True)
class _Guard:
    """A condition an iteration must meet; `spatial` guards also hold back the
    accumulator initialisation (reduce-axis tails do not)."""

    condition: Expr
    spatial: bool


@dataclass(frozen=True, slots=True, eq=False)
class _Nest:
    """A stage's loops, with every original axis expressed in their variables."""

    loops: tuple[_Loop, ...]
    axis_values: dict[Var, Expr]  # axis variable -> tensor index (region start added)
    store_index: tuple[Expr, ...]  # index into the stage's own buffer
    guards: tuple[_Guard, ...]


@dataclass(eq=False)
class _Lowering:
    state: State
    names: NameSupply = field(default_factory=_names)
    # Range of every loop variable created so far (names are unique per function).
    ranges: dict[Var, Interval] = field(default_factory=dict)
    expanded: dict[int, Expr] = field(default_factory=dict)
    # Loop extents of each emitted stage, for `infer_bound`.
    loop_extents: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stage_of = {id(s.tensor): i for i, s in enumerate(self.state.stages)}
        self.attached: dict[tuple[int, str], list[int]] = {}
        for index, stage in enumerate(self.state.stages):
            if stage.location is Location.ATTACHED:
                key = (stage.attach_stage, stage.attach_iter)
                self.attached.setdefault(key, []).append(index)

    def function(self, name: str, views: Mapping[int, OutputView]) -> PrimFunc:
        dag, stages = self.state.dag, self.state.stages
        self.names.take(name)  # a buffer named like the kernel would shadow it in C
        env: dict[int, _Placed] = {}
        args: list[Buffer] = []
        for tensor in dag.inputs:
            if id(tensor) not in env:
                env[id(tensor)] = _Placed(self._global_buffer(tensor))
                args.append(env[id(tensor)].buffer)
        for position, tensor in enumerate(dag.outputs):
            if id(tensor) not in env:
                view = views.get(position)
                env[id(tensor)] = (
                    self._viewed(tensor, view) if view else _Placed(self._global_buffer(tensor))
                )
                args.append(env[id(tensor)].buffer)
            elif position in views:
                raise ScheduleError(f"output {position} of the DAG is also an input or output")
        roots = [i for i, s in enumerate(stages) if _has_loops(s, Location.ROOT)]
        intermediates = []
        for index in roots:
            tensor = stages[index].tensor
            if id(tensor) not in env:
                env[id(tensor)] = _Placed(self._global_buffer(tensor))
                intermediates.append(env[id(tensor)].buffer)
        self._check_attachments()
        body = seq(*(self._emit(index, None, env) for index in roots))
        for buffer in reversed(intermediates):
            body = Allocate(buffer, body)
        return PrimFunc(name, tuple(args), body)

    def _global_buffer(self, tensor: Tensor) -> Buffer:
        return Buffer(self.names.fresh(tensor.name), tensor.shape, tensor.dtype)

    def _viewed(self, tensor: Tensor, view: OutputView) -> _Placed:
        """`tensor` stored in the larger buffer of `view`: index i is i + origin."""
        pairs = list(zip(tensor.shape, view.origin, view.shape, strict=True))
        if any(origin < 0 or origin + extent > size for extent, origin, size in pairs):
            raise ScheduleError(f"output {tensor.name} {list(tensor.shape)} is not in {view}")
        buffer = Buffer(self.names.fresh(tensor.name), view.shape, tensor.dtype)
        return _Placed(buffer, origin=view.origin)

    # -- expressions ---------------------------------------------------------------

    def _expanded(self, index: int) -> Expr:
        return expanded_body(self.state, index, self.expanded)

    def _to_loads(self, value: Expr, env: Mapping[int, _Placed]) -> Expr:
        def load(node: Expr) -> Expr | None:
            if not isinstance(node, TensorRead):
                return None
            placed = env.get(id(node.tensor))
            if placed is None:
                raise ScheduleError(
                    f"tensor {node.tensor.name!r} is read where it is not computed; "
                    "compute it at root or at the loop of the stage that reads it"
                )
            return Load(placed.buffer, placed.index(node.indices, self.ranges))

        return map_expr(value, load)

    def _check_attachments(self) -> None:
        """An attached stage's buffer lives inside its target's loop, so every stage
        that reads it must be the target, another stage attached at the same loop
        (computed after it there), or a stage inside such a one."""
        stages = self.state.stages
        readers = loop_readers(self.state, self.expanded)
        for stage in stages:
            if stage.location is Location.ATTACHED:
                others = [
                    i
                    for i in readers.get(id(stage.tensor), [])
                    if i != stage.attach_stage
                    and not self.state.attached_under(i, stage.attach_stage, stage.attach_iter)
                ]
                if others:
                    names = ", ".join(stages[i].name for i in others)
                    raise ScheduleError(
                        f"stage {stage.name!r} is computed at {stages[stage.attach_stage].name!r} "
                        f"but also read by {names}; compute it at root instead"
                    )

    # -- loop nests ----------------------------------------------------------------

    def _emit(self, index: int, region: Region | None, env: Mapping[int, _Placed]) -> Stmt:
        """The loop nest of stage `index` (computing `region`, or all of it)."""
        stage = self.state.stages[index]
        nest = self._plan(stage, region)
        self.loop_extents[index] = tuple(loop.extent for loop in nest.loops)
        body = self._expanded(index)
        source = body.source if isinstance(body, Reduce) else body
        value = substitute(source, nest.axis_values)
        before: dict[int, list[Stmt]] = {}
        allocations: dict[int, list[Buffer]] = {}
        inner_env = dict(env)
        for depth, loop in enumerate(nest.loops):
            producers = self.attached.get((index, loop.name), [])
            regions = self._attached_regions(producers, value, nest.loops[depth + 1 :])
            for producer in producers:
                placed, stmt = self._emit_attached(producer, regions[producer], inner_env)
                inner_env[id(self.state.stages[producer].tensor)] = placed
                before.setdefault(depth + 1, []).append(stmt)
                allocations.setdefault(depth + 1, []).append(placed.buffer)
        placed = inner_env[id(stage.tensor)]
        result = self._to_loads(value, inner_env)
        store_index = placed.in_view(nest.store_index)
        if isinstance(body, Reduce):
            accumulator = Load(placed.buffer, store_index)
            result = _combine(body.combiner, accumulator, result)
            level = next(
                k for k, loop in enumerate(nest.loops) if loop.kind is not IteratorKind.SPATIAL
            )
            init = self._initialise(
                nest, level, placed, reduction_identity(body.combiner, body.dtype)
            )
            before.setdefault(level, []).append(init)
        leaf = Store(placed.buffer, store_index, result)
        return _assemble(nest.loops, leaf, nest.guards, before, allocations)

    def _attached_regions(
        self, producers: Sequence[int], consumer_value: Expr, inner_loops: Sequence[_Loop]
    ) -> dict[int, Region]:
        """The region each producer attached at one loop computes: what the consumer's
        iterations under the loop (`inner_loops`) read of it, and what the producers
        after it at the same loop, and the stages inside those, read (softmax's exp,
        read by its sum and its division, both computed per row). Later producers come
        first, since their regions decide what they read of earlier ones."""
        ranging = {loop.var: loop.extent for loop in inner_loops if loop.var is not None}
        readers = [consumer_value]
        regions: dict[int, Region] = {}
        for producer in reversed(producers):
            regions[producer] = self._region_read(producer, readers, ranging)
            if len(producers) > 1:
                readers += self._values_over(producer, regions[producer], ranging)
        return regions

    def _region_read(
        self, index: int, readers: Sequence[Expr], ranging: Mapping[Var, int]
    ) -> Region:
        """The region of stage `index`'s tensor that expressions `readers` read."""
        tensor = self.state.stages[index].tensor
        reads = [
            node.indices
            for value in readers
            for node in walk(value)
            if isinstance(node, TensorRead) and node.tensor is tensor
        ]
        return infer_region(reads, tensor.shape, ranging)

    def _values_over(self, index: int, region: Region, ranging: dict[Var, int]) -> list[Expr]:
        """What stage `index` computes for `region`, as expressions that read other
        tensors: its own, with its axes running over the region and its reduce axes
        over their whole extents (the variables that do are added to `ranging`), and
        those of the stages computed inside it, over what it reads of them (a
        superset: every loop of the stage counted as ranging). The variables' names
        hold a dot, so no loop variable is named alike."""
        op = self.state.stages[index].compute_op
        body = self._expanded(index)
        source = body.source if isinstance(body, Reduce) else body
        mapping: dict[Var, Expr] = {}
        for dim, axis in enumerate(op.axes):
            var = Var(f"{axis.name}.region{index}", INDEX_DTYPE)
            ranging[var] = region.extents[dim]
            mapping[axis.var] = from_linear(region.starts[dim] + to_linear(var))
        for axis in op.reduce_axes:
            var = Var(f"{axis.name}.region{index}", INDEX_DTYPE)
            ranging[var] = axis.extent
            mapping[axis.var] = var
        values = [substitute(source, mapping)]
        inside = [i for (stage, _), found in self.attached.items() if stage == index for i in found]
        for nested in sorted(inside, reverse=True):
            nested_region = self._region_read(nested, values, ranging)
            values += self._values_over(nested, nested_region, ranging)
        return values

    def _emit_attached(
        self, index: int, region: Region, env: Mapping[int, _Placed]
    ) -> tuple[_Placed, Stmt]:
        """Stage `index` computed for `region` into a buffer of the region's size."""
        stage = self.state.stages[index]
        tensor = stage.tensor
        buffer = Buffer(self.names.fresh(stage.name), region.extents, tensor.dtype, stage.scope)
        placed = _Placed(buffer, region.starts)
        stmt = self._emit(index, region, {**env, id(tensor): placed})
        return placed, stmt

    def _plan(self, stage: Stage, region: Region | None) -> _Nest:
        """Loops of `stage` and its original axes as expressions of their variables."""
        op = stage.compute_op
        extents, kinds = _derived_extents(stage, region.extents if region else op.shape)
        pragmas = dict(stage.unroll_max_step)
        values: dict[str, Expr] = {}
        loops = []
        for iterator in stage.iters:
            extent, unroll = extents[iterator.name], pragmas.get(iterator.name, 0)
            var = None
            if extent != 1 or unroll:  # extent 0 too: a loop that runs nothing
                var = Var(self.names.fresh(iterator.name), INDEX_DTYPE)
                self.ranges[var] = Interval.extent(extent)
            values[iterator.name] = var if var is not None else Const(0, INDEX_DTYPE)
            for_kind = _FOR_KINDS[iterator.annotation]
            loops.append(_Loop(iterator.name, var, extent, kinds[iterator.name], for_kind, unroll))
        guards = self._derive_axes(stage, extents, kinds, values)
        store_index = tuple(values[axis.name] for axis in op.axes)
        axis_values = {axis.var: values[axis.name] for axis in op.axes + op.reduce_axes}
        if region is not None:
            for dim, axis in enumerate(op.axes):
                if region.covers_dim(dim, op.shape[dim]):
                    continue
                position = from_linear(region.starts[dim] + to_linear(values[axis.name]))
                axis_values[axis.var] = simplify_expr(position, self.ranges)
                guards += self._range_guards(axis_values[axis.var], op.shape[dim], True)
        return _Nest(tuple(loops), axis_values, store_index, tuple(guards))

    def _derive_axes(
        self,
        stage: Stage,
        extents: Mapping[str, int],
        kinds: Mapping[str, IteratorKind],
        values: dict[str, Expr],
    ) -> list[_Guard]:
        """Fill `values` for every relation's parents (last relation first); return the
        guards of splits with tails."""
        guards = []
        for relation in reversed(stage.relations):
            if isinstance(relation, SplitRelation):
                parent: Expr = Const(0, INDEX_DTYPE)
                for name in relation.outputs:
                    parent = parent * Const(extents[name], INDEX_DTYPE) + values[name]
                value = simplify_expr(parent, self.ranges)
                values[relation.parent] = value
                covered = math.prod(extents[name] for name in relation.outputs)
                if covered > extents[relation.parent]:
                    spatial = kinds[relation.parent] is not IteratorKind.REDUCE
                    guards += self._range_guards(value, extents[relation.parent], spatial)
                continue
            for k, name in enumerate(relation.parents):
                part = values[relation.fused]
                inner = math.prod(extents[p] for p in relation.parents[k + 1 :])
                if inner > 1:
                    part = part // Const(inner, INDEX_DTYPE)
                if k > 0:
                    part = part % Const(extents[name], INDEX_DTYPE)
                values[name] = simplify_expr(part, self.ranges)
        return guards

    def _range_guards(self, value: Expr, size: int, spatial: bool) -> list[_Guard]:
        """Guards keeping `value` in `0 .. size - 1`, less those that always hold."""
        known = const_interval(value, self.ranges)
        guards = []
        if known.lo is None or known.lo < 0:
            guards.append(_Guard(value >= Const(0, INDEX_DTYPE), spatial))
        if known.hi is None or known.hi >= size:
            guards.append(_Guard(value < Const(size, INDEX_DTYPE), spatial))
        return guards

    def _initialise(self, nest: _Nest, level: int, placed: _Placed, identity: Const) -> Stmt:
        """Store `identity` to every accumulator element that the loops from `level`
        inward update: their spatial and mixed loops, with reduce loops at 0."""
        mapping: dict[Var, Expr] = {}
        loops = []
        for loop in nest.loops[level:]:
            if loop.var is None:
                continue
            if loop.kind is IteratorKind.REDUCE:
                mapping[loop.var] = Const(0, INDEX_DTYPE)
                continue
            var = Var(self.names.fresh(f"{loop.var.name}_init"), INDEX_DTYPE)
            self.ranges[var] = Interval.extent(loop.extent)
            mapping[loop.var] = var
            loops.append(replace(loop, var=var))
        guards = [
            _Guard(substitute(guard.condition, mapping), True)
            for guard in nest.guards
            if guard.spatial and _guard_level(guard.condition, nest.loops) > level
        ]
        index = tuple(
            simplify_expr(substitute(i, mapping), self.ranges)
            for i in placed.in_view(nest.store_index)
        )
        return _assemble(tuple(loops), Store(placed.buffer, index, identity), tuple(guards), {}, {})


def _has_loops(stage: Stage, location: Location) -> bool:
    return not stage.is_placeholder and stage.location is location


def _derived_extents(
    stage: Stage, spatial_extents: Sequence[int]
) -> tuple[dict[str, int], dict[str, IteratorKind]]:
    """Extent and kind of every iterator name the stage's relations mention, starting
    from `spatial_extents` for its spatial axes (a region's, for attached stages)."""
    op = stage.compute_op
    extents = {a.name: e for a, e in zip(op.axes, spatial_extents, strict=True)}
    kinds = {a.name: IteratorKind.SPATIAL for a in op.axes}
    for axis in op.reduce_axes:
        extents[axis.name], kinds[axis.name] = axis.extent, IteratorKind.REDUCE
    for relation in stage.relations:
        if isinstance(relation, SplitRelation):
            factors = relation.extents[1:]
            outer = math.ceil(extents[relation.parent] / math.prod(factors))
            for name, extent in zip(relation.outputs, (outer, *factors), strict=True):
                extents[name], kinds[name] = extent, kinds[relation.parent]
        else:
            extents[relation.fused] = math.prod(extents[p] for p in relation.parents)
            parent_kinds = {kinds[p] for p in relation.parents}
            kinds[relation.fused] = (
                parent_kinds.pop() if len(parent_kinds) == 1 else IteratorKind.MIXED
            )
    return extents, kinds


def _guard_level(condition: Expr, loops: Sequence[_Loop]) -> int:
    """How many of `loops` must be open before `condition` can be tested."""
    used = free_vars(condition)
    return max((k + 1 for k, loop in enumerate(loops) if loop.var in used), default=0)


def _assemble(
    loops: Sequence[_Loop],
    leaf: Stmt,
    guards: Sequence[_Guard],
    before: Mapping[int, list[Stmt]],
    allocations: Mapping[int, list[Buffer]],
) -> Stmt:
    """The loop nest around `leaf`. Level k is the body inside loops 0..k-1: it runs
    `before[k]` then loop k, inside the `allocations[k]`, under the guards that need
    exactly those loops (so each guard sits as far out as it can)."""
    conditions: dict[int, list[Expr]] = {}
    for guard in guards:
        conditions.setdefault(_guard_level(guard.condition, loops), []).append(guard.condition)
    content = leaf
    for k in range(len(loops), -1, -1):
        if k < len(loops):
            content = _for(loops[k], content)
        content = seq(*before.get(k, ()), content)
        for buffer in reversed(allocations.get(k, ())):
            content = Allocate(buffer, content)
        if k in conditions:
            condition = conditions[k][0]
            for more in conditions[k][1:]:
                condition = logical_and(condition, more)
            content = IfThenElse(condition, content)
    return content


def _for(loop: _Loop, body: Stmt) -> Stmt:
    if loop.var is None:
        return body
    extent = Const(loop.extent, INDEX_DTYPE)
    return For(loop.var, extent, loop.for_kind, body, loop.unroll_max_step)


def _combine(combiner: Combiner, accumulator: Expr, value: Expr) -> Expr:
    op = {
        Combiner.SUM: BinaryOp.ADD,
        Combiner.PROD: BinaryOp.MUL,
        Combiner.MAX: BinaryOp.MAX,
        Combiner.MIN: BinaryOp.MIN,
    }[combiner]
    return Binary(op, accumulator, value)


def reduction_identity(combiner: Combiner, dtype: str) -> Const:
    """The value `x` with `combine(x, v) == v` for every `v` of `dtype`."""
    if dtype == "bool":
        return Const(combiner in (Combiner.MIN, Combiner.PROD), dtype)
    if dtype.startswith(("float", "bfloat")):
        floats = {
            Combiner.SUM: 0.0,
            Combiner.PROD: 1.0,
            Combiner.MAX: -math.inf,
            Combiner.MIN: math.inf,
        }
        return Const(floats[combiner], dtype)
    info = np.iinfo(np.dtype(dtype))
    integers = {Combiner.SUM: 0, Combiner.PROD: 1, Combiner.MAX: info.min, Combiner.MIN: info.max}
    return Const(int(integers[combiner]), dtype)
