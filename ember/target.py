"""Compilation targets, parsed from TVM-style strings.

    Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon -mcpu=cortex-a72 -num-cores=4")
    Target("c")                  # this machine, through generated C
    Target("llvm -mcpu=znver4")  # this machine's triple, tuned for Zen 4
    Target("cuda -arch=sm_90")   # parsed; not built yet

`llvm` and `c` are synonyms: both mean "a CPU, through generated C" (`llvm` is kept so
the strings users know from TVM work). The triple picks the backend's toolchain
(ember.toolchain); `-mcpu` and `-mattr` pick compiler flags; with neither -mcpu nor
-mtriple the code is for this very machine (`-march=native`). What the device is (cores,
vector width, caches, ISA features) is the device model's business (`ember.device`):
a Target says what the string said, and which machine it names.
`str(target)` gives the canonical string, and `Target(str(target)) == target`.
"""

from __future__ import annotations

import functools
import platform
import re
from dataclasses import dataclass

from ember.errors import TargetError

CPU_KINDS = ("llvm", "c")
KINDS = (*CPU_KINDS, "cuda")

# Options each kind accepts, in the order `str()` prints them. `-device` and `-model`
# are TVM's free-form labels (e.g. `-device=arm_cpu -model=rasp4b`): kept, not used.
# `-backend` names the code generator (ember.backend; default `c` for CPUs).
_OPTIONS = {
    "llvm": ("mtriple", "mcpu", "mattr", "num-cores", "backend", "device", "model"),
    "c": ("mtriple", "mcpu", "mattr", "num-cores", "backend", "device", "model"),
    "cuda": ("arch", "device", "model"),
}

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "x64": "x86_64"}


def _normalise_arch(arch: str) -> str:
    """One name per architecture family: `uname -m` says armv7l or i686 where triples
    and ELF headers say arm or i386."""
    arch = arch.lower()
    if re.fullmatch(r"armv\d+\w*", arch):
        return "arm"
    if re.fullmatch(r"i[3-6]86", arch):
        return "i386"
    return _ARCH_ALIASES.get(arch, arch)


@functools.cache
def host_triple() -> str:
    """This machine's triple, in the form cross compilers are named by."""
    arch = _normalise_arch(platform.machine() or "unknown")
    system = platform.system().lower()
    if system == "linux":
        # 32-bit ARM Linux is hard-float (Raspberry Pi OS, Debian's armhf).
        return f"{arch}-linux-gnueabihf" if arch == "arm" else f"{arch}-linux-gnu"
    if system == "darwin":
        return f"{arch}-apple-darwin"
    return f"{arch}-unknown-{system or 'unknown'}"


def _accepted(kind: str) -> str:
    return ", ".join(f"-{name}" for name in _OPTIONS[kind])


