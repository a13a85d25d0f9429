"""Every debug switch and environment variable Ember reads, in one place."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ember.errors import EmberError


def cache_dir() -> Path:
    """Where generated kernels, shared objects and records go (`EMBER_CACHE_DIR`)."""
    configured = os.environ.get("EMBER_CACHE_DIR")
    base = Path(configured) if configured else Path.home() / ".cache" / "ember"
    base.mkdir(parents=True, exist_ok=True)
    return base


def debug_enabled() -> bool:
    """`EMBER_DEBUG=1` dumps each pipeline stage's output."""
    return os.environ.get("EMBER_DEBUG", "") not in ("", "0", "false", "no")


def debug_dump(what: str, item: object) -> None:
    """Print a pipeline stage's result to stderr when `EMBER_DEBUG` is set."""
    if debug_enabled():
        print(f"[ember] {what}:\n{item}", file=sys.stderr)


def artifact_cache_bytes() -> int:
    """How much the extracted artifacts under `cache_dir()/artifacts` may hold before
    the least recently used are removed (`EMBER_ARTIFACT_CACHE_MB`, default 1024)."""
    configured = os.environ.get("EMBER_ARTIFACT_CACHE_MB", "").strip()
    try:
        megabytes = float(configured) if configured else 1024.0
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:  # also NaN
        raise EmberError(
            f"EMBER_ARTIFACT_CACHE_MB={configured!r} is not a size in megabytes; set it to "
            "a number >= 0 (e.g. 1024), or unset it for the default"
        )
    return int(megabytes * 2**20)


def rpc_token_file() -> str | None:
    """The shared secret of the device farm (`EMBER_RPC_TOKEN_FILE`), when no
    --token-file is given; None: no token (tracker and servers on loopback only)."""
    return os.environ.get("EMBER_RPC_TOKEN_FILE") or None


def winograd_enabled() -> bool:
    """Whether 3x3 convs may be computed by Winograd's algorithm (`EMBER_WINOGRAD`,
    default on; `0` keeps every conv direct, rounding as the direct sum does)."""
    return os.environ.get("EMBER_WINOGRAD", "1").strip().lower() not in ("0", "false", "no", "off")
