"""`FeaturePool`: program features of many States on every core.

    with FeaturePool(helpers=1) as pool:
        rows = pool.extract(states)   # == [extract_features(s) for s in states]

Feature extraction is the search's main cost (lowering a State to loop IR is ~3 ms of
Python, ~4 ms with the features, for each of the ~300 new states a round scores), and
during the search the other cores are idle: the builder's helpers compile only after
the search has chosen. The pool splits a batch into `helpers + 1` contiguous shares,
sends all but the last to helper processes (`python -m
ember.autoschedule.feature_worker`, started like the builder's, see
`ember.autoschedule.worker`) and extracts the last itself meanwhile. A share travels
as one pickled list, so the States' common DAG is pickled once (~0.3 ms a state both
ways against ~4 ms of extraction).

Nothing here may stop a tuning run: a helper that cannot start, crashes or stalls is
killed, its share is extracted in this process, and the pool carries on with fewer
helpers. Batches smaller than `MIN_SHARE` states a helper are not split.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence

import numpy as np

from ember.autoschedule.features import extract_features_and_keys
from ember.autoschedule.program import remember_program_key
from ember.autoschedule.worker import Worker, WorkerCrashed, WorkerError, WorkerTimedOut
from ember.device import host_cpu_count
from ember.schedule.state import State

WORKER_MODULE = "ember.autoschedule.feature_worker"
# Fewer states than this per share are extracted here: a round trip costs ~10 ms.
MIN_SHARE = 8
# Seconds a share may take before its helper counts as stalled (~4 ms a state).
SHARE_TIMEOUT = 120.0


def default_helpers() -> int:
    """One helper per core beyond the first (this process extracts a share too)."""
    return max(0, host_cpu_count() - 1)


class FeaturePool:
    """Extracts feature rows of States in this process and `helpers` helper processes
    (started on first use, stopped by `close`, at exit, or when the pool is collected)."""

    def __init__(self, helpers: int | None = None) -> None:
        self.helpers = default_helpers() if helpers is None else max(0, helpers)
        self._workers: list[Worker] = []
        self._started = False
        self._finalizer = weakref.finalize(self, _stop, self._workers)

    def __enter__(self) -> FeaturePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        _stop(self._workers)
        self._started = False

    def extract(self, states: Sequence[State]) -> list[np.ndarray]:
        """Feature rows of each state, in order (`extract_features` of each). Each
        state's program key, which comes from the same lowering, is kept on it
        (`remember_program_key`), for the search to find."""
        workers = self._available(len(states))
        if not workers:
            return _kept_keys(states, extract_features_and_keys(states))
        shares = _split(states, len(workers) + 1)
        sent: list[tuple[Worker, Sequence[State]]] = []
        for worker, share in zip(workers, shares[:-1], strict=True):
            worker.send(list(share))
            sent.append((worker, share))
        own = _kept_keys(shares[-1], extract_features_and_keys(shares[-1]))
        rows: list[np.ndarray] = []
        for worker, share in sent:
            rows.extend(_kept_keys(share, self._receive(worker, share)))
        return rows + own

    # -- helpers -------------------------------------------------------------------------

    def _available(self, count: int) -> list[Worker]:
        """The helpers to use for a batch of `count` states (started on first use)."""
        wanted = min(self.helpers, count // MIN_SHARE - 1)
        if wanted <= 0:
            return []
        if not self._started:
            self._started = True
            self._start()
        return self._workers[:wanted]

    def _start(self) -> None:
        env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        for _ in range(self.helpers):
            try:
                worker = Worker(WORKER_MODULE, env=env)
                worker.wait_ready()
            except WorkerError as error:
                warnings.warn(f"feature extraction stays in this process: {error}", stacklevel=2)
                break
            self._workers.append(worker)

    def _receive(
        self, worker: Worker, share: Sequence[State]
    ) -> list[tuple[np.ndarray, str | None]]:
        try:
            results = worker.receive(SHARE_TIMEOUT)
            if isinstance(results, list) and len(results) == len(share):
                return results
            reason = f"it replied {type(results).__name__} for {len(share)} states"
        except WorkerTimedOut:
            reason = f"no reply within {SHARE_TIMEOUT:g} s"
        except WorkerCrashed as crash:
            reason = crash.reason
        except OSError as error:  # its pipes are gone (killed between batches)
            reason = str(error)
        warnings.warn(
            f"a feature helper failed ({reason}); extracting its share here", stacklevel=2
        )
        worker.kill()
        self._workers.remove(worker)
        return extract_features_and_keys(share)


def _kept_keys(
    states: Sequence[State], results: Sequence[tuple[np.ndarray, str | None]]
) -> list[np.ndarray]:
    """The feature rows of `results`, their program keys kept on `states`."""
    for state, (_, key) in zip(states, results, strict=True):
        remember_program_key(state, key)
    return [rows for rows, _ in results]


def _split(states: Sequence[State], parts: int) -> list[Sequence[State]]:
    """`parts` contiguous shares of (nearly) equal size."""
    size, extra = divmod(len(states), parts)
    shares, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        shares.append(states[start:end])
        start = end
    return shares


def _stop(workers: list[Worker]) -> None:
    for worker in workers:
        worker.close()
    workers.clear()
