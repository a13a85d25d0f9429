"""A small dense + ReLU search task and fake measurers for tests of the tuning loop and
the task scheduler: costs are a fixed function of the state (and a per-task scale), so
what the loop does with them can be asserted exactly."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence

from ember import te
from ember.autoschedule import ErrorKind, SearchTask
from ember.autoschedule.measure import BuildResult, MeasureInput, MeasureResult
from ember.autoschedule.records import state_key
from ember.autoschedule.search import SearchParams
from ember.schedule import State

SMALL_SEARCH = SearchParams(population=24, generations=1)


def dense_relu_task(m: int = 16, n: int = 32, k: int = 24, desc: str = "dense_relu") -> SearchTask:
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    rk = te.reduce_axis(k, "k")
    dense = te.compute(
        (m, n), lambda i, j: te.reduce_sum(data[i, rk] * weight[j, rk], rk), name="T_dense"
    )
    out = te.compute((m, n), lambda i, j: te.maximum(dense[i, j], 0.0), name="T_relu")
    return SearchTask.create(te.ComputeDAG([out]), "llvm", desc=desc)


def state_factor(state: State) -> float:
    """A pseudo-random factor in [1, 2), fixed per state."""
    digest = hashlib.sha256(state_key(state).encode()).digest()
    return 1 + int.from_bytes(digest[:4], "little") / 2**32


class FakeBuilder:
    """Builds nothing; remembers (task desc, state key) of every candidate."""

    def __init__(self) -> None:
        self.built: list[tuple[str, str]] = []

    @property
    def keys(self) -> list[str]:
        return [key for _, key in self.built]

    def build(
        self, inputs: Sequence[MeasureInput], known_code: Collection[str] | None = None
    ) -> list[BuildResult]:
        self.built += [(i.task.desc, state_key(i.state)) for i in inputs]
        return [BuildResult("/nonexistent/candidate.so", "k_packed", ()) for _ in inputs]


class FakeRunner:
    """Cost = the task's scale (by desc; 1 ms when not given) x `state_factor`;
    `check` calls the states in `wrong` wrong and remembers what it checked."""

    def __init__(
        self, scales: dict[str, float] | None = None, wrong: set[str] | None = None
    ) -> None:
        self.scales = scales or {}
        self.wrong = wrong or set()
        self.checked: list[str] = []

    def run(
        self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
    ) -> list[MeasureResult]:
        return [
            MeasureResult((self.scales.get(i.task.desc, 1e-3) * state_factor(i.state),))
            for i in inputs
        ]

    def check(self, measure_input: MeasureInput, build_result: BuildResult) -> MeasureResult:
        key = state_key(measure_input.state)
        self.checked.append(key)
        if key in self.wrong:
            return MeasureResult((), ErrorKind.WRONG_ANSWER, "max abs error 1.0")
        return MeasureResult(())
