"""A fused group as a compiled kernel: the per-group build path of code generation.

    compiled = build_group(group, Target("llvm"))     # group_to_dag -> default_schedule
    outputs = compiled(*arrays)                        #   -> ember.backend.compile_kernel

`arrays` are the group's inputs in `group.inputs` order (data inputs and params
alike, what the kernel reads); the call allocates and returns the outputs in
`group.outputs` order. `compiled.run(values)` does the same by value name.
`build_groups` builds many groups at once, compiling their sources in parallel (each
kernel is a library of its own in the toolchain's content-hash cache, so a rebuilt
group costs no compile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ember.backend import CompiledKernel, Kernel, compile_kernel
from ember.errors import ToolchainError
from ember.graph.ir import Value
from ember.graph.passes.fuse import FusedGroup
from ember.loop.ir import PrimFunc
from ember.partition import kernel_name
from ember.schedule.default import default_schedule
from ember.schedule.state import State
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.topi import group_to_dag


@dataclass(frozen=True, slots=True, eq=False)
class CompiledGroup:
    """A group's kernel and how it was made (DAG, schedule, loop IR)."""

    group: FusedGroup
    dag: ComputeDAG
    inputs: tuple[Value, ...]  # the group value each kernel input argument stands for
    state: State
    func: PrimFunc
    kernel: Kernel

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.group.outputs

    def __call__(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run on the inputs (in `inputs` order); returns fresh output arrays."""
        results = tuple(np.empty(v.shape, dtype=v.dtype) for v in self.outputs)
        self.kernel(*(np.asarray(a, order="C") for a in arrays), *results)
        return results

    def run(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run with inputs looked up by value name; returns outputs by value name."""
        results = self(*(values[value.name] for value in self.inputs))
        return {value.name: array for value, array in zip(self.outputs, results, strict=True)}


def build_group(group: FusedGroup, target: Target) -> CompiledGroup:
    """Compile one fused group with its default schedule for `target` (this host)."""
    return build_groups([group], target)[0]


def build_groups(groups: Sequence[FusedGroup], target: Target) -> list[CompiledGroup]:
    """Compile fused groups with their default schedules; they compile in parallel
    (the compiler runs outside the GIL), one cached library each."""
    if not target.is_host:
        raise ToolchainError(
            f"target {target} does not run on this machine: build_groups loads the kernels "
            "it compiles; cross-compile with ember.backend.compile_kernel instead"
        )

    def build(group: FusedGroup) -> tuple[ComputeDAG, tuple[Value, ...], State, CompiledKernel]:
        dag, inputs = group_to_dag(group)
        state = default_schedule(dag, target)
        name = kernel_name(group, dag.workload_key)  # as ember.build names it
        return dag, inputs, state, compile_kernel(state, target, name)

    with ThreadPoolExecutor(max_workers=max(1, min(len(groups), 8))) as pool:
        built = list(pool.map(build, groups))
    return [
        CompiledGroup(group, dag, inputs, state, compiled.kernel.lowered, compiled.load())
        for group, (dag, inputs, state, compiled) in zip(groups, built, strict=True)
    ]
