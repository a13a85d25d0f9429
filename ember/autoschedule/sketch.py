"""Sketch generation: the template-free search space of the auto-scheduler (Ansor's
sketches), the high-level structure of a schedule with its tile sizes left open.

    sketches = generate_sketches(task)      # 1-4 per DAG, deterministic order
    states = sample_initial_population(task, sketches, 256, rng)   # annotate.py

A sketch is a State built from the same transform steps as any schedule; every split
factor in it is a placeholder (1) that random annotation fills. Rules, per stage from
the last to the first (`ember.autoschedule.sketch_rules` answers their questions):

- *inline*: an elementwise stage that is not an output is inlined into its readers,
  except padding, which follows the default schedule's reasoning (materialised when a
  conv broadcasts it, inlined when read as vectors; the other choice is a second
  sketch when the padding feeds a tiled stage);
- *cache_write* + *multi_level_tiling* (+ *fuse_consumer* when the output is an
  inlined epilogue): a reduction with data reuse (conv, dense, matmul) gets
  register-resident accumulators, as the default schedule does. The output is tiled
  `S0 | S1 | S2 | lanes` per spatial axis (S0 fused into the parallel loop), and the
  accumulator stage is computed at its last S1 loop, tiled `R0 | S2' | R1 | S3 |
  lanes` over the region it computes (the SSRSRS structure: S0 S1 outside, R S R S
  inside). One split drives both: bound inference sizes the accumulator's loops from
  the output's tile, and annotation picks the accumulator's factors as divisors of it;
- *multi_level_tiling* alone: a reduction with reuse that is itself an output also
  gets the plain `S0 S1 R0 S2 R1 S3 lanes` tiling at root, accumulating in place;
- *rfactor*: a reduction with less spatial work than cores and a long reduction
  (softmax's row maximum and sum of a single row) gets a sketch where its last reduce
  axis is split and the inner part made a spatial axis of an `.rf` stage (vectors of
  partial results);
- every other stage stays at root: its innermost spatial axis split for the vector
  lanes when its reads allow, reductions with their reduce loops moved inside that.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ember.autoschedule.records import state_key
from ember.autoschedule.sketch_rules import (
    contiguous_in,
    epilogue_output,
    expanded_reads,
    has_data_reuse,
    has_loops,
    index_of,
    is_output,
    is_padding,
    is_reduction,
    needs_rfactor,
    padding_choices,
)
from ember.autoschedule.task import SearchTask
from ember.schedule.state import IteratorKind, State
from ember.schedule.steps import (
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    RfactorStep,
    SplitStep,
    reorder_to,
)
from ember.te.tensor import Tensor

# Rule names in the order a sketch lists them.
RULES = (
    "inline",
    "keep_padding_at_root",
    "rfactor",
    "multi_level_tiling",
    "fuse_consumer",
    "cache_write",
)
# More sketches than this only dilute the samples of the good ones.
MAX_SKETCHES = 8


@dataclass(frozen=True, slots=True)
class Sketch:
    """A schedule structure with placeholder split factors (1): `state` is built by
    steps from `State.initial(task.compute_dag)`; `rules` name the rules that made it."""

    rules: tuple[str, ...]
    state: State


@dataclass(frozen=True, slots=True)
class _Choices:
    """One combination of the sketch-level choices: padding kept at root (by the
    padding tensor's id), tiled anchors given a cache_write, rfactor applied."""

    padding_at_root: frozenset[int]
    cache_write: frozenset[int]
    rfactor: bool


def generate_sketches(task: SearchTask) -> list[Sketch]:
    """The sketches of `task` (module docstring), best guess first."""
    initial = State.initial(task.compute_dag)
    sketches: list[Sketch] = []
    seen: set[str] = set()
    for choices in _all_choices(initial, task):
        sketch = _build(initial, choices, task)
        key = state_key(sketch.state)
        if key not in seen:
            seen.add(key)
            sketches.append(sketch)
        if len(sketches) == MAX_SKETCHES:
            break
    return sketches


def _all_choices(initial: State, task: SearchTask) -> list[_Choices]:
    """Every combination of choices, the default one first: each padding's choices,
    each tiled output anchor with and without cache_write (an anchor with an epilogue
    always gets one), rfactor off then on."""
    paddings = [
        [(id(s.tensor), root) for root in padding_choices(initial, i)]
        for i, s in enumerate(initial.stages)
        if is_padding(s) and not is_output(initial, s.tensor)
    ]
    anchors = [
        [(id(s.tensor), True), (id(s.tensor), False)]
        if is_output(initial, s.tensor)
        else [(id(s.tensor), True)]
        for i, s in enumerate(initial.stages)
        if has_data_reuse(initial, i)
    ]
    rfactor = [False, True] if _rfactor_candidates(initial, task) else [False]
    result = []
    for pad, anchor, rf in itertools.product(
        itertools.product(*paddings), itertools.product(*anchors), rfactor
    ):
        result.append(
            _Choices(
                frozenset(t for t, root in pad if root),
                frozenset(t for t, cache in anchor if cache),
                rf,
            )
        )
    return result


def _rfactor_candidates(state: State, task: SearchTask) -> list[Tensor]:
    return [
        s.tensor
        for i, s in enumerate(state.stages)
        if needs_rfactor(s, task.hardware_params) and not has_data_reuse(state, i)
    ]


def _build(initial: State, choices: _Choices, task: SearchTask) -> Sketch:
    """The sketch for one combination of choices: structural steps first (inline,
    cache_write, rfactor: they insert stages), then the splits of every stage, so
    every split names its stage by its final index (except rfactor's own split)."""
    rules: set[str] = set()
    state = _inline(initial, choices, rules)
    state, tiled, plain = _anchors(state, choices, rules)
    partials: set[int] = set()  # the .rf stages, whose lanes axis is a placeholder
    if choices.rfactor:
        for tensor in _rfactor_candidates(state, task):
            index = index_of(state, tensor)
            state = _rfactor(state, index)
            partials.add(id(state.stages[index].tensor))
            rules.add("rfactor")
    for local_tensor, output_tensor in tiled:
        local, output = index_of(state, local_tensor), index_of(state, output_tensor)
        state = _tile_with_accumulator(state, local, output)
        rules.add("multi_level_tiling")
    for tensor in plain:
        state = _tile_at_root(state, index_of(state, tensor))
        rules.add("multi_level_tiling")
    done = {id(t) for pair in tiled for t in pair} | {id(t) for t in plain}
    state = _split_root_stages(state, done, partials)
    return Sketch(tuple(r for r in RULES if r in rules), state)


def _anchors(
    state: State, choices: _Choices, rules: set[str]
) -> tuple[State, list[tuple[Tensor, Tensor]], list[Tensor]]:
    """Give the chosen reductions with data reuse a cache_write; returns the
    (accumulator, output) pairs and the anchors to tile at root instead."""
    tiled: list[tuple[Tensor, Tensor]] = []
    plain: list[Tensor] = []
    for tensor in [s.tensor for s in reversed(state.stages)]:
        index = index_of(state, tensor)
        if not has_data_reuse(state, index):
            continue
        output = epilogue_output(state, index)
        if id(tensor) in choices.cache_write and output is not None:
            output_tensor = state.stages[output].tensor
            state, local = _cache_write(state, index, output != index, rules)
            tiled.append((local, output_tensor))
        else:
            plain.append(tensor)
    return state, tiled, plain


def _inline(state: State, choices: _Choices, rules: set[str]) -> State:
    for index in range(len(state.stages) - 1, -1, -1):
        stage = state.stages[index]
        if not has_loops(stage) or is_reduction(stage) or is_output(state, stage.tensor):
            continue
        if id(stage.tensor) in choices.padding_at_root:
            rules.add("keep_padding_at_root")
            continue
        state = ComputeInlineStep(index).apply(state)
        rules.add("inline")
    return state


def _cache_write(state: State, index: int, epilogue: bool, rules: set[str]) -> tuple[State, Tensor]:
    """Accumulators in a `.local` stage; with an epilogue, the copy out of them is
    inlined into it (the epilogue runs on the accumulators right before the store)."""
    state = CacheWriteStep(index, "local").apply(state)
    rules.add("cache_write")
    if epilogue:
        state = ComputeInlineStep(index + 1).apply(state)
        rules.add("fuse_consumer")
    return state, state.stages[index].tensor


def _rfactor(state: State, index: int) -> State:
    """Split the longest reduce axis (placeholder factor) and factor out its inner
    part; the `.rf` stage computes one partial result per inner position."""
    stage = state.stages[index]
    reduce = [k for k, it in enumerate(stage.iters) if it.kind is IteratorKind.REDUCE]
    longest = max(reduce, key=lambda k: stage.iters[k].extent)
    state = SplitStep(index, longest, (1,)).apply(state)
    spatial = len(stage.compute_op.axes)
    return RfactorStep(index, longest + 1, spatial).apply(state)


def _split_levels(state: State, index: int, levels: Sequence[int]) -> State:
    """Split every original axis of the stage into `levels[kind]` parts (placeholder
    factors); the innermost spatial axis gets one more part, the vector lanes."""
    op = state.stages[index].compute_op
    last = op.axes[-1].name if op.axes else None
    for axis in op.axes + op.reduce_axes:
        count = levels[1] if axis in op.reduce_axes else levels[0]
        count += 1 if axis.name == last else 0
        if count > 1:
            position = state.stages[index].iter_index(axis.name)
            state = SplitStep(index, position, (1,) * (count - 1)).apply(state)
    return state


def _level(names: Sequence[str], level: int) -> list[str]:
    return [f"{name}.{level}" for name in names]


def _tile_with_accumulator(state: State, local: int, output: int) -> State:
    """Output `S0 S1 S2 lanes`, accumulator `R0 S2' R1 S3 lanes` computed at the
    output's last S1 loop (module docstring)."""
    out_axes = [a.name for a in state.stages[output].compute_op.axes]
    state = _split_levels(state, output, (3, 1))
    order = _level(out_axes, 0) + _level(out_axes, 1) + _level(out_axes, 2)
    state = reorder_to(state, output, [*order, f"{out_axes[-1]}.3"])
    op = state.stages[local].compute_op
    spatial, reduce = [a.name for a in op.axes], [a.name for a in op.reduce_axes]
    state = _split_levels(state, local, (2, 2))
    inner = [*_level(spatial, 1), f"{spatial[-1]}.2"]
    order = _level(reduce, 0) + _level(spatial, 0) + _level(reduce, 1) + inner
    state = reorder_to(state, local, order)
    attach = state.stages[output].iter_index(f"{out_axes[-1]}.1")
    return ComputeAtStep(local, output, attach).apply(state)


def _tile_at_root(state: State, index: int) -> State:
    """`S0 S1 R0 S2 R1 S3 lanes` on a reduction that accumulates in its own output."""
    op = state.stages[index].compute_op
    spatial, reduce = [a.name for a in op.axes], [a.name for a in op.reduce_axes]
    state = _split_levels(state, index, (4, 2))
    order = _level(spatial, 0) + _level(spatial, 1) + _level(reduce, 0) + _level(spatial, 2)
    order += _level(reduce, 1) + _level(spatial, 3) + [f"{spatial[-1]}.4"]
    return reorder_to(state, index, order)


def _split_root_stages(state: State, done: set[int], partials: set[int]) -> State:
    """Every other stage with loops at root: its innermost spatial axis split for the
    vector lanes when every read is contiguous along it, a reduction's reduce loops
    moved inside the lanes' outer loop. (An `.rf` stage's innermost axis is the
    rfactor split's placeholder: split whatever its extent now.)"""
    for index, stage in enumerate(state.stages):
        if not has_loops(stage) or id(stage.tensor) in done or not stage.compute_op.axes:
            continue
        op = stage.compute_op
        last = op.axes[-1]
        short = last.extent < 4 and id(stage.tensor) not in partials
        if short or not contiguous_in(expanded_reads(state, index), last.var, 1):
            continue
        position = stage.iter_index(last.name)
        state = SplitStep(index, position, (1,)).apply(state)
        if op.reduce_axes:
            spatial = [a.name for a in op.axes[:-1]]
            reduce = [a.name for a in op.reduce_axes]
            names = [*spatial, f"{last.name}.0", *reduce, f"{last.name}.1"]
            state = reorder_to(state, index, names)
    return state
