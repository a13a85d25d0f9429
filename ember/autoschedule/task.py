"""Search tasks: a network split into the fused groups the auto-scheduler tunes.

    tasks, weights = extract_tasks(graph, params, Target("llvm"))
    for index, (task, weight) in enumerate(zip(tasks, weights)):
        print(format_task(index, task, weight))

A task is the ComputeDAG of one fused group plus the target and its hardware
parameters. The graph is split by `ember.partition`, as `ember.build` splits it, so
every task is a kernel the build will compile; groups with the same workload key are
one task, and its weight counts them
(end-to-end latency ~ sum(latency[t] * weight[t])). A task also knows which DAG inputs
are the group's constant params (`weight_inputs`), so a runner can time a candidate
with its weights cold and its activations warm, as in the network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ember.autoschedule.hardware import HardwareParams
from ember.errors import EmberError
from ember.graph.ir import Graph
from ember.partition import partition
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.te.tensor import ComputeOp


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
    target = target if isinstance(target, Target) else Target(target)
    hardware = hardware_params or HardwareParams.for_target(target)
    tasks: list[SearchTask] = []
    weights: list[int] = []
    index_of: dict[str, int] = {}  # one task per workload key (kernels may differ in views)
    for kernel in partition(graph, params, target).kernels:  # the build's own split
        if not include_simple_tasks and is_simple(kernel.dag):
            continue
        if kernel.workload_key in index_of:
            weights[index_of[kernel.workload_key]] += kernel.count
            continue
        index_of[kernel.workload_key] = len(tasks)
        tasks.append(
            SearchTask.create(
                kernel.dag,
                target,
                hardware,
                desc=kernel.group.name,
                weight_inputs=kernel.weight_inputs,
            )
        )
        weights.append(kernel.count)
    return tasks, weights


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
