"""`XGBModel`: the learned cost model, gradient-boosted trees over program features.

    model = XGBModel(seed=0)
    tune_task(task, options, cost_model=model)     # learns from every round
    model.save("model.npz"); model.load("model.npz")
    model.update_from_file("conv.json", tasks)     # warm start from a tuning log

What it learns. Each measured State becomes its statements' feature rows
(`ember.autoschedule.features`) and a label: the task's best measured cost divided by
this state's cost, i.e. its throughput (flops / cost) normalised by the task's best
(1 for the best, 0 for an error), so tasks of any size share one model. The trees
score each statement; a program's score is the sum over its statements (Ansor's
"pack-sum": a program costs what all its loop nests cost, and one model serves
programs with any number of statements without padding or averaging their rows).

The objective (`loss`). "rank" (the default): RankNet's pairwise logistic loss on the
summed scores, over pairs of programs *of the same task* with different labels (all
pairs of a small task, 256 random partners per program beyond), as a custom XGBoost
objective whose gradient for a statement row is its program's. The search only uses
the order of the scores (selection weights, the best-scored batch), and normalised
throughputs are very skewed (most random schedules are several times slower than the
best, where squared error sees only near-zero labels), so a loss on order fits the
use. "regression": weighted squared error of the summed score against the label,
weight `label + 0.1` (fast programs count most, errors still count). Measured on
480 timed schedules of a 3x3 conv (train 400, rank 180 held out): held-out Kendall tau
0.70 for "rank", 0.67 for "regression"; both put the true best in their top ten.

Training restarts from scratch at every update, 60 boosting rounds at learning rate
0.3: on the 2000 records of a ResNet-18 run (train on the first 1500, rank the last
500 per task) as good as 100 rounds at 0.2 (held-out tau 0.18 both; late samples are
all near the best) in 35% less time (0.16 s against 0.25 s a retrain at 1500 samples),
and the search retrains every round. On the 3x3 conv's data above fed 16 at a time
(100 rounds at 0.2): from scratch, tau 0.70 after 400 samples (0.4 s a retrain at 400,
one thread); boosting 10 more rounds on the previous model each update, 0.57 and ever
more trees. The labels move whenever a task's best improves, so an old model keeps
fitting stale targets. XGBoost runs on `num_threads` threads (default 1): on a few
hundred samples its per-node thread synchronisation costs more than it saves, and
on a machine busy with measurements it costs whole scheduler time slices (5x slower
training with two threads on a loaded two-core machine).

Before `num_warmup_samples` valid measurements the model predicts random scores, like
`RandomModel`, so the search still explores. A state that does not lower scores below
every other. Feature rows are cached by (workload key, step list), so the states that
survive a generation of the search, and measured ones, are not lowered again; the new
states of a prediction are extracted on every core (`FeaturePool`, `feature_helpers`
helper processes, default one per core beyond the first).

`save` writes one `.npz` file with the booster (XGBoost's JSON) and the training data,
so a loaded model predicts the same and keeps learning.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xgboost as xgb

from ember.autoschedule.feature_pool import FeaturePool
from ember.autoschedule.features import FEATURE_NAMES, extract_features
from ember.autoschedule.measure import MeasureInput, MeasureResult
from ember.autoschedule.records import load_records, state_key
from ember.autoschedule.task import SearchTask
from ember.errors import EmberError
from ember.schedule.state import ScheduleError, State
from ember.schedule.steps import replay

LOSSES = ("rank", "regression")
# Weight of a label-0 sample (an error) relative to the best program's 1 + this.
ERROR_WEIGHT = 0.1
# Feature rows kept per (task, state) for reuse across generations of a search.
FEATURE_CACHE_SIZE = 50_000
SAVE_FORMAT_VERSION = 1
# Random partners per sample in the pairwise loss once a task has more samples.
MAX_PAIRS_PER_SAMPLE = 256


class CostModelError(EmberError):
    """A saved cost model cannot be loaded, or bad model settings."""


@dataclass(frozen=True, slots=True)
class _Sample:
    """One measured state: its feature rows and mean cost (inf for an error)."""

    task_key: str
    features: np.ndarray
    cost: float


class XGBModel:
    """The CostModel of the module docstring. `num_boost_round`, `max_depth` and
    `learning_rate` are XGBoost's; `seed` fixes the trees, the sampled pairs and the
    warm-up's random scores."""

    def __init__(
        self,
        seed: int | None = None,
        num_warmup_samples: int = 64,
        num_boost_round: int = 60,
        max_depth: int = 6,
        learning_rate: float = 0.3,
        loss: str = "rank",
        num_threads: int = 1,
        feature_helpers: int | None = None,
    ) -> None:
        if loss not in LOSSES:
            raise CostModelError(f"XGBModel loss {loss!r} is unknown; use one of {LOSSES}")
        if num_warmup_samples < 0 or num_boost_round < 1 or max_depth < 1:
            raise CostModelError(
                "XGBModel needs num_warmup_samples >= 0, num_boost_round >= 1 and "
                f"max_depth >= 1 (got {num_warmup_samples}, {num_boost_round}, {max_depth})"
            )
        self.seed = seed
        self.loss = loss
        self.num_warmup_samples = num_warmup_samples
        self.num_boost_round = num_boost_round
        self.params: dict[str, object] = {
            "max_depth": max_depth,
            "eta": learning_rate,
            "gamma": 1e-4,
            "min_child_weight": 0.0,
            "base_score": 0.0,
            "tree_method": "hist",
            "seed": seed or 0,
            "verbosity": 0,
            "nthread": num_threads,
        }
        self._rng = random.Random(seed)
        self._samples: list[_Sample] = []
        self._booster: xgb.Booster | None = None
        self._base: xgb.Booster | None = None  # a pretrained model (set_base), kept as is
        self._cache: dict[tuple[str, str], np.ndarray] = {}
        self._pool = FeaturePool(feature_helpers)

    @property
    def num_valid_samples(self) -> int:
        return sum(1 for s in self._samples if math.isfinite(s.cost))

    @property
    def trained(self) -> bool:
        return self._booster is not None

    @property
    def pretrained(self) -> bool:
        """Whether predictions start from a base model (`set_base`)."""
        return self._base is not None

    def set_base(self, base: XGBModel | str | os.PathLike[str]) -> None:
        """Warm-start from `base`, a model trained on other records (an XGBModel, or a
        file `save` wrote): its trees stay as they are and score every program from
        the first round on, where this model would score at random until warm-up;
        this model's own trees, trained on what it measures, are fitted on top of
        them (XGBoost's base margin), so they learn what the base has wrong for this
        machine and these tasks."""
        if not isinstance(base, XGBModel):
            loaded = XGBModel()
            loaded.load(base)
            base = loaded
        if base._booster is None:
            raise CostModelError("the base model is not trained; train it on records first")
        if base._base is not None:  # a warm-started base: both its layers of trees
            raise CostModelError(
                "the base model is itself warm-started; save a model trained from scratch"
            )
        self._base = base._booster

    # -- the CostModel interface ---------------------------------------------------------

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Add the measurements (errors as throughput 0) and retrain once enough are
        valid."""
        by_task: dict[str, list[State]] = {}
        for measure_input in inputs:
            by_task.setdefault(measure_input.task.workload_key, []).append(measure_input.state)
        for task_key, states in by_task.items():  # a resumed log: thousands, on every core
            self._extract_missing(task_key, states)
        for measure_input, result in zip(inputs, results, strict=True):
            task_key = measure_input.task.workload_key
            features = self._features(task_key, measure_input.state)
            self._samples.append(_Sample(task_key, features, result.median_cost))
        if self._samples and self.num_valid_samples >= max(self.num_warmup_samples, 1):
            self._train()

    def predict(self, task: SearchTask, states: Sequence[State]) -> np.ndarray:
        """One score per state, higher for a state predicted faster (the summed
        statement scores); random before the model is trained, unless it has a base."""
        if self._booster is None and self._base is None:
            return np.array([self._rng.random() for _ in states], dtype=np.float64)
        if not states:
            return np.zeros(0)
        self._extract_missing(task.workload_key, states)
        features = [self._features(task.workload_key, state) for state in states]
        return self.predict_features(features)

    def close(self) -> None:
        """Stop the feature helper processes (they restart when needed)."""
        self._pool.close()

    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Program scores from feature rows (`extract_features` of each state)."""
        if self._booster is None and self._base is None:
            raise CostModelError("the model is not trained yet; call update() first")
        rows = np.concatenate(features)
        matrix = xgb.DMatrix(rows)
        base = self._base_margin(matrix)
        if base is not None:
            matrix.set_base_margin(base)
        if self._booster is not None:
            per_row = self._booster.predict(matrix, output_margin=True)
        else:
            per_row = base if base is not None else np.zeros(len(rows))
        starts = np.cumsum([0, *(len(f) for f in features[:-1])])
        scores = np.add.reduceat(per_row.astype(np.float64), starts)
        # A state that did not lower (one all-zero row) goes just below the rest.
        failed = np.array([len(f) == 1 and not f.any() for f in features])
        if failed.any():
            valid = scores[~failed]
            scores[failed] = (valid.min() if valid.size else 0.0) - 1.0
        return scores

    # -- warm starts ---------------------------------------------------------------------

    def update_from_file(self, path: str | os.PathLike[str], tasks: Sequence[SearchTask]) -> int:
        """Learn from every record in a tuning log whose task (workload key and
        target) is one of `tasks`, replaying its steps on that task's DAG (error
        records too: throughput 0, as in `update`); records of other tasks, and those
        whose steps no longer apply, are skipped. Returns how many were used."""
        by_key = {(task.workload_key, str(task.target)): task for task in tasks}
        inputs: list[MeasureInput] = []
        results: list[MeasureResult] = []
        for record in load_records(path):
            task = by_key.get((record.task.workload_key, record.task.target))
            if task is None or not record.is_trial:
                continue
            try:
                state = replay(task.compute_dag, record.steps)
            except ScheduleError:
                continue
            inputs.append(MeasureInput(task, state))
            results.append(
                MeasureResult(record.result.costs, record.result.error, record.result.message)
            )
        if inputs:
            self.update(inputs, results)
        return len(inputs)

    # -- persistence ---------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], trees_only: bool = False) -> None:
        """Write the booster and the training data to `path` (an `.npz` file); with
        `trees_only`, the booster alone: all `set_base` reads (a shipped pretrained
        model), a fraction of the size, but nothing to train further on."""
        samples = [] if trees_only else self._samples
        keys = sorted({s.task_key for s in samples})
        index = {key: i for i, key in enumerate(keys)}
        features = [s.features for s in samples]
        booster = b"" if self._booster is None else bytes(self._booster.save_raw("json"))
        base = b"" if self._base is None else bytes(self._base.save_raw("json"))
        meta = {
            "version": SAVE_FORMAT_VERSION,
            "feature_names": list(FEATURE_NAMES),
            "num_warmup_samples": self.num_warmup_samples,
            "num_boost_round": self.num_boost_round,
            "loss": self.loss,
            "params": self.params,
        }
        arrays = {
            "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            "booster": np.frombuffer(booster, dtype=np.uint8),
            "base": np.frombuffer(base, dtype=np.uint8),
            "features": np.concatenate(features)
            if features
            else np.zeros((0, len(FEATURE_NAMES)), np.float32),
            "rows": np.array([len(f) for f in features], dtype=np.int64),
            "costs": np.array([s.cost for s in samples], dtype=np.float64),
            "tasks": np.array([index[s.task_key] for s in samples], dtype=np.int64),
            "task_keys": np.array(keys, dtype=np.str_),
        }
        try:
            with open(path, "wb") as file:
                np.savez_compressed(file, **arrays)  # type: ignore[arg-type]
        except OSError as error:
            raise CostModelError(
                f"cannot write cost model {path}: {error.strerror}; pass a writable path"
            ) from None

    def load(self, path: str | os.PathLike[str]) -> None:
        """Replace this model's booster, settings and training data by those saved in
        `path`."""
        meta, arrays = _read_saved(path)
        try:
            samples = _samples_of(arrays)
            raw = arrays["booster"].tobytes()
            booster = xgb.Booster(model_file=bytearray(raw)) if raw else None
            raw_base = arrays["base"].tobytes() if "base" in arrays else b""
            base = xgb.Booster(model_file=bytearray(raw_base)) if raw_base else None
            settings = (int(meta["num_warmup_samples"]), int(meta["num_boost_round"]))
            loss, params = str(meta["loss"]), dict(meta["params"])
        except (KeyError, ValueError, TypeError, xgb.core.XGBoostError) as error:
            raise CostModelError(
                f"cost model {path} is damaged ({error}); save it again with XGBModel.save "
                "or retrain it from the tuning logs with update_from_file"
            ) from None
        self.num_warmup_samples, self.num_boost_round = settings
        self.loss, self.params = loss, params
        self._samples, self._booster, self._base = samples, booster, base

    # -- internals -----------------------------------------------------------------------

    def _base_margin(self, matrix: xgb.DMatrix) -> np.ndarray | None:
        """The base model's score of each row of `matrix` (None without a base)."""
        if self._base is None:
            return None
        return np.asarray(self._base.predict(matrix, output_margin=True), dtype=np.float32)

    def _extract_missing(self, task_key: str, states: Sequence[State]) -> None:
        """Extract the features of the states not in the cache, on every core."""
        missing: dict[tuple[str, str], State] = {}
        for state in states:
            key = (task_key, state_key(state))
            if key not in self._cache:
                missing.setdefault(key, state)
        if not missing:
            return
        rows = self._pool.extract(list(missing.values()))
        for key, features in zip(missing, rows, strict=True):
            self._remember(key, features)

    def _remember(self, key: tuple[str, str], features: np.ndarray) -> None:
        if len(self._cache) >= FEATURE_CACHE_SIZE:
            del self._cache[next(iter(self._cache))]  # the oldest entry
        self._cache[key] = features

    def _features(self, task_key: str, state: State) -> np.ndarray:
        key = (task_key, state_key(state))
        features = self._cache.get(key)
        if features is None:
            features = extract_features(state)
            self._remember(key, features)
        return features

    def _train(self) -> None:
        labels = _normalised_throughputs(self._samples)
        rows = np.concatenate([s.features for s in self._samples])
        program = np.repeat(np.arange(len(self._samples)), [len(s.features) for s in self._samples])
        if self.loss == "rank":
            keys = {key: i for i, key in enumerate(sorted({s.task_key for s in self._samples}))}
            groups = np.array([keys[s.task_key] for s in self._samples])
            rng = np.random.default_rng(self.seed)
            objective = _pairwise_logistic(program, labels, groups, rng)
        else:  # regression
            objective = _pack_sum_squared_error(program, labels, labels + ERROR_WEIGHT)
        dtrain = xgb.DMatrix(rows)
        base = self._base_margin(dtrain)
        if base is not None:  # the trees fit what the base leaves (see set_base)
            dtrain.set_base_margin(base)
        self._booster = xgb.train(
            self.params, dtrain, num_boost_round=self.num_boost_round, obj=objective
        )