@dataclass(frozen=True, slots=True, init=False)
class Target:
    """A parsed target string. Fields hold what the string said; properties derive
    which machine it names (the triple defaults to this machine's); what that machine
    can do is `ember.device.device_model(target)`."""

    kind: str
    mtriple: str | None
    mcpu: str | None
    mattr: tuple[str, ...]
    num_cores: int | None
    backend: str | None
    arch: str | None
    device: str | None
    model: str | None

    def __init__(self, spec: str) -> None:
        if isinstance(spec, Target):
            spec = str(spec)
        if not isinstance(spec, str):
            raise TargetError(
                f"a target is a string such as 'llvm' or 'c', not {type(spec).__name__} {spec!r}"
            )
        if not spec.split():
            raise TargetError(
                f"empty target string {spec!r}: write e.g. 'llvm', 'c', "
                "'llvm -mtriple=aarch64-linux-gnu -mattr=+neon' or 'cuda -arch=sm_90'"
            )
        kind, *tokens = spec.split()
        if kind not in KINDS:
            raise TargetError(
                f"unknown target kind {kind!r} in {spec!r}: accepted kinds are "
                f"{', '.join(KINDS)} (llvm and c both mean a CPU through generated C)"
            )
        options = _parse_options(kind, tokens, spec)
        set_field = object.__setattr__  # frozen dataclass: fields are set once, here
        set_field(self, "kind", kind)
        set_field(self, "mtriple", options.get("mtriple"))
        set_field(self, "mcpu", options.get("mcpu"))
        set_field(self, "mattr", _parse_mattr(options.get("mattr"), spec))
        set_field(self, "num_cores", _parse_num_cores(options.get("num-cores"), spec))
        set_field(self, "backend", options.get("backend"))
        set_field(self, "arch", options.get("arch"))
        set_field(self, "device", options.get("device"))
        set_field(self, "model", options.get("model"))
        if kind == "cuda" and self.arch is not None and not self.arch.startswith("sm_"):
            raise TargetError(
                f"bad -arch={self.arch} in {spec!r}: write the compute capability as "
                "sm_XY, e.g. -arch=sm_90"
            )

    def __str__(self) -> str:
        values = {
            "mtriple": self.mtriple,
            "mcpu": self.mcpu,
            "mattr": ",".join(self.mattr) if self.mattr else None,
            "num-cores": None if self.num_cores is None else str(self.num_cores),
            "backend": self.backend,
            "arch": self.arch,
            "device": self.device,
            "model": self.model,
        }
        parts = [self.kind]
        parts += [f"-{name}={values[name]}" for name in _OPTIONS[self.kind] if values[name]]
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    @property
    def is_cpu(self) -> bool:
        return self.kind in CPU_KINDS

    @property
    def triple(self) -> str:
        """The target triple; this machine's when the string names none."""
        return self.mtriple or host_triple()

    @property
    def target_arch(self) -> str:
        """The triple's architecture: "x86_64", "aarch64", ..."""
        return _normalise_arch(self.triple.split("-")[0])

    @property
    def is_android(self) -> bool:
        return "android" in self.triple

    @property
    def is_host(self) -> bool:
        """Whether code built for this target runs on this machine."""
        if not self.is_cpu or self.is_android:
            return False
        host = host_triple()
        return self.target_arch == _normalise_arch(host.split("-")[0]) and (
            self.mtriple is None or _os_part(self.mtriple) == _os_part(host)
        )

    @property
    def is_native(self) -> bool:
        """Whether code may use everything this machine's CPU has (`-march=native`):
        `-mcpu=native`, or no -mcpu and no -mtriple. Naming the triple without a CPU
        asks for portable code for that architecture."""
        if not self.is_host:
            return False
        return self.mcpu == "native" or (self.mcpu is None and self.mtriple is None)


def _os_part(triple: str) -> str:
    return "-".join(triple.split("-")[1:])


def _parse_options(kind: str, tokens: list[str], spec: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for token in tokens:
        name, equals, value = token.lstrip("-").partition("=")
        name = name.replace("_", "-")
        if not token.startswith("-") or not equals or not value:
            raise TargetError(
                f"bad target option {token!r} in {spec!r}: options are written "
                f"-name=value; {kind} accepts {_accepted(kind)}"
            )
        if name not in _OPTIONS[kind]:
            raise TargetError(
                f"unknown option {token!r} for target kind {kind} in {spec!r}: "
                f"{kind} accepts {_accepted(kind)}"
            )
        if name in options:
            raise TargetError(f"option -{name} given twice in {spec!r}: keep one")
        options[name] = value
    return options


def _parse_mattr(value: str | None, spec: str) -> tuple[str, ...]:
    if value is None:
        return ()
    attrs = tuple(a for a in value.split(",") if a)
    for attr in attrs:
        if attr[0] not in "+-" or len(attr) == 1:
            raise TargetError(
                f"bad -mattr entry {attr!r} in {spec!r}: write features with a sign, "
                "e.g. -mattr=+neon or -mattr=+avx2,+fma,-avx512f"
            )
    return attrs


def _parse_num_cores(value: str | None, spec: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise TargetError(f"bad -num-cores={value} in {spec!r}: give a positive integer")
    return int(value)
