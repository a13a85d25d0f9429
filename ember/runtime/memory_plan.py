"""The static memory plan: every intermediate tensor of a built graph at a fixed offset
in one arena, tensors that are never live at the same time sharing bytes.

    lifetimes = [TensorLifetime("a", 4096, first=0, last=2), ...]
    plan = plan_memory(lifetimes)
    plan.arena_bytes, plan.offset("a")

A lifetime is the closed interval of execution steps from the step that writes the
tensor to the last step that reads it. Both ends are inclusive on purpose: a step reads
its inputs while it writes its outputs, so a tensor whose last reader is step `i` must
not share memory with one that step `i` writes (kernels take `restrict` pointers).

Placement is greedy by size (largest first), each tensor at the best-fitting gap
between the tensors already placed whose lifetimes overlap its own, or above them all.
Largest-first keeps the big activations of a convolutional network packed low and lets
the small ones fill the holes; on chains (a network's usual shape) the arena comes out
near the largest pair of adjacent activations rather than their sum. Offsets are
multiples of `ALIGNMENT` (64 bytes: a cache line, and the widest vector load).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ember.runtime.abi import ALIGNMENT


@dataclass(frozen=True, slots=True)
class TensorLifetime:
    """A tensor to place: its size, and the first and last step that touch it."""

    name: str
    nbytes: int
    first: int
    last: int

    def __post_init__(self) -> None:
        if self.nbytes < 0 or self.last < self.first:
            raise ValueError(f"bad lifetime {self}: needs nbytes >= 0 and first <= last")

    def overlaps(self, other: TensorLifetime) -> bool:
        """Whether both tensors are live at some step."""
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where one tensor lives: `offset` bytes into the arena."""

    tensor: TensorLifetime
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.tensor.nbytes


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The placement of every intermediate tensor; `arena_bytes` is what one instance
    allocates, `total_bytes` what separate buffers would take."""

    allocations: tuple[Allocation, ...]  # in the order the tensors were given
    arena_bytes: int

    @property
    def total_bytes(self) -> int:
        return sum(allocation.tensor.nbytes for allocation in self.allocations)

    def offset(self, name: str) -> int:
        for allocation in self.allocations:
            if allocation.tensor.name == name:
                return allocation.offset
        raise KeyError(f"tensor {name!r} is not in the memory plan")

    def to_json(self) -> dict[str, object]:
        """The plan as it is recorded in a library's metadata."""
        return {
            "alignment": ALIGNMENT,
            "arena_bytes": self.arena_bytes,
            "total_bytes": self.total_bytes,
            "tensors": [
                {
                    "name": allocation.tensor.name,
                    "offset": allocation.offset,
                    "nbytes": allocation.tensor.nbytes,
                    "first_step": allocation.tensor.first,
                    "last_step": allocation.tensor.last,
                }
                for allocation in self.allocations
            ],
        }


def align(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """`nbytes` rounded up to a multiple of `alignment`."""
    return -(-nbytes // alignment) * alignment


def plan_memory(tensors: Sequence[TensorLifetime]) -> MemoryPlan:
    """Place `tensors` in one arena so that no two live at the same step overlap."""
    names = [tensor.name for tensor in tensors]
    if len(set(names)) != len(names):
        raise ValueError("plan_memory: tensor names must be unique")
    placed: list[Allocation] = []
    # Largest first; ties by earlier start so the result does not depend on hashing.
    for tensor in sorted(tensors, key=lambda t: (-t.nbytes, t.first, t.last, t.name)):
        neighbours = [a for a in placed if a.tensor.overlaps(tensor) and a.tensor.nbytes > 0]
        placed.append(Allocation(tensor, _best_fit(tensor.nbytes, neighbours)))
    by_name = {allocation.tensor.name: allocation for allocation in placed}
    ordered = tuple(by_name[name] for name in names)
    arena = align(max((allocation.end for allocation in ordered), default=0))
    return MemoryPlan(ordered, arena)


def _best_fit(nbytes: int, neighbours: Iterable[Allocation]) -> int:
    """The aligned offset of the smallest gap among `neighbours` that holds `nbytes`,
    or the first aligned offset above all of them."""
    best: tuple[int, int] | None = None  # (gap size, offset)
    cursor = 0
    for allocation in sorted(neighbours, key=lambda a: a.offset):
        gap = allocation.offset - cursor
        if gap >= nbytes and (best is None or gap < best[0]):
            best = (gap, cursor)
        cursor = max(cursor, align(allocation.end))
    return cursor if best is None else best[1]
