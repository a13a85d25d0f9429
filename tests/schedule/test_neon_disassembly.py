"""The NEON code of the default schedules, read from the machine code: MobileNet's and
ResNet-18's convolutions cross-compiled for a Cortex-A72 (`-mcpu=cortex-a72`), the
innermost loop that holds the FMAs found in `aarch64-linux-gnu-objdump -d`: no
accumulator goes through the stack (no load or store at `sp` in the loop), and the
FMAs outnumber the vector loads (a 1x1 conv reuses each loaded input and weight over
the register tile: 14-16 `fmla` per 8-9 vector loads; a depthwise conv reuses only
the weights, R rows x V vectors take V weight and R * V input loads, R / (R + 1) FMAs
a load), and no broadcast takes an instruction of its own (a row's input is
loaded with `ld1r` or used by lane, `fmla v.4s, v.4s, v.s[0]`: no `dup`). Times
under emulation mean nothing; this is what a real board would run.

The first convs are checked too: before GCC's pre-allocation scheduling was turned
off for AArch64 (`ember.toolchain`), their unrolled 3x3x3 windows spilled."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import ember
from ember.autoschedule import extract_tasks
from ember.backend import compile_kernel
from ember.schedule.default import default_schedule

TARGET = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"
OBJDUMP = "aarch64-linux-gnu-objdump"
_INSTRUCTION = re.compile(r"\s+([0-9a-f]+):\t(\S+)\s*(.*)")
_NOT_BRANCHES = ("bl", "blr", "bic", "bif", "bit", "bsl")


@dataclass(frozen=True)
class InnerLoop:
    """The instructions of the innermost loop that holds FMAs."""

    opcodes: Counter[str]
    stack_accesses: int
    vector_loads: int


def fma_loop(library: Path) -> InnerLoop:
    listing = subprocess.run(
        [OBJDUMP, "-d", "--no-show-raw-insn", str(library)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    rows = [m.groups() for m in map(_INSTRUCTION.match, listing.splitlines()) if m]
    index = {int(address, 16): i for i, (address, _, _) in enumerate(rows)}
    loops = []  # (first, last) instruction of each backward branch's loop
    for last, (address, opcode, operands) in enumerate(rows):
        target = re.match(r"([0-9a-f]+) <", operands)
        if opcode.startswith("b") and opcode not in _NOT_BRANCHES and target:
            start = int(target.group(1), 16)
            if start < int(address, 16) and start in index:
                loops.append((index[start], last))
    for first, last in sorted(loops, key=lambda loop: loop[1] - loop[0]):
        body = rows[first : last + 1]
        opcodes = Counter(opcode for _, opcode, _ in body)
        if opcodes["fmla"]:
            stack = sum("[sp" in operands for _, _, operands in body)
            loads = sum(
                op.startswith("ld") and re.match(r"\{?[qsdv]\d", operands) is not None
                for _, op, operands in body
            )
            return InnerLoop(opcodes, stack, loads)
    raise AssertionError(f"no loop with FMAs in {library}")


@pytest.fixture(scope="module")
def kernels() -> dict[str, list[tuple[str, InnerLoop]]]:
    if shutil.which(OBJDUMP) is None:
        pytest.skip(f"{OBJDUMP} is not installed (gcc-aarch64-linux-gnu's binutils)")
    found: dict[str, list[tuple[str, InnerLoop]]] = {"1x1": [], "depthwise": [], "KxK": []}
    for network in ("mobilenet", "resnet-18"):
        graph, params = ember.testing.get_workload(network, layout="NHWC")
        tasks, _ = extract_tasks(graph, params, TARGET)
        for task in tasks:
            kind = _kind(task.workload_key)
            if kind is None:
                continue
            try:
                compiled = compile_kernel(default_schedule(task.compute_dag, task.target),
                                          TARGET, "kernel")  # fmt: skip
            except ember.EmberError as error:
                pytest.skip(f"no aarch64 cross compiler: {error}")
            found[kind].append((task.workload_key, fma_loop(compiled.path)))
    return found


def _kind(workload_key: str) -> str | None:
    """The conv kind from the weight shape of a workload key: packed [O/b, kh, kw, I,
    b] (1x1, or KxK: the 3x3 convs and the first convs, 3x3 and 7x7 over 3 input
    channels, whose whole window GCC unrolls into the loop), or depthwise HWIO [kh,
    kw, 1, C]; None for the rest."""
    weight = eval(workload_key)[2]
    if len(weight) == 5:
        return "1x1" if weight[1:3] == [1, 1] else "KxK"
    if len(weight) == 4 and weight[2] == 1 and weight[:2] == [3, 3]:
        return "depthwise"
    return None


def test_no_accumulator_goes_through_the_stack(
    kernels: dict[str, list[tuple[str, InnerLoop]]],
) -> None:
    assert all(kernels.values()), {kind: len(found) for kind, found in kernels.items()}
    spilling = [key for found in kernels.values() for key, loop in found if loop.stack_accesses]
    assert spilling == []


@pytest.mark.parametrize(
    ("kind", "fmas_per_load"), [("1x1", 1.5), ("KxK", 1.5), ("depthwise", 0.75)]
)
def test_fmas_outnumber_the_loads(
    kernels: dict[str, list[tuple[str, InnerLoop]]], kind: str, fmas_per_load: float
) -> None:
    for key, loop in kernels[kind]:
        assert loop.opcodes["fmla"] >= 8, key
        assert loop.opcodes["fmla"] >= fmas_per_load * loop.vector_loads, (key, loop)


@pytest.mark.parametrize("kind", ["1x1", "KxK"])
def test_broadcasts_are_loads_or_lanes(
    kernels: dict[str, list[tuple[str, InnerLoop]]], kind: str
) -> None:
    for key, loop in kernels[kind]:
        assert loop.opcodes["dup"] == 0, (key, loop)
        assert loop.opcodes["ld1r"] + loop.opcodes["ldr"] + loop.opcodes["ldur"] >= 1, key
