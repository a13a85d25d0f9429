"""Where loaded artifacts are extracted: `cache_dir()/artifacts/<digest>`, one directory
per distinct artifact (by the hash of its bytes), bounded in size.

    directory = acquire(digest, fill)      # extracted (by `fill`) unless already there
    ... load from directory; hold_while_alive(module, directory) ...
    release(directory)

Each extraction is filled in a private directory that is renamed into place whole, so
concurrent loads never see half a directory. Every use stamps the directory's mtime,
so the mtime is its last use. After each new extraction, the least recently used
directories beyond `EMBER_ARTIFACT_CACHE_MB` are removed, except

- a directory this process holds (between `acquire` and `release`, and while a module
  loaded from it is alive: `Module.library_path` points into it);
- a directory used in the last `GRACE_SECONDS`, which another process may be loading
  from (the code and params are read while a module is created; after that a module
  needs no file: the loaded library stays mapped even once its file is removed).

Removal renames the directory out of place first, so a loader sees a whole directory
or none (and then extracts it again).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ember.config import artifact_cache_bytes, cache_dir

GRACE_SECONDS = 120.0
# A private directory this old belongs to an extraction or removal that died midway.
STALE_SECONDS = 3600.0
_ENTRY_NAME = re.compile(r"[0-9a-f]{40}")

_lock = threading.Lock()
_held: Counter[Path] = Counter()


def acquire(digest: str, fill: Callable[[Path], None]) -> Path:
    """The directory of the artifact with `digest`, held by this process until
    `release`; if it is not there yet, `fill(directory)` writes its files into an
    empty private directory, which then becomes the entry."""
    root = cache_dir() / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    final = root / digest
    _hold(final)
    try:
        if _touch(final):
            return final
        work = Path(tempfile.mkdtemp(prefix=f"{digest}-", dir=root))
        try:
            fill(work)
            try:
                os.rename(work, final)  # atomic; fails if another process got there first
            except OSError:
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _touch(final)
        prune(root, artifact_cache_bytes())
    except BaseException:
        release(final)
        raise
    return final


def release(directory: Path) -> None:
    """Undo one `acquire` (or `hold_while_alive`) of `directory`."""
    with _lock:
        _held[directory] -= 1
        if _held[directory] <= 0:
            del _held[directory]


def hold_while_alive(owner: object, directory: Path) -> None:
    """Keep `directory` from being pruned by this process while `owner` lives."""
    _hold(directory)
    weakref.finalize(owner, release, directory)


def _hold(directory: Path) -> None:
    with _lock:
        _held[directory] += 1


def _is_held(directory: Path) -> bool:
    with _lock:
        return _held[directory] > 0


def _touch(directory: Path) -> bool:
    """Stamp `directory` as used now; False if it does not exist."""
    try:
        os.utime(directory)
    except FileNotFoundError:
        return False
    return directory.is_dir()


def prune(root: Path, limit_bytes: int) -> None:
    """Remove the least recently used entries of `root` until the rest take at most
    `limit_bytes` (entries held here or used within GRACE_SECONDS always stay), and
    private directories left behind by processes that died."""
    now = time.time()
    entries: list[tuple[float, Path]] = []
    for child in root.iterdir():
        try:
            used = child.stat().st_mtime
        except FileNotFoundError:
            continue  # removed meanwhile by another process
        if _ENTRY_NAME.fullmatch(child.name):
            entries.append((used, child))
        elif now - used > STALE_SECONDS:
            shutil.rmtree(child, ignore_errors=True)
    kept = 0
    for used, entry in sorted(entries, reverse=True):  # most recently used first
        size = _size(entry)
        if kept + size <= limit_bytes or _is_held(entry) or now - used < GRACE_SECONDS:
            kept += size
        else:
            _remove(entry, used)


def _size(directory: Path) -> int:
    try:
        return sum(file.stat().st_size for file in directory.iterdir())
    except FileNotFoundError:
        return 0  # removed meanwhile by another process


def _remove(entry: Path, used: float) -> None:
    try:
        if entry.stat().st_mtime != used:
            return  # used again since it was listed
        trash = entry.with_name(f".removed-{entry.name}-{uuid.uuid4().hex[:8]}")
        os.rename(entry, trash)
    except OSError:
        return  # already removed by another process
    shutil.rmtree(trash, ignore_errors=True)
