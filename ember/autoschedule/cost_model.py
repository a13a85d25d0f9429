"""Cost models: what the search asks before it measures.

A model scores candidate States of a task (higher = predicted faster) and learns from
measurements. The evolutionary search (`ember.autoschedule.search`) only calls the two
methods below, so a learned model replaces `RandomModel` without changes there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ember.autoschedule.measure import MeasureInput, MeasureResult
from ember.autoschedule.task import SearchTask
from ember.schedule.state import State


class CostModel(Protocol):
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured candidates (errors included: they are slow)."""
        ...

    def predict(self, task: SearchTask, states: Sequence[State]) -> np.ndarray:
        """One score per state, higher for a state predicted to run faster."""
        ...


class RandomModel:
    """Scores uniformly at random: the search degenerates to random sampling plus
    mutation, the baseline a learned model must beat."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        del inputs, results  # nothing to learn

    def predict(self, task: SearchTask, states: Sequence[State]) -> np.ndarray:
        del task
        return np.array([self._rng.random() for _ in states], dtype=np.float64)
