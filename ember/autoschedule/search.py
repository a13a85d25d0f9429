"""Evolutionary search: which candidates of one task to measure next.

    search = EvolutionarySearch(task, RandomModel(seed=0))
    batch = search.next_batch(16)          # States never measured before
    ... measure them ...
    search.record_measured(states, costs)  # feeds the next generations

Each round starts from a fresh random population (sketches of the task, randomly
annotated) plus the fastest states measured so far, then evolves it for a few
generations: parents are drawn with probability proportional to the cost model's
score, children are one mutation away (tile sizes, parallel granularity, unroll,
compute location). The round's batch is the best-scored states nobody has measured,
except an epsilon share drawn at random from the fresh population, so that a wrong
model cannot starve parts of the space; a task's first round measures its seeds and a
random sample (`first_round_model`), unless the cost model is pretrained. States are
identified by their step list (what a record stores), so a state loaded from a log is
never measured again, and by the program they lower to (`program_key`): a state whose
program was measured, or is already in the batch, is passed over, since it would only
measure that program again.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.cost_model import CostModel
from ember.autoschedule.mutate import mutate
from ember.autoschedule.program import program_key
from ember.autoschedule.records import state_key
from ember.autoschedule.sketch import Sketch, generate_sketches
from ember.autoschedule.task import SearchTask
from ember.errors import EmberError
from ember.schedule.state import State


class SearchError(EmberError):
    """The search space of a task is empty (no sketch yields a legal state)."""


@dataclass(frozen=True, slots=True)
class SearchParams:
    """Knobs of the evolutionary search (Ansor's defaults scaled to Python speed)."""

    population: int = 64  # random states sampled at the start of each round
    generations: int = 3  # rounds of mutation and selection before picking a batch
    # Whether a task's first round (nothing of it measured yet) asks the cost model.
    # By default it measures the seeds and a random sample: a model trained on other
    # tasks picked no better than chance for a task it had not seen (ResNet-18,
    # 2000-trial runs: after every task's first round, estimated 7.39-7.78 ms with the
    # model's picks in six runs, 7.45-7.65 ms with random ones in three; BENCHMARKS.md),
    # and evolving the population for it cost a sixth of the search.
    first_round_model: bool = False
    mutation_probability: float = 0.85  # else the parent survives unchanged
    elite_measured: int = 16  # fastest measured states that join each population
    eps_greedy: float = 0.05  # share of each batch drawn at random, not by score


class EvolutionarySearch:
    """The search policy of one task (see the module docstring)."""

    def __init__(
        self,
        task: SearchTask,
        cost_model: CostModel,
        params: SearchParams | None = None,
        seed: int | None = None,
        initial_states: Sequence[State] = (),
    ) -> None:
        self.task = task
        self.cost_model = cost_model
        self.params = params or SearchParams()
        self.rng = random.Random(seed)
        self.sketches: list[Sketch] = generate_sketches(task)
        if not self.sketches:
            raise SearchError(f"no sketch for task {task.desc or task.workload_key}")
        self.measured: set[str] = set()
        self.measured_programs: set[str] = set()
        self._programs: dict[str, str | None] = {}  # state key -> program key
        # (cost, tie-breaker, state) of valid measurements, fastest first when sorted.
        self._measured_costs: list[tuple[float, int, State]] = []
        # Seeds (the default schedule, a loaded best) join the first population.
        self._seeds = list(initial_states)

    # -- what was measured ---------------------------------------------------------------

    def record_measured(self, states: Iterable[State], costs: Iterable[float]) -> None:
        """Mark states as measured, with their mean cost (inf for an error)."""
        for state, cost in zip(states, costs, strict=True):
            key = state_key(state)
            self.measured.add(key)
            program = self._program(state, key)
            if program is not None:
                self.measured_programs.add(program)
            if math.isfinite(cost):
                self._measured_costs.append((cost, len(self._measured_costs), state))

    def mark_measured(self, keys: Iterable[str]) -> None:
        """Mark states as measured by key only (records whose steps no longer replay)."""
        self.measured.update(keys)

    def best_measured(self, count: int) -> list[State]:
        return [state for _, _, state in heapq.nsmallest(count, self._measured_costs)]

    # -- one round -----------------------------------------------------------------------

    def next_batch(self, count: int) -> list[State]:
        """Up to `count` states never measured: the best-scored of an evolved population
        plus an epsilon-greedy share of random ones (fewer only when the space is
        exhausted)."""
        fresh = sample_initial_population(
            self.task, self.sketches, self.params.population, self.rng
        )
        # Seeds are measured first, whatever the model thinks: the default schedule
        # is the speed a tuned build must never fall below.
        chosen: set[str] = set()  # state and program keys of the batch
        seeds, self._seeds = self._take(self._seeds, count, chosen), []
        population = self._unique([*seeds, *self.best_measured(self.params.elite_measured), *fresh])
        # A pretrained model (XGBModel.set_base) knows other tasks' measurements: it
        # picks the first round too, the point of warm-starting.
        informed = self.params.first_round_model or getattr(self.cost_model, "pretrained", False)
        explore = not self.measured and not informed
        best = [] if explore else self._evolve(population, count)
        num_random = count - len(seeds)
        if not explore:
            num_random = min(num_random, max(0, round(count * self.params.eps_greedy)))
        batch = seeds + self._take(best, count - len(seeds) - num_random, chosen)
        randoms = [s for s in fresh if state_key(s) not in chosen]
        self.rng.shuffle(randoms)
        batch += self._take(randoms, count - len(batch), chosen)
        if len(batch) < count:  # too few random leftovers: fill from the scored ones
            best = best or self._evolve(population, count)
            batch += self._take(best, count - len(batch), chosen)
        return batch

    def _evolve(self, population: list[State], count: int) -> list[State]:
        """States of every generation, best predicted first, unmeasured only."""
        # Keep the best of all generations (a child may be worse than its parent).
        pool: dict[str, tuple[float, State]] = {}
        for generation in range(self.params.generations + 1):
            if not population:
                break
            scores = self.cost_model.predict(self.task, population)
            for state, score in zip(population, scores, strict=True):
                key = state_key(state)
                if key not in self.measured:
                    pool[key] = (float(score), state)
            if generation == self.params.generations:
                break
            population = self._next_generation(population, scores)
        ranked = sorted(pool.values(), key=lambda item: -item[0])
        return [state for _, state in ranked[: max(count * 4, count + 8)]]

    def _next_generation(self, population: list[State], scores: np.ndarray) -> list[State]:
        weights = _selection_weights(scores)
        children: list[State] = []
        attempts = 0
        while len(children) < len(population) and attempts < 4 * len(population):
            attempts += 1
            parent = population[self._draw(weights)]
            if self.rng.random() < self.params.mutation_probability:
                child = mutate(self.task, parent, self.rng)
                children.append(child if child is not None else parent)
            else:
                children.append(parent)
        return self._unique(children)

    def _draw(self, weights: np.ndarray) -> int:
        index = np.searchsorted(np.cumsum(weights), self.rng.random() * weights.sum())
        return min(int(index), len(weights) - 1)

    def _take(self, states: Sequence[State], count: int, chosen: set[str]) -> list[State]:
        """Up to `count` of `states`, in order, whose step list and program are neither
        measured nor in `chosen` (the batch's keys so far, which this extends)."""
        taken: list[State] = []
        for state in states:
            if len(taken) >= count:
                break
            key = state_key(state)
            if key in self.measured or key in chosen:
                continue
            chosen.add(key)
            program = self._program(state, key)
            if program is not None:
                if program in self.measured_programs or program in chosen:
                    continue
                chosen.add(program)
            taken.append(state)
        return taken

    def _program(self, state: State, key: str) -> str | None:
        """`program_key(state)`, computed once per state (`key`: its state key)."""
        if key not in self._programs:
            self._programs[key] = program_key(state)
        return self._programs[key]

    @staticmethod
    def _unique(states: Iterable[State]) -> list[State]:
        seen: dict[str, State] = {}
        for state in states:
            seen.setdefault(state_key(state), state)
        return list(seen.values())


def _selection_weights(scores: np.ndarray) -> np.ndarray:
    """Selection probability ~ score, shifted to be positive (scores may be negative
    or all equal); every state keeps a small chance."""
    scores = np.asarray(scores, dtype=np.float64)
    scores = np.where(np.isfinite(scores), scores, np.nan)
    if np.all(np.isnan(scores)):
        return np.ones(len(scores))
    low, high = np.nanmin(scores), np.nanmax(scores)
    span = high - low if high > low else 1.0
    normalised = np.nan_to_num((scores - low) / span, nan=0.0)
    return normalised + 0.05
