"""Target strings: parsing, derived properties, round trips and the errors users see."""

from __future__ import annotations

import platform

import pytest

from ember.errors import EmberError, TargetError
from ember.target import Target, host_triple

HOST_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(
    platform.machine().lower(), platform.machine().lower()
)


def test_parses_the_full_aarch64_string() -> None:
    target = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon -mcpu=cortex-a72 -num-cores=4")
    assert target.kind == "llvm"
    assert target.triple == "aarch64-linux-gnu"
    assert target.mcpu == "cortex-a72"
    assert target.mattr == ("+neon",)
    assert target.num_cores == 4
    assert target.is_cpu
    assert target.is_host == (HOST_ARCH == "aarch64")


def test_c_and_llvm_are_this_machine() -> None:
    for spec in ("c", "llvm"):
        target = Target(spec)
        assert target.is_cpu and target.is_host
        assert target.triple == host_triple()
        assert target.mtriple is None
        assert str(target) == spec


def test_cuda_is_parsed_but_not_a_cpu() -> None:
    target = Target("cuda -arch=sm_90")
    assert target.kind == "cuda"
    assert target.arch == "sm_90"
    assert not target.is_cpu and not target.is_host


def test_backend_option_round_trips() -> None:
    target = Target("llvm -backend=portable-c -mcpu=znver4")
    assert target.backend == "portable-c"
    assert str(target) == "llvm -mcpu=znver4 -backend=portable-c"
    assert Target("llvm").backend is None


def test_string_round_trip_equality_and_hash() -> None:
    spec = "llvm -mattr=+neon -num-cores=4 -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu"
    target = Target(spec)
    canonical = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon -num-cores=4"
    assert str(target) == canonical
    assert Target(str(target)) == target
    assert hash(Target(canonical)) == hash(target)
    assert repr(target) == f"Target({canonical!r})"
    assert len({target, Target(canonical), Target("c"), Target("llvm")}) == 3
    assert Target("llvm") != Target("llvm -mcpu=znver4")
    assert Target(target) == target


def test_targets_are_immutable() -> None:
    target = Target("c")
    with pytest.raises(AttributeError):
        target.kind = "llvm"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", ["empty target string", "'llvm'"]),
        (None, ["a target is a string", "not NoneType None"]),
        ("opencl", ["unknown target kind 'opencl'", "llvm, c, cuda"]),
        ("llvm -mfoo=bar", ["'-mfoo=bar'", "-mtriple, -mcpu, -mattr, -num-cores"]),
        ("cuda -mcpu=x", ["'-mcpu=x'", "cuda accepts -arch"]),
        ("llvm mcpu=znver4", ["'mcpu=znver4'", "-name=value"]),
        ("llvm -mcpu", ["'-mcpu'", "-name=value"]),
        ("llvm -mattr=neon", ["'neon'", "-mattr=+neon"]),
        ("llvm -num-cores=zero", ["-num-cores=zero", "positive integer"]),
        ("llvm -mcpu=a -mcpu=b", ["-mcpu given twice"]),
        ("cuda -arch=90", ["-arch=90", "sm_90"]),
    ],
)
def test_bad_strings_say_what_is_wrong(spec: str, expected: list[str]) -> None:
    with pytest.raises(TargetError) as error:
        Target(spec)
    assert isinstance(error.value, EmberError)
    for part in expected:
        assert part in str(error.value)


def test_native_means_no_triple_and_no_cpu() -> None:
    assert Target("llvm").is_native and Target("c -mcpu=native").is_native
    portable = Target(f"llvm -mtriple={host_triple()}")
    assert portable.is_host and not portable.is_native
    assert not Target("llvm -mcpu=znver4").is_native


@pytest.mark.parametrize(
    ("machine", "triple"),
    [("x86_64", "x86_64-linux-gnu"), ("aarch64", "aarch64-linux-gnu"),
     ("armv7l", "arm-linux-gnueabihf"), ("i686", "i386-linux-gnu")],
)  # fmt: skip
def test_host_triples_name_the_cross_compilers(
    monkeypatch: pytest.MonkeyPatch, machine: str, triple: str
) -> None:
    """What a board reports: `uname -m` normalised, in the form Debian's cross
    compilers are named by (32-bit ARM Linux is hard-float)."""
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    host_triple.cache_clear()
    try:
        assert host_triple() == triple
    finally:
        host_triple.cache_clear()
