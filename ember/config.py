"""Every debug switch and environment variable Ember reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where generated kernels, shared objects and records go (`EMBER_CACHE_DIR`)."""
    configured = os.environ.get("EMBER_CACHE_DIR")
    base = Path(configured) if configured else Path.home() / ".cache" / "ember"
    base.mkdir(parents=True, exist_ok=True)
    return base


def debug_enabled() -> bool:
    """`EMBER_DEBUG=1` dumps each pipeline stage's output."""
    return os.environ.get("EMBER_DEBUG", "") not in ("", "0", "false", "no")
