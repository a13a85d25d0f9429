"""What the emulated-board tests (AArch64 and 32-bit ARM) check alike: every kernel
family of the kernel tests, built for the board's target under its default schedule,
run on the board and compared with the DAG's reference evaluation there."""

from __future__ import annotations

from ember.autoschedule import LocalBuilder, extract_tasks
from ember.autoschedule.measure import MeasureInput, release
from ember.autoschedule.rpc_runner import RPCRunner
from ember.schedule.default import default_schedule


def check_every_kernel_family(
    address: str, key: str, target: str, boards: int, timeout: float
) -> None:
    """Each op case of tests/test_kernels.py as a task for `target`, checked on the
    `boards` boards of `key` behind the tracker at `address` (HOST:PORT)."""
    from test_kernels import CASES, case_graph

    inputs, seen = [], set()
    for case in CASES:
        graph, params, _ = case_graph(case)
        tasks, _ = extract_tasks(graph, params, target, include_simple_tasks=True)
        for task in tasks:
            if task.workload_key not in seen:
                seen.add(task.workload_key)
                inputs.append(MeasureInput(task, default_schedule(task.compute_dag, task.target)))
    host, port = address.split(":")
    runner = RPCRunner(key, host, int(port), n_parallel=boards, min_repeat_ms=0, timeout=timeout)
    with LocalBuilder() as builder, runner:
        built = builder.build(inputs)
        assert all(b.ok for b in built), [b.message for b in built if not b.ok][:3]
        verdicts = [runner.check(i, b) for i, b in zip(inputs, built, strict=True)]
        release(built)
    wrong = [
        (i.task.desc, v.message)
        for i, v in zip(inputs, verdicts, strict=True)
        if v.error.value != "none"
    ]
    assert not wrong, wrong[:5]
    assert len(inputs) > 100
