"""FeaturePool: the rows of every state equal extract_features, in order, whether a
helper process extracts a share or not, and each state keeps its program key; a helper
that dies mid-batch costs a warning and its share is extracted here; XGBModel predicts
the same with and without helpers."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sketch_cases import task_of

from ember.autoschedule import generate_sketches
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.feature_pool import MIN_SHARE, FeaturePool
from ember.autoschedule.features import extract_features_batch
from ember.autoschedule.measure import MeasureInput, MeasureResult
from ember.autoschedule.program import _PROGRAM_KEY, program_key
from ember.autoschedule.xgb_model import XGBModel
from ember.schedule import State


def sampled_states(count: int, seed: int = 0) -> list[State]:
    task = task_of("conv2d_3x3")
    return sample_initial_population(task, generate_sketches(task), count, random.Random(seed))


def assert_same_rows(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_helper_extracts_a_share_in_order() -> None:
    states = sampled_states(40)
    want = extract_features_batch(states)
    with FeaturePool(helpers=1) as pool:
        assert_same_rows(pool.extract(states), want)
        assert len(pool._workers) == 1  # it was used
        assert_same_rows(pool.extract(states[:MIN_SHARE]), want[:MIN_SHARE])  # not split
    assert not pool._workers  # closed


def test_each_state_keeps_the_program_key_of_its_extraction() -> None:
    states = sampled_states(40, seed=4)
    copies = sampled_states(40, seed=4)  # equal states, nothing kept on them
    with FeaturePool(helpers=1) as pool:
        pool.extract(states)  # half of them in the helper
    for state, copy in zip(states, copies, strict=True):
        assert _PROGRAM_KEY in state.__dict__ and _PROGRAM_KEY not in copy.__dict__
        assert program_key(state) == program_key(copy)  # kept = lowered again here
    assert len({program_key(s) for s in states}) > 1  # the keys tell programs apart


def test_small_batches_and_no_helpers_stay_in_this_process() -> None:
    states = sampled_states(12)
    with FeaturePool(helpers=1) as pool:
        assert_same_rows(
            pool.extract(states[: 2 * MIN_SHARE - 1]),
            extract_features_batch(states[: 2 * MIN_SHARE - 1]),
        )
        assert not pool._started  # too few states to split: no helper was started
    with FeaturePool(helpers=0) as pool:
        assert_same_rows(pool.extract(states), extract_features_batch(states))
        assert not pool._workers


def test_a_dead_helper_costs_a_warning_not_the_rows() -> None:
    states = sampled_states(40, seed=1)
    want = extract_features_batch(states)
    with FeaturePool(helpers=1) as pool:
        assert_same_rows(pool.extract(states), want)
        pool._workers[0].kill()  # as if it crashed between batches
        with pytest.warns(UserWarning, match="a feature helper failed"):
            assert_same_rows(pool.extract(states), want)
        assert not pool._workers  # dropped; later batches run here
        assert_same_rows(pool.extract(states), want)


def test_xgb_model_predicts_the_same_with_helpers() -> None:
    task = task_of("conv2d_3x3")
    states = sampled_states(48, seed=2)
    rng = random.Random(3)
    inputs = [MeasureInput(task, state) for state in states[:32]]
    results = [MeasureResult((rng.uniform(1e-4, 1e-3),)) for _ in inputs]
    predictions = []
    for helpers in (0, 1):
        model = XGBModel(seed=0, num_warmup_samples=16, feature_helpers=helpers)
        model.update(inputs, results)
        predictions.append(model.predict(task, states))
        model.close()
    np.testing.assert_array_equal(predictions[0], predictions[1])