def _normalised_throughputs(samples: Sequence[_Sample]) -> np.ndarray:
    """Per sample: its task's best cost / its cost (1 = the task's best, 0 = error)."""
    best: dict[str, float] = {}
    for sample in samples:
        if math.isfinite(sample.cost) and sample.cost > 0:
            best[sample.task_key] = min(best.get(sample.task_key, math.inf), sample.cost)
    labels = np.zeros(len(samples))
    for i, sample in enumerate(samples):
        if sample.task_key in best and math.isfinite(sample.cost) and sample.cost > 0:
            labels[i] = best[sample.task_key] / sample.cost
    return labels


_Objective = Callable[[np.ndarray, xgb.DMatrix], tuple[np.ndarray, np.ndarray]]


def _pack_sum_squared_error(
    program: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> _Objective:
    """XGBoost objective: `sum_p weight_p * (sum of p's row scores - label_p)^2`;
    every row of program p gets p's gradient (the derivative of the sum by a row)."""
    count = len(labels)

    def objective(predictions: np.ndarray, dtrain: xgb.DMatrix) -> tuple[np.ndarray, np.ndarray]:
        del dtrain
        sums = np.bincount(program, weights=predictions, minlength=count)
        residual = (sums - labels)[program]
        row_weights = weights[program]
        return 2.0 * row_weights * residual, 2.0 * row_weights

    return objective


def _pairwise_logistic(
    program: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    rng: np.random.Generator,
    max_pairs_per_sample: int = MAX_PAIRS_PER_SAMPLE,
) -> _Objective:
    """XGBoost objective: RankNet's logistic loss `log(1 + exp(-(s_i - s_j)))` over
    pairs of programs of one task (`groups`) where i has the higher label, on the
    summed scores `s`; every row of a program gets its program's gradient."""
    first, second = _pairs(labels, groups, rng, max_pairs_per_sample)
    count = len(labels)

    def objective(predictions: np.ndarray, dtrain: xgb.DMatrix) -> tuple[np.ndarray, np.ndarray]:
        del dtrain
        sums = np.bincount(program, weights=predictions, minlength=count)
        probability = 1.0 / (1.0 + np.exp(-(sums[first] - sums[second])))
        pair_grad, pair_hess = probability - 1.0, np.maximum(probability * (1 - probability), 1e-6)
        grad = np.bincount(first, pair_grad, count) - np.bincount(second, pair_grad, count)
        hess = np.bincount(first, pair_hess, count) + np.bincount(second, pair_hess, count)
        return grad[program], np.maximum(hess[program], 1e-6)

    return objective


def _pairs(
    labels: np.ndarray, groups: np.ndarray, rng: np.random.Generator, per_sample: int
) -> tuple[np.ndarray, np.ndarray]:
    """(better, worse) sample indices of pairs within a group with different labels:
    all pairs for a small group, `per_sample` random partners each for a large one."""
    better: list[np.ndarray] = []
    worse: list[np.ndarray] = []
    for group in np.unique(groups):
        members = np.flatnonzero(groups == group)
        if len(members) <= per_sample:
            i, j = np.triu_indices(len(members), 1)
        else:
            i = np.repeat(np.arange(len(members)), per_sample)
            j = rng.integers(0, len(members), len(i))
        a, b = members[i], members[j]
        keep = labels[a] != labels[b]
        a, b = a[keep], b[keep]
        swap = labels[a] < labels[b]
        better.append(np.where(swap, b, a))
        worse.append(np.where(swap, a, b))
    if not better:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(better), np.concatenate(worse)


def _read_saved(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata and arrays of a file `XGBModel.save` wrote, checked to be from
    this feature set."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes().decode())
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, KeyError) as error:
        raise CostModelError(
            f"cannot load cost model {path}: {error}; pass a file written by XGBModel.save"
        ) from None
    if not isinstance(meta, dict) or meta.get("version") != SAVE_FORMAT_VERSION:
        raise CostModelError(
            f"cost model {path} has another format version; retrain it from the tuning "
            "logs with update_from_file"
        )
    if meta.get("feature_names") != list(FEATURE_NAMES):
        raise CostModelError(
            f"cost model {path} was trained on other features (another Ember version); "
            "retrain it from the tuning logs with update_from_file"
        )
    return meta, arrays


def _samples_of(arrays: dict[str, np.ndarray]) -> list[_Sample]:
    keys = [str(key) for key in arrays["task_keys"]]
    bounds = np.cumsum([0, *arrays["rows"].tolist()])
    features = arrays["features"].astype(np.float32)
    return [
        _Sample(keys[int(task)], features[bounds[i] : bounds[i + 1]], float(cost))
        for i, (task, cost) in enumerate(zip(arrays["tasks"], arrays["costs"], strict=True))
    ]
