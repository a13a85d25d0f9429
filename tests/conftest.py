"""Hypothesis profiles: `make test` (what CI runs) checks the same examples every run, so
a landing never depends on which ones were drawn; `make test-all` explores new ones
(HYPOTHESIS_PROFILE=explore) and keeps failures in the example database."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))
