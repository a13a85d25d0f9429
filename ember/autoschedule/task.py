"""Search tasks: a network split into the fused groups the auto-scheduler tunes.

    tasks, weights = extract_tasks(graph, params, Target("llvm"))
    for index, (task, weight) in enumerate(zip(tasks, weights)):
        print(format_task(index, task, weight))

A task is the ComputeDAG of one fused group plus the target and its hardware
parameters. The graph goes through exactly the passes `ember.build` runs
(`ember.build.optimize`, then `fuse`), so every task is a kernel the build will
compile; groups with the same workload key are one task, and its weight counts them
(end-to-end latency ~ sum(latency[t] * weight[t])). A task also knows which DAG inputs
are the group's constant params (`weight_inputs`), so a runner can time a candidate
with its weights cold and its activations warm, as in the network.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ember.autoschedule.hardware import HardwareParams
from ember.errors import EmberError
from ember.graph.ir import Graph
from ember.graph.passes import FusedGroup, GroupKind, fuse
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.te.tensor import ComputeOp
from ember.topi import NOT_EXPRESSIBLE, group_to_dag

if TYPE_CHECKING:  # the tuning modules import this one
    from ember.autoschedule.cost_model import CostModel
    from ember.autoschedule.records import MeasureRecord
    from ember.autoschedule.tuning import TuneResult, TuningOptions
    from ember.schedule.state import State


@dataclass(frozen=True, slots=True)
class SearchTask:
    """One DAG to tune for one target. Equal tasks have the same workload key, target
    and hardware parameters (the DAG is determined by the key). `weight_inputs`: the
    positions in `compute_dag.inputs` of the constant params (weights), not part of
    the identity."""

    compute_dag: ComputeDAG = field(compare=False)
    workload_key: str
    target: Target
    hardware_params: HardwareParams
    flop_count: int = field(compare=False)
    desc: str = field(default="", compare=False)  # the first group's name
    weight_inputs: frozenset[int] = field(default=frozenset(), compare=False)

    @classmethod
    def create(
        cls,
        dag: ComputeDAG,
        target: Target | str,
        hardware_params: HardwareParams | None = None,
        desc: str = "",
        weight_inputs: Iterable[int] = (),
    ) -> SearchTask:
        """A task for `dag`; hardware parameters detected from `target` unless given.
        `weight_inputs`: positions in `dag.inputs` of its constant params."""
        target = target if isinstance(target, Target) else Target(target)
        params = hardware_params or HardwareParams.for_target(target)
        positions = frozenset(weight_inputs)
        if not all(0 <= index < len(dag.inputs) for index in positions):
            raise EmberError(
                f"weight_inputs {sorted(positions)} must be positions in the DAG's "
                f"{len(dag.inputs)} inputs"
            )
        return cls(dag, dag.workload_key, target, params, dag.flop_count, desc, positions)

    def tune(
        self,
        options: TuningOptions | None = None,
        cost_model: CostModel | None = None,
        load_log_file: str | os.PathLike[str] | None = None,
        seed: int | None = None,
    ) -> TuneResult:
        """Search for this task's fastest State (`ember.autoschedule.tuning.tune_task`)."""
        from ember.autoschedule.tuning import tune_task

        return tune_task(self, options, cost_model, load_log_file=load_log_file, seed=seed)

    def apply_best(self, log: str | os.PathLike[str] | Iterable[MeasureRecord]) -> State:
        """The fastest valid State for this task in a records file (or records)."""
        from ember.autoschedule.tuning import apply_best

        return apply_best(self, log)


def extract_tasks(
    graph: Graph,
    params: Mapping[str, np.ndarray] | None,
    target: Target | str,
    include_simple_tasks: bool = False,
    hardware_params: HardwareParams | None = None,
) -> tuple[list[SearchTask], list[int]]:
    """The search tasks of `graph` for `target` and how often each occurs.

    Tasks come in the order their first group runs. Simple groups (no reduction:
    layout transposes, reshapes, elementwise-only groups) are left out unless
    `include_simple_tasks`: their default schedule is already memory-bound and close
    to the best. Groups no kernel expresses (run by a C helper) are never tasks.
    A task's `weight_inputs` are those of its first group (the inputs that are graph
    params)."""
    # The build's own checks and passes: one code path (imported here because the
    # build applies tuning records, which depend on this package).
    from ember.build import checked_params, optimize

    target = target if isinstance(target, Target) else Target(target)
    hardware = hardware_params or HardwareParams.for_target(target)
    optimized, arrays = optimize(graph, checked_params(graph, params), target)
    fused = fuse(optimized, arrays)
    tasks: dict[str, SearchTask] = {}
    weights: dict[str, int] = {}
    for group in fused.groups:
        if _runs_in_helper(group):
            continue
        dag, values = group_to_dag(group)
        if not include_simple_tasks and is_simple(dag):
            continue
        key = dag.workload_key
        if key not in tasks:
            param_names = {value.name for value in group.params}
            weight_inputs = [i for i, value in enumerate(values) if value.name in param_names]
            tasks[key] = SearchTask.create(
                dag, target, hardware, desc=group.name, weight_inputs=weight_inputs
            )
        weights[key] = weights.get(key, 0) + 1
    return list(tasks.values()), [weights[key] for key in tasks]


def is_simple(dag: ComputeDAG) -> bool:
    """Whether no stage of `dag` reduces: an injective-only group, nothing to tile."""
    return not any(
        isinstance(tensor.op, ComputeOp) and tensor.op.reduce_axes for tensor in dag.compute_tensors
    )


def format_task(index: int, task: SearchTask, weight: int | None = None) -> str:
    """The task as the seed prints it: a header with the workload key, the ComputeDAG,
    then (Ember's addition) its FLOPs and weight."""
    lines = [f"========== Task {index} (workload key: {task.workload_key}) =========="]
    lines.append(str(task.compute_dag))
    extra = f"# {task.desc}: {task.flop_count} FLOPs"
    if weight is not None:
        extra += f", weight {weight}"
    lines.append(extra)
    return "\n".join(lines)


def _runs_in_helper(group: FusedGroup) -> bool:
    # Same rule as ember.build's plan: such a group has no DAG and no kernel.
    return group.kind == GroupKind.OPAQUE and group.nodes[0].op in NOT_EXPRESSIBLE
