"""The device model: one place resolves what a Target's device is (host detection, the
-mcpu table, target options), and every consumer (default schedules, sketch rules,
weight packing, the cost model's hardware params) sees the same machine."""

from __future__ import annotations

import ast
import os
import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ember import device as device_module
from ember import target as target_module
from ember.autoschedule.hardware import HardwareParams
from ember.autoschedule.task import SearchTask
from ember.device import CPU_TABLE, device_model, dtype_bits, dtype_bytes
from ember.errors import TargetError
from ember.graph import GraphBuilder
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.passes import fuse
from ember.graph.passes.pack_weights import pack_weights
from ember.schedule.default import default_schedule
from ember.target import Target
from ember.te import ComputeDAG
from ember.topi import group_to_dag

HOST_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}.get(
    platform.machine().lower(), platform.machine().lower()
)
A72 = Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")
EMBER = Path(__file__).resolve().parents[1] / "ember"


@pytest.fixture
def fresh_models() -> Iterator[None]:
    """Device models resolved anew (a test changes what the host reports)."""
    detectors = (device_module.host_cpu_features, device_module.host_cores)
    detectors += (device_module.host_caches,)  # taken now: a test may monkeypatch them
    device_model.cache_clear()
    yield
    device_model.cache_clear()
    for detector in detectors:
        detector.cache_clear()


@pytest.mark.parametrize(
    ("spec", "lanes"),
    [
        ("llvm -mcpu=znver4", 16),
        ("llvm -mcpu=haswell", 8),
        ("llvm -mcpu=sandybridge", 8),  # AVX without AVX2: 256-bit float vectors
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", 16),
        ("llvm -mtriple=x86_64-linux-gnu -mattr=+avx2,+fma", 8),
        ("llvm -mtriple=x86_64-linux-gnu -mattr=+avx512f", 16),
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4 -mattr=-avx512f", 8),
        ("llvm -mtriple=x86_64-linux-gnu", 4),
        ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon", 4),
        ("llvm -mtriple=aarch64-linux-android", 4),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1", 4),  # SVE is not used
    ],
)
def test_vector_width_from_cpu_and_attributes(spec: str, lanes: int) -> None:
    device = device_model(Target(spec))
    assert device.fp32_lanes == lanes
    assert device.lanes("float64") == lanes // 2
    assert device.lanes("int8") == lanes * 4
    assert device.vector_bits == lanes * 32


@pytest.mark.parametrize(
    ("flags", "lanes", "registers"),
    [
        ({"sse2", "avx", "avx2", "avx512f"}, 16, 32),
        ({"sse2", "avx", "avx2"}, 8, 16),
        ({"sse2"}, 4, 16),
    ],
)
def test_host_width_comes_from_cpuinfo_flags(
    monkeypatch: pytest.MonkeyPatch,
    fresh_models: None,
    flags: set[str],
    lanes: int,
    registers: int,
) -> None:
    if HOST_ARCH != "x86_64":
        pytest.skip("x86 cpuinfo flags only matter on an x86-64 host")
    monkeypatch.setattr(device_module, "host_cpu_features", lambda: frozenset(flags))
    native = device_model(Target("llvm"))
    assert (native.fp32_lanes, native.vector_registers) == (lanes, registers)
    # An explicit -mcpu overrides what this machine has.
    assert device_model(Target("llvm -mcpu=znver4")).fp32_lanes == 16


def test_cpuinfo_spellings_get_llvm_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_models: None
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nFeatures : fp asimd asimddp i8mm sve\n\n")
    monkeypatch.setattr(device_module, "_CPUINFO", cpuinfo)
    device_module.host_cpu_features.cache_clear()
    features = device_module.host_cpu_features()
    assert {"asimd", "neon", "asimddp", "dotprod", "i8mm", "sve"} <= features


