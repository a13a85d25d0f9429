"""The device model: what code generation knows about the machine a Target runs on.

    device = device_model(Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"))
    device.num_cores, device.vector_bits, device.vector_registers   # 4, 128, 32
    device.lanes("float32"), device.has("dotprod"), device.l2_cache_bytes

Default schedules, sketch rules, weight packing and the cost model's hardware
parameters all read one `DeviceModel`, resolved once per Target from, in order:

1. this machine, when the target is this machine (it runs here and names no triple:
   `describes_this_machine`): cores (physical cores this process may use; on an SMT
   machine fewer than its logical CPUs), caches (sysfs) and, for a native target (no
   -mcpu, or -mcpu=native), the CPU's feature flags (`/proc/cpuinfo`);
2. otherwise the table of `-mcpu` names below (x86 and AArch64 cores: cores of a
   typical board, caches, vector features; an -mcpu of the wrong architecture is a
   TargetError, an unknown one a warning), or the architecture's baseline;
3. the target's own options over both: `-num-cores=N`, `-mattr=+f,-g`.

(A later issue lets a remote board report its own model.) This is the only module that
reads `/proc`, sysfs or the CPU count: everything else asks it.

Feature names are LLVM's `-mattr` names (`avx512f`, `fma`, `avx512vnni`, `avxvnni`,
`avx512bf16`, `neon`, `dotprod`, `i8mm`, `sve`, `bf16`); a host's `/proc/cpuinfo`
flags are kept as they are and the ones it spells differently (`asimd`, `asimddp`,
`avx512_vnni`, ...) are added under the LLVM name too.

`vector_bits` is the width of the vectors the generated C uses: the widest of
AVX-512, AVX, SSE2 on x86; NEON's 128 on AArch64 (SVE is a feature the model names,
but Ember's C does not use scalable vectors). `vector_registers`: 32 with AVX-512 and
on AArch64 (v0-v31), 16 otherwise.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ember.errors import TargetError
from ember.target import Target

_CPUINFO = Path("/proc/cpuinfo")
_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """One device as the compiler sees it; 0 cache bytes means no such level."""

    arch: str  # "x86_64", "aarch64", ...
    cpu: str  # the -mcpu name, "native" for this machine, or "generic"
    num_cores: int
    vector_bits: int
    vector_registers: int
    features: frozenset[str]
    cache_line_bytes: int
    l1_cache_bytes: int
    l2_cache_bytes: int
    l3_cache_bytes: int

    def has(self, feature: str) -> bool:
        return feature in self.features

    def lanes(self, dtype: str) -> int:
        """How many `dtype` elements fill one vector register."""
        return max(1, self.vector_bits // dtype_bits(dtype))

    @property
    def fp32_lanes(self) -> int:
        return self.lanes("float32")

    @property
    def vector_bytes(self) -> int:
        return max(1, self.vector_bits // 8)

    @property
    def fma_register_operands(self) -> bool:
        """Whether every operand of a vector FMA is a register (ARM's `fmla`), so a
        register tile's broadcast input takes a register per row; x86's FMAs read it
        from memory (or one broadcast register serves the whole tile)."""
        return self.arch in ("aarch64", "arm")

    @property
    def broadcast_operands(self) -> bool:
        """Whether a vector FMA can read its broadcast input straight from memory
        (AVX-512's embedded `{1toN}`), so a register tile's rows cost no loads of their
        own; without it (AVX2, NEON) each row's input is a broadcast load, as each
        column's weight vector is a load."""
        return self.has("avx512f")


def dtype_bits(dtype: str) -> int:
    """Bits of one element of a dtype name: `float32` -> 32, `bool` -> 8 (as NumPy
    stores bools); a vector dtype such as `float32x16` counts one lane."""
    match = _DTYPE.fullmatch(dtype)
    if match is None:
        raise ValueError(f"{dtype!r} is not a dtype name such as float32, int8 or bool")
    name, bits = match.group(1), match.group(2)
    return 8 if name == "bool" else int(bits or 32)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype` (a bool is one byte)."""
    return max(1, dtype_bits(dtype) // 8)


_DTYPE = re.compile(r"([a-z]+?)(\d*)(?:x\d+)?")


@dataclass(frozen=True, slots=True)
class _CpuEntry:
    """What the table knows of an -mcpu name."""

    arch: str
    features: frozenset[str]
    cores: int = 4
    l1: int = 32 * KiB
    l2: int = 512 * KiB
    l3: int = 0


def _x86(*features: str, l1: int = 32 * KiB, l2: int = 1 * MiB, l3: int = 8 * MiB) -> _CpuEntry:
    # A desktop-class default of 8 cores: a cross-compiled x86 build rarely knows more.
    return _CpuEntry("x86_64", frozenset(("sse2", *features)), 8, l1, l2, l3)


def _arm(*features: str, cores: int = 4, l1: int, l2: int, l3: int = 0) -> _CpuEntry:
    return _CpuEntry("aarch64", frozenset(("neon", *features)), cores, l1, l2, l3)


_AVX = ("avx",)
_AVX2 = ("avx", "avx2", "fma")
_AVX512 = (*_AVX2, "avx512f", "avx512bw", "avx512dq", "avx512vl")
_VNNI = ("avx512vnni",)
_BF16 = ("avx512bf16",)

# The cores users name in targets. AArch64 core counts are the usual boards' (Raspberry
# Pi 3/4/5, phones' big clusters, cloud instances' vCPUs): override with -num-cores.
CPU_TABLE: dict[str, _CpuEntry] = {
    # x86-64
    "x86-64": _x86(),
    "x86-64-v2": _x86(),
    "x86-64-v3": _x86(*_AVX2),
    "x86-64-v4": _x86(*_AVX512),
    "sandybridge": _x86(*_AVX, l2=256 * KiB),
    "ivybridge": _x86(*_AVX, l2=256 * KiB),
    "haswell": _x86(*_AVX2, l2=256 * KiB),
    "broadwell": _x86(*_AVX2, l2=256 * KiB),
    "skylake": _x86(*_AVX2, l2=256 * KiB),
    "alderlake": _x86(*_AVX2, "avxvnni", l1=48 * KiB, l2=1280 * KiB),
    "raptorlake": _x86(*_AVX2, "avxvnni", l1=48 * KiB, l2=2 * MiB),
    "meteorlake": _x86(*_AVX2, "avxvnni", l1=48 * KiB, l2=2 * MiB),
    "skylake-avx512": _x86(*_AVX512, l2=1 * MiB),
    "cascadelake": _x86(*_AVX512, *_VNNI, l2=1 * MiB),
    "cooperlake": _x86(*_AVX512, *_VNNI, *_BF16, l2=1 * MiB),
    "icelake-client": _x86(*_AVX512, *_VNNI, l1=48 * KiB, l2=512 * KiB),
    "icelake-server": _x86(*_AVX512, *_VNNI, l1=48 * KiB, l2=1280 * KiB),
    "tigerlake": _x86(*_AVX512, *_VNNI, l1=48 * KiB, l2=1280 * KiB),
    "rocketlake": _x86(*_AVX512, *_VNNI, l1=48 * KiB, l2=512 * KiB),
    "sapphirerapids": _x86(*_AVX512, *_VNNI, *_BF16, "avxvnni", l1=48 * KiB, l2=2 * MiB),
    "emeraldrapids": _x86(*_AVX512, *_VNNI, *_BF16, "avxvnni", l1=48 * KiB, l2=2 * MiB),
    "graniterapids": _x86(*_AVX512, *_VNNI, *_BF16, "avxvnni", l1=48 * KiB, l2=2 * MiB),
    "znver1": _x86(*_AVX2, l1=32 * KiB, l2=512 * KiB),
    "znver2": _x86(*_AVX2, l1=32 * KiB, l2=512 * KiB, l3=16 * MiB),
    "znver3": _x86(*_AVX2, l1=32 * KiB, l2=512 * KiB, l3=32 * MiB),
    "znver4": _x86(*_AVX512, *_VNNI, *_BF16, l1=32 * KiB, l2=1 * MiB, l3=32 * MiB),
    "znver5": _x86(*_AVX512, *_VNNI, *_BF16, "avxvnni", l1=48 * KiB, l2=1 * MiB, l3=32 * MiB),
    # AArch64
    "generic-aarch64": _arm(l1=32 * KiB, l2=512 * KiB),
    "cortex-a53": _arm(l1=32 * KiB, l2=512 * KiB),
    "cortex-a55": _arm("dotprod", "fp16", l1=32 * KiB, l2=128 * KiB, l3=1 * MiB),
    "cortex-a72": _arm(l1=32 * KiB, l2=1 * MiB),
    "cortex-a76": _arm("dotprod", "fp16", l1=64 * KiB, l2=512 * KiB, l3=2 * MiB),
    "cortex-a78": _arm("dotprod", "fp16", l1=64 * KiB, l2=512 * KiB, l3=4 * MiB),
    "cortex-x1": _arm("dotprod", "fp16", cores=1, l1=64 * KiB, l2=1 * MiB, l3=4 * MiB),
    "neoverse-n1": _arm("dotprod", "fp16", cores=64, l1=64 * KiB, l2=1 * MiB, l3=32 * MiB),
    "neoverse-n2": _arm(
        "dotprod", "fp16", "i8mm", "bf16", "sve", "sve2", cores=64, l1=64 * KiB, l2=1 * MiB
    ),
    "neoverse-v1": _arm(
        "dotprod", "fp16", "i8mm", "bf16", "sve", cores=64, l1=64 * KiB, l2=1 * MiB, l3=32 * MiB
    ),
    "apple-m1": _arm("dotprod", "fp16", cores=4, l1=128 * KiB, l2=12 * MiB),
}

# Baselines of an architecture when neither this machine nor the table says more.
_BASELINE = {
    "x86_64": frozenset({"sse2"}),
    "aarch64": frozenset({"neon"}),
}
# A target for another machine that names no CPU, or a machine that reports nothing:
# a small multi-core board.
_DEFAULT_CORES = 4
_DEFAULT_CACHES = {"line": 64, "l1": 32 * KiB, "l2": 512 * KiB, "l3": 0}

# Features that set the width of the vectors the generated code uses, widest first.
_VECTOR_BITS = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("neon", 128))

# /proc/cpuinfo spellings of LLVM feature names.
_CPUINFO_ALIASES = {
    "asimd": "neon",
    "asimddp": "dotprod",
    "asimdhp": "fp16",
    "avx512_vnni": "avx512vnni",
    "avx_vnni": "avxvnni",
    "avx512_bf16": "avx512bf16",
}


@functools.cache
def device_model(target: Target) -> DeviceModel:
    """The model of the device `target` runs on (see the module docstring)."""
    if not isinstance(target, Target):
        target = Target(target)
    arch = target.target_arch
    entry = _table_entry(target)
    features = set(_features(target, entry))
    for attr in target.mattr:
        (features.add if attr[0] == "+" else features.discard)(attr[1:])
    if describes_this_machine(target):
        caches = host_caches()
        cores = host_cores()
    else:
        caches = {"l1": entry.l1, "l2": entry.l2, "l3": entry.l3} if entry else {}
        cores = entry.cores if entry else _DEFAULT_CORES
    vector_bits = max((bits for name, bits in _VECTOR_BITS if name in features), default=128)
    wide_registers = "avx512f" in features or arch == "aarch64"
    return DeviceModel(
        arch=arch,
        cpu="native" if target.is_native else (target.mcpu or "generic"),
        num_cores=target.num_cores or cores,
        vector_bits=vector_bits,
        vector_registers=32 if wide_registers else 16,
        features=frozenset(features),
        cache_line_bytes=caches.get("line", _DEFAULT_CACHES["line"]),
        l1_cache_bytes=caches.get("l1", _DEFAULT_CACHES["l1"]),
        l2_cache_bytes=caches.get("l2", _DEFAULT_CACHES["l2"]),
        l3_cache_bytes=caches.get("l3", _DEFAULT_CACHES["l3"]),
    )


def describes_this_machine(target: Target) -> bool:
    """Whether `target` is this very machine, so its cores and caches are the host's:
    it runs here and names no triple (`llvm`, `llvm -mcpu=znver4`). A target that
    names its triple describes a device of that kind (`-mtriple=aarch64-linux-gnu
    -mcpu=cortex-a72` is a Raspberry Pi 4 even when built on an AArch64 server), and
    gets the table's cores and caches, or `-num-cores`."""
    return target.is_host and target.mtriple is None


def _table_entry(target: Target) -> _CpuEntry | None:
    """The table's entry for the target's -mcpu; a CPU of another architecture than
    the triple's is an error, an unknown one a warning (the baseline is used)."""
    cpu = target.mcpu
    if cpu is None or cpu == "native":
        return None
    entry = CPU_TABLE.get(cpu)
    arch = target.target_arch
    if entry is None:
        known = ", ".join(name for name, e in CPU_TABLE.items() if e.arch == arch)
        warnings.warn(
            f"-mcpu={cpu} is not in Ember's table of CPUs: the device model assumes "
            f"{arch}'s baseline features and {_DEFAULT_CORES} cores; give -mattr and "
            f"-num-cores, or one of: {known or 'none known for ' + arch}",
            stacklevel=3,
        )
        return None
    # ARMv8-A cores also run 32-bit code: a Raspberry Pi 4 with a 32-bit OS is a
    # Cortex-A72 in AArch32 (with AArch32's 16 quad registers: `device_model`).
    if entry.arch != arch and not (arch == "arm" and entry.arch == "aarch64"):
        raise TargetError(
            f"-mcpu={cpu} is an {entry.arch} CPU, but target {target} is for {arch} "
            f"({target.triple}): fix -mtriple or -mcpu"
        )
    return entry


def _features(target: Target, entry: _CpuEntry | None) -> frozenset[str]:
    arch = target.target_arch
    if target.is_native:
        flags = host_cpu_features()
        return flags | _BASELINE.get(arch, frozenset())
    if entry is not None:
        return entry.features
    return _BASELINE.get(arch, frozenset())


# -- this machine ------------------------------------------------------------------------


@functools.cache
def host_cpu_features() -> frozenset[str]:
    """This machine's CPU feature flags (`/proc/cpuinfo`), with LLVM's names added for
    the ones it spells differently; empty where unknown."""
    _, flags = _cpuinfo_flags(_first_cpuinfo_values())
    return flags


def _first_cpuinfo_values() -> dict[str, str]:
    """Each `/proc/cpuinfo` key's first value (the first CPU's); empty where unknown."""
    values: dict[str, str] = {}
    try:
        with open(_CPUINFO, encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = (part.strip() for part in line.partition(":"))
                values.setdefault(key, value)
    except OSError:
        pass
    return values


def _cpuinfo_flags(values: dict[str, str]) -> tuple[str, frozenset[str]]:
    """The key of the feature-flag line (x86 says "flags", AArch64 "Features", with
    "asimd" for NEON) and its flags, LLVM's names added."""
    for key, value in values.items():  # in the file's order
        if key in ("flags", "Features"):
            flags = set(value.split())
            flags |= {_CPUINFO_ALIASES[f] for f in flags if f in _CPUINFO_ALIASES}
            return key, frozenset(flags)
    return "", frozenset()


def host_cpu_count() -> int:
    """Logical CPUs this process may run on (its affinity mask), for sizing pools of
    compiler and helper processes."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@functools.cache
def host_cores() -> int:
    """Physical cores this process may use: distinct (package, core) pairs of
    /proc/cpuinfo (hyper-threads share a core's vector units, so they add little to
    a compute-bound kernel), capped by the CPU affinity; logical CPUs where unknown."""
    logical = host_cpu_count()
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


def host_description() -> dict[str, object]:
    """This machine as a device server reports it to the tracker and its clients:
    triple, architecture, CPU name, cores, logical CPUs, caches and feature flags
    (LLVM's names included), all plain JSON."""
    from ember.target import host_triple

    triple = host_triple()
    arch = triple.split("-")[0]
    values = _first_cpuinfo_values()
    names = ("model name", "Model", "Hardware", "CPU part")
    name = next((value for key, value in values.items() if key in names and value), "")
    flags_key, flags = _cpuinfo_flags(values)
    features = sorted(flags)
    # Under user-mode emulation (qemu-aarch64 on x86) /proc/cpuinfo describes the
    # emulating machine: its flags say nothing of what this process can run.
    if flags_key != _CPUINFO_FLAGS_KEY.get(arch, flags_key):
        name, features = "", []
    return {
        "triple": triple,
        "arch": arch,
        "cpu": name,
        "cores": host_cores(),
        "cpus": host_cpu_count(),
        "caches": host_caches(),
        "features": features,
    }


# The /proc/cpuinfo line that lists an architecture's feature flags.
_CPUINFO_FLAGS_KEY = {"x86_64": "flags", "i386": "flags", "aarch64": "Features", "arm": "Features"}
