"""`HardwareParams`: what the search knows about the machine a task is tuned for.

    params = HardwareParams.for_target(Target("llvm"))            # this host
    params = HardwareParams.for_target(target, num_cores=4)        # an override

Cores, vector width and cache sizes come from the target where it says them (`-num-cores`,
`-mcpu`/`-mattr` for the vector width) and from this machine otherwise, when the target
runs here (`/proc/cpuinfo`, `/sys/devices/system/cpu/cpu0/cache`). A target for
another machine that names no cores gets conservative defaults; pass overrides for the
real board. The values are recorded with every measurement, so they must describe the
device that ran it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from ember.errors import TargetError
from ember.target import Target

_CPUINFO = Path("/proc/cpuinfo")
_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")

# For a target that is not this machine and says nothing: a small multi-core CPU.
_DEFAULT_CORES = 4
_DEFAULT_CACHE_LINE = 64
_DEFAULT_CACHES = {1: 32 * 1024, 2: 512 * 1024, 3: 0}


@dataclass(frozen=True, slots=True)
class HardwareParams:
    """The machine parameters the search tunes for; 0 cache bytes means no such level."""

    num_cores: int
    vector_bytes: int
    cache_line_bytes: int
    l1_cache_bytes: int
    l2_cache_bytes: int
    l3_cache_bytes: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            minimum = 0 if field.name.endswith("cache_bytes") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise TargetError(
                    f"hardware parameter {field.name}={value!r} is invalid: give an integer "
                    f"of at least {minimum}"
                )

    @classmethod
    def for_target(cls, target: Target | str, **overrides: int) -> HardwareParams:
        """The parameters of `target` (see the module docstring), with `overrides`
        (field name -> value) replacing what was detected."""
        target = target if isinstance(target, Target) else Target(target)
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TargetError(
                f"unknown hardware parameters {unknown}: accepted are "
                f"{', '.join(f.name for f in dataclasses.fields(cls))}"
            )
        on_host = target.is_host
        caches = host_caches() if on_host else {}
        detected = cls(
            num_cores=target.num_cores or (host_cores() if on_host else _DEFAULT_CORES),
            vector_bytes=max(1, target.vector_width_bits // 8),
            cache_line_bytes=caches.get("line", _DEFAULT_CACHE_LINE),
            l1_cache_bytes=caches.get("l1", _DEFAULT_CACHES[1]),
            l2_cache_bytes=caches.get("l2", _DEFAULT_CACHES[2]),
            l3_cache_bytes=caches.get("l3", _DEFAULT_CACHES[3]),
        )
        return dataclasses.replace(detected, **overrides)

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@functools.cache
def host_cores() -> int:
    """Physical cores this process may use: distinct (package, core) pairs of
    /proc/cpuinfo (hyper-threads share a core's vector units, so they add little to
    a compute-bound kernel), capped by the CPU affinity; logical CPUs where unknown."""
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    logical = logical or os.cpu_count() or 1
    cores: set[tuple[str, str]] = set()
    package = core = ""
    try:
        for line in _CPUINFO.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "physical id":
                package = value
            elif key == "core id":
                core = value
            elif not key and core:
                cores.add((package, core))
                package = core = ""
        if core:
            cores.add((package, core))
    except OSError:
        pass
    return min(len(cores), logical) if cores else logical


@functools.cache
def host_caches() -> dict[str, int]:
    """This machine's data caches from sysfs: {"l1", "l2", "l3", "line"} in bytes, for
    the levels it reports (instruction caches are skipped)."""
    found: dict[str, int] = {}
    try:
        indices = sorted(_CACHE_DIR.glob("index*"))
    except OSError:
        return found
    for index in indices:
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not 1 <= level <= 3:
            continue
        found[f"l{level}"] = size
        found.setdefault("line", line)
    return found


def _parse_size(text: str) -> int:
    """`48K` -> 49152, `32768K` -> 33554432, `1M`, or plain bytes."""
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale
