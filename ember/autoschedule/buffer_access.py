"""How one statement of a loop program touches its buffers: the memory half of the
program features (`ember.autoschedule.features`).

    accesses = buffer_accesses(store, loads, loops)   # one per buffer, store first
    access.unique_elements(level)    # elements touched while loops[level:] run

Each index dimension is read as a linear form of the enclosing loop variables
(`ember.loop.analysis.to_linear`); atoms that are not a loop variable (the floordiv
and floormod of a fused loop, a Load) are bounded with interval arithmetic. The span
of a dimension while the loops from `level` inward run is `1 + sum |coefficient| *
(extent - 1)` plus the atoms' widths, capped by the dimension's size; the elements
touched are the product of the spans. This over-counts strided or overlapping windows
a little (a stride-2 conv's input), which is the usual trade of such models: exact
footprints would cost an enumeration per state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ember.device import dtype_bytes
from ember.loop.analysis import Interval, const_interval, to_linear
from ember.loop.ir import Buffer, ForKind, Load, Store
from ember.te.expr import Binary, BinaryOp, Const, Expr, Unary, UnaryOp, Var
from ember.te.visit import free_vars

CACHE_LINE_BYTES = 64


@dataclass(frozen=True, slots=True)
class Loop:
    """An enclosing loop of a statement (extent 1 when not a constant)."""

    var: Var
    extent: int
    kind: ForKind
    unroll_max_step: int


def item_bytes(buffer: Buffer) -> int:
    """Bytes of one element of `buffer`."""
    return dtype_bytes(buffer.dtype)


@dataclass(frozen=True, slots=True)
class _Atom:
    """A non-variable term `coefficient * atom` of an index, with the positions of the
    loops it depends on."""

    coefficient: int
    expr: Expr
    positions: frozenset[int]


@dataclass(frozen=True, slots=True)
class _Dimension:
    """One index dimension: coefficients per loop position, plus the other atoms."""

    terms: tuple[tuple[int, int], ...]
    atoms: tuple[_Atom, ...]


@dataclass(slots=True)
class BufferAccess:
    """Everything a statement does to one buffer: its index tuples (one per distinct
    access), whether it reads or writes, and how often per execution."""

    buffer: Buffer
    loops: tuple[Loop, ...]
    indices: list[tuple[_Dimension, ...]] = field(default_factory=list)
    is_read: bool = False
    is_write: bool = False
    accesses: int = 0

    @property
    def item_bytes(self) -> int:
        return item_bytes(self.buffer)

    @property
    def executions(self) -> int:
        return math.prod(loop.extent for loop in self.loops)

    @property
    def bytes(self) -> int:
        """Bytes accessed in all, repeats included."""
        return self.executions * self.item_bytes * self.accesses

    @property
    def unique_bytes(self) -> int:
        return self.unique_elements(0) * self.item_bytes

    def moves_with(self, position: int) -> bool:
        """Whether loop `position`'s variable occurs in an index of the buffer."""
        return any(
            _stride_of(index, position) != 0 or _depends(index, position) for index in self.indices
        )

    def unique_elements(self, level: int) -> int:
        """Distinct elements touched while the loops from `level` inward run (the
        outer ones fixed)."""
        return max((math.prod(self._spans(index, level)) for index in self.indices), default=1)

    def unique_lines(self, level: int) -> int:
        """Distinct cache lines touched while the loops from `level` inward run: the
        last dimension is contiguous, the others multiply."""
        best = 1
        for index in self.indices:
            spans = self._spans(index, level)
            if not spans:
                continue
            last = math.ceil(spans[-1] * self.item_bytes / CACHE_LINE_BYTES)
            best = max(best, math.prod(spans[:-1]) * last)
        return best

    def flat_stride(self, position: int) -> int:
        """Elements of the flattened buffer one step of loop `position` moves the
        first access by (0: it does not move it)."""
        if not self.indices:
            return 0
        strides = _row_major_strides(self.buffer.shape)
        index = self.indices[0]
        return sum(
            s * _stride_of_dim(d, position, self.loops) for s, d in zip(strides, index, strict=True)
        )

    def lines(self) -> float:
        """Cache lines fetched in all: iterations of the innermost loops that do not
        move the access hit the same line; the innermost loop that moves it fetches a
        new line every `64 / (stride * item bytes)` iterations."""
        repeats = 1
        for position in range(len(self.loops) - 1, -1, -1):
            if self.moves_with(position):
                stride = abs(self.flat_stride(position)) or 1
                share = min(1.0, stride * self.item_bytes / CACHE_LINE_BYTES)
                return self.executions / repeats * share * self.accesses
            repeats *= self.loops[position].extent
        return float(self.accesses)

    def _spans(self, index: tuple[_Dimension, ...], level: int) -> list[int]:
        spans = []
        for size, dim in zip(self.buffer.shape, index, strict=True):
            span = 1
            for position, coefficient in dim.terms:
                if position >= level:
                    span += abs(coefficient) * (self.loops[position].extent - 1)
            for atom in dim.atoms:
                if max(atom.positions) >= level:
                    span += abs(atom.coefficient) * _atom_width(atom, level, self.loops, size)
            spans.append(min(span, size))
        return spans


def buffer_accesses(
    store: Store, loads: Sequence[Load], loops: Sequence[Loop]
) -> list[BufferAccess]:
    """One BufferAccess per buffer the statement touches, the stored one first."""
    loops = tuple(loops)
    position = {loop.var: k for k, loop in enumerate(loops)}
    found: dict[int, BufferAccess] = {}
    seen: dict[int, set[tuple[Expr, ...]]] = {}
    for buffer, indices, is_write in (
        (store.buffer, store.indices, True),
        *((load.buffer, load.indices, False) for load in loads),
    ):
        access = found.setdefault(id(buffer), BufferAccess(buffer, loops))
        access.accesses += 1
        access.is_write |= is_write
        access.is_read |= not is_write
        if indices not in seen.setdefault(id(buffer), set()):
            seen[id(buffer)].add(indices)
            access.indices.append(tuple(_dimension(i, position) for i in indices))
    return list(found.values())


def _dimension(index: Expr, position: dict[Var, int]) -> _Dimension:
    terms: list[tuple[int, int]] = []
    atoms: list[_Atom] = []
    for atom, coefficient in to_linear(index).terms:
        if isinstance(atom, Var):
            if atom in position:
                terms.append((position[atom], coefficient))
            continue
        positions = frozenset(position[v] for v in free_vars(atom) if v in position)
        if positions:
            atoms.append(_Atom(coefficient, atom, positions))
    return _Dimension(tuple(terms), tuple(atoms))


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    strides, total = [], 1
    for extent in reversed(shape):
        strides.append(total)
        total *= extent
    return strides[::-1]


def _stride_of(index: tuple[_Dimension, ...], position: int) -> int:
    return sum(abs(c) for dim in index for p, c in dim.terms if p == position)


def _depends(index: tuple[_Dimension, ...], position: int) -> bool:
    return any(position in atom.positions for dim in index for atom in dim.atoms)


def _stride_of_dim(dim: _Dimension, position: int, loops: Sequence[Loop]) -> int:
    stride = sum(c for p, c in dim.terms if p == position)
    for atom in dim.atoms:
        if position in atom.positions:
            env = {loop.var: 0 for loop in loops}
            start = _evaluate(atom.expr, env)
            env[loops[position].var] = 1
            step = _evaluate(atom.expr, env)
            # Unknown (a Load in an index): count it as moving by one element.
            delta = 1 if start is None or step is None else step - start
            stride += atom.coefficient * delta
    return stride


def _atom_width(atom: _Atom, level: int, loops: Sequence[Loop], size: int) -> int:
    """How far `atom` ranges while loops from `level` inward run (outer ones at 0)."""
    ranges = {
        loop.var: Interval.extent(loop.extent) if k >= level else Interval.point(0)
        for k, loop in enumerate(loops)
    }
    bounds = const_interval(atom.expr, ranges)
    if bounds.lo is None or bounds.hi is None:
        return size
    return bounds.hi - bounds.lo


_ARITHMETIC: dict[BinaryOp, Callable[[int, int], int | None]] = {
    BinaryOp.ADD: lambda a, b: a + b,
    BinaryOp.SUB: lambda a, b: a - b,
    BinaryOp.MUL: lambda a, b: a * b,
    BinaryOp.FLOOR_DIV: lambda a, b: a // b if b else None,
    BinaryOp.FLOOR_MOD: lambda a, b: a % b if b else None,
    BinaryOp.MIN: min,
    BinaryOp.MAX: max,
}


def _evaluate(expr: Expr, env: dict[Var, int]) -> int | None:
    """The integer value of an index expression, None when it is not plain
    arithmetic of loop variables."""
    match expr:
        case Const(value) if not isinstance(value, float):
            return int(value)
        case Var():
            return env.get(expr)
        case Unary(UnaryOp.NEG, a):
            operand = _evaluate(a, env)
            return None if operand is None else -operand
        case Binary(op, a, b) if op in _ARITHMETIC:
            left, right = _evaluate(a, env), _evaluate(b, env)
            if left is None or right is None:
                return None
            return _ARITHMETIC[op](left, right)
    return None