def test_a_cross_target_sees_its_board_whatever_the_host(
    monkeypatch: pytest.MonkeyPatch, fresh_models: None
) -> None:
    baseline = device_model(A72)
    assert (baseline.num_cores, baseline.vector_registers, baseline.vector_bits) == (4, 32, 128)
    assert baseline.has("neon") and not baseline.has("dotprod")
    assert baseline.l2_cache_bytes == 1 << 20
    # A host with 64 cores, AVX-512 and huge caches changes nothing for the board.
    device_model.cache_clear()
    monkeypatch.setattr(device_module, "host_cores", lambda: 64)
    monkeypatch.setattr(device_module, "host_cpu_count", lambda: 64)
    monkeypatch.setattr(device_module, "host_caches", lambda: {"l1": 1, "l2": 2, "l3": 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(device_module, "host_cpu_features", lambda: frozenset({"avx512f"}))
    assert device_model(A72) == baseline
    hardware = HardwareParams.for_target(A72)
    assert (hardware.num_cores, hardware.vector_registers, hardware.vector_bytes) == (4, 32, 16)
    assert hardware.fma_register_operands and baseline.fma_register_operands


def test_a_named_board_is_not_the_build_machine_of_its_kind(
    monkeypatch: pytest.MonkeyPatch, fresh_models: None
) -> None:
    """Built on an AArch64 server, `-mtriple=aarch64-linux-gnu -mcpu=cortex-a72` still
    describes a Raspberry Pi 4; only a target without a triple is this machine."""
    monkeypatch.setattr(target_module, "host_triple", lambda: "aarch64-linux-gnu")
    monkeypatch.setattr(device_module, "host_cores", lambda: 64)
    monkeypatch.setattr(device_module, "host_caches", lambda: {"l2": 1})
    assert A72.is_host
    board = device_model(A72)
    assert (board.num_cores, board.l2_cache_bytes) == (4, 1 << 20)
    server = device_model(Target("llvm -mcpu=neoverse-n1"))  # this machine, tuned for N1
    assert (server.num_cores, server.l2_cache_bytes) == (64, 1)
    assert server.has("dotprod") and server.arch == "aarch64"


def test_cpus_of_another_architecture_or_unknown_ones_are_reported() -> None:
    with pytest.raises(TargetError, match=r"-mcpu=haswell is an x86_64 CPU.*aarch64"):
        device_model(Target("llvm -mtriple=aarch64-linux-gnu -mcpu=haswell"))
    with pytest.raises(TargetError, match="-mcpu=cortex-a72 is an aarch64 CPU"):
        device_model(Target("llvm -mtriple=x86_64-linux-gnu -mcpu=cortex-a72"))
    with pytest.warns(UserWarning, match=r"-mcpu=cortex-a99 is not in Ember's table.*a72"):
        unknown = device_model(Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a99"))
    assert unknown.features == frozenset({"neon"}) and unknown.num_cores == 4


def test_target_options_override_the_table() -> None:
    device = device_model(Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a55 -num-cores=8"))
    assert device.num_cores == 8 and device.has("dotprod")
    without = device_model(
        Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76 -mattr=-dotprod")
    )
    assert not without.has("dotprod") and without.has("fp16")
    with_i8mm = device_model(Target("llvm -mtriple=aarch64-linux-gnu -mattr=+i8mm"))
    assert with_i8mm.has("i8mm") and with_i8mm.cpu == "generic"


@pytest.mark.parametrize(
    "cpu",
    [
        "cortex-a53",
        "cortex-a55",
        "cortex-a72",
        "cortex-a76",
        "cortex-a78",
        "cortex-x1",
        "neoverse-n1",
        "neoverse-n2",
        "neoverse-v1",
        "apple-m1",
    ],
)
def test_the_table_knows_the_aarch64_cores(cpu: str) -> None:
    assert cpu in CPU_TABLE
    device = device_model(Target(f"llvm -mtriple=aarch64-linux-gnu -mcpu={cpu}"))
    assert device.arch == "aarch64" and device.cpu == cpu
    assert device.has("neon") and device.vector_registers == 32
    assert device.l1_cache_bytes >= 32 * 1024


def _conv_dag(target: Target) -> ComputeDAG:
    """A 3x3 conv with its weight packed for `target`, as the build would tile it."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (1, 28, 28, 32))
    w = b.param("w", rng.standard_normal((3, 3, 32, 64)).astype("float32"))
    y = b.add("conv", [x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"))
    graph, params = pack_weights(*b.build([b.add("relu", [y])]), target)
    (group,) = fuse(graph, params).groups
    return group_to_dag(group)[0]


def test_default_schedules_and_sketch_rules_see_the_same_machine(
    monkeypatch: pytest.MonkeyPatch, fresh_models: None
) -> None:
    explicit = Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores=4")
    dag = _conv_dag(A72)
    assert dag.workload_key == _conv_dag(explicit).workload_key  # packed alike
    expected = default_schedule(dag, explicit)
    device_model.cache_clear()
    monkeypatch.setattr(device_module, "host_cores", lambda: 64)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    # The default schedule of the board is the one for its 4 cores, not the host's 64,
    # and it differs from a one-core board's (no parallel loop).
    assert default_schedule(dag, A72).steps == expected.steps
    single = Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores=1")
    assert default_schedule(dag, single).steps != expected.steps
    # The search's task for the same target carries the same machine.
    device = device_model(A72)
    task = SearchTask.create(dag, A72)
    assert task.hardware_params == HardwareParams.from_device(device)
    assert task.hardware_params.vector_registers == device.vector_registers == 32


def test_dtype_widths() -> None:
    assert [dtype_bits(d) for d in ("float32", "float64", "int8", "uint16", "bool")] == [
        32,
        64,
        8,
        16,
        8,
    ]
    assert dtype_bits("float32x16") == 32 and dtype_bytes("bool") == 1
    with pytest.raises(ValueError, match="not a dtype"):
        dtype_bits("32float")


def test_host_caches_read_from_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_models: None
) -> None:
    levels = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K")]
    levels.append((3, "Unified", "32M"))
    for number, (level, kind, size) in enumerate(levels):
        index = tmp_path / f"index{number}"
        index.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(f"{value}\n")
        (index / "coherency_line_size").write_text("128\n")
    monkeypatch.setattr(device_module, "_CACHE_DIR", tmp_path)
    device_module.host_caches.cache_clear()
    caches = device_module.host_caches()
    assert caches == {"l1": 48 * 1024, "l2": 2 << 20, "l3": 32 << 20, "line": 128}
    host = device_model(Target("llvm"))
    assert (host.l1_cache_bytes, host.l2_cache_bytes, host.cache_line_bytes) == (
        48 * 1024,
        2 << 20,
        128,
    )


def test_host_cores_is_positive() -> None:
    assert 1 <= device_module.host_cores() <= device_module.host_cpu_count()
    assert HardwareParams.for_target("llvm").num_cores == device_module.host_cores()


# What reading the host's CPU facts looks like in source code: os's functions, the files.
_HOST_CALLS = frozenset({"cpu_count", "sched_getaffinity", "process_cpu_count"})
_HOST_FILES = ("/proc/cpuinfo", "/sys/devices/system/cpu")


def test_no_module_but_the_device_model_reads_the_host_cpu() -> None:
    offenders = []
    for path in sorted(EMBER.rglob("*.py")):
        if path.name == "device.py" and path.parent == EMBER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Attribute) and node.attr in _HOST_CALLS:
                text = node.attr
            elif isinstance(node, ast.Name) and node.id in _HOST_CALLS:
                text = node.id
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value if any(f in node.value for f in _HOST_FILES) else None
            if text:
                offenders.append(f"{path.relative_to(EMBER.parent)}:{node.lineno}: {text!r}")
    assert not offenders, "read CPU facts through ember.device:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    ("triple", "line", "reported"),
    [
        ("aarch64-linux-gnu", "Features : fp asimd asimddp", True),
        # qemu-aarch64 on x86: /proc/cpuinfo is the emulating machine's.
        ("aarch64-linux-gnu", "flags : fpu sse2 avx2", False),
        ("x86_64-linux-gnu", "flags : fpu sse2 avx2", True),
    ],
)
def test_a_board_reports_only_flags_of_its_own_architecture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_models: None, triple: str,
    line: str, reported: bool,
) -> None:  # fmt: skip
    import ember.target

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor : 0\nmodel name : Some CPU\n{line}\n\n")
    monkeypatch.setattr(device_module, "_CPUINFO", cpuinfo)
    monkeypatch.setattr(ember.target, "host_triple", lambda: triple)
    device_module.host_cpu_features.cache_clear()
    description = device_module.host_description()
    assert description["triple"] == triple and description["arch"] == triple.split("-")[0]
    assert bool(description["features"]) is reported
    assert description["cpu"] == ("Some CPU" if reported else "")


def test_a_32_bit_arm_board_has_16_quad_registers() -> None:
    """A Raspberry Pi 4 with a 32-bit OS: the Cortex-A72 of the table (an ARMv8 core
    runs AArch32 code), with AArch32 NEON's 16 quad registers."""
    board = device_model(Target("llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72"))
    assert (board.arch, board.vector_registers, board.fp32_lanes) == ("arm", 16, 4)
    assert board.num_cores == 4 and board.fma_register_operands and board.has("neon")
