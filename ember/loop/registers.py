"""The register promotion pass (scalar replacement): small local buffers whose every
access has a constant index become one-value buffers the C renderer declares as
variables, so a register tile's accumulators live in (vector) registers instead of a
stack array that the compiler loads and stores around every FMA.

`promote_registers(func) -> func`. Pre: loop IR after `vectorize` (vector accesses are
Ramps) and `simplify` (indices of unrolled tiles are constants). Post: every local
Allocate of a non-bool buffer with at most `MAX_REGISTERS` values, all of whose Loads
and Stores in its body have the flat index `Const(c)` (scalar accesses, width 1) or
`Ramp(Const(c), 1, width)` (whole vectors), one width for all and `c` a multiple of
it, is replaced by `size / width` nested Allocates of buffers of `width` elements,
each accessed whole (`Ramp(0, 1, width)` or index 0). A buffer accessed any other way
is left as it is: promotion never changes which elements are read or written.

`is_register(buffer, body)` says whether an Allocate's buffer is accessed only whole,
so the renderer can declare it as one variable.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
    rewrite_func,
    stmt_exprs,
)
from ember.loop.vectorize import flatten_index, lanes_of
from ember.te.expr import Const, Expr
from ember.te.visit import map_expr, walk

# Most variables one buffer is split into: a tile of more accumulators than the vector
# registers (32 on AVX-512 and NEON) spills whatever we do, and huge unrolled bodies
# only slow the compiler down.
MAX_REGISTERS = 64


def promote_registers(func: PrimFunc) -> PrimFunc:
    """`func` with its small constant-indexed local buffers split into variables."""
    return rewrite_func(func, _promoted)


def is_register(buffer: Buffer, body: Stmt) -> bool:
    """Whether every access of `buffer` in `body` reads or writes all of it at once."""
    return _whole(buffer, _accesses(buffer, body))


def register_buffers(body: Stmt) -> list[Buffer]:
    """The buffers of `body` that `is_register` holds for, found in one walk (asking
    `is_register` of each Allocate walks its body again: nested register tiles of 28
    accumulators made that most of a candidate's rendering time)."""
    accesses: dict[int, tuple[Buffer, list[tuple[tuple[Expr, ...], int]]]] = {}
    for node in stmt_exprs(body):
        for sub in walk(node):
            if isinstance(sub, Load):
                accesses.setdefault(id(sub.buffer), (sub.buffer, []))[1].append(
                    (sub.indices, lanes_of(sub))
                )
    for store in _stores(body):
        lanes = max([lanes_of(store.value), *(lanes_of(i) for i in store.indices)])
        accesses.setdefault(id(store.buffer), (store.buffer, []))[1].append((store.indices, lanes))
    return [buffer for buffer, found in accesses.values() if _whole(buffer, found)]


def _whole(buffer: Buffer, accesses: Iterable[tuple[tuple[Expr, ...], int]]) -> bool:
    if buffer.scope != "local" or buffer.dtype == "bool":
        return False
    for indices, lanes in accesses:
        if lanes != buffer.size or _constant_base(flatten_index(buffer, indices), lanes) != 0:
            return False
    return True


def _promoted(stmt: Stmt) -> Stmt | None:
    return _split(stmt.buffer, stmt.body) if isinstance(stmt, Allocate) else None


def _split(buffer: Buffer, body: Stmt) -> Stmt | None:
    """`body` with `buffer` split into one-access buffers, or None if it cannot be."""
    if buffer.scope != "local" or buffer.dtype == "bool" or buffer.size <= 1:
        return None
    if any(s.buffer is buffer and s.predicate is not None for s in _stores(body)):
        return None  # lanes it skips keep their old values: not one whole variable
    widths = set()
    for indices, lanes in _accesses(buffer, body):
        base = _constant_base(flatten_index(buffer, indices), lanes)
        if base is None or base % lanes:
            return None
        widths.add(lanes)
    if len(widths) != 1:
        return None
    (width,) = widths
    count = buffer.size // width
    if buffer.size % width or count > MAX_REGISTERS or count == 1:
        return None
    parts = tuple(
        Buffer(f"{buffer.name}_{k}", (width,), buffer.dtype, "local") for k in range(count)
    )
    new_body = _Redirect(buffer, parts).stmt(body)
    for part in reversed(parts):
        new_body = Allocate(part, new_body)
    return new_body


def _constant_base(flat: Expr, lanes: int) -> int | None:
    """The first element a flat index addresses if it is a constant (scalar) or a
    contiguous Ramp from a constant; else None."""
    match flat:
        case Const(value) if lanes == 1:
            return int(value)
        case Ramp(Const(value), 1, ramp_lanes) if ramp_lanes == lanes:
            return int(value)
    return None


def _accesses(buffer: Buffer, stmt: Stmt) -> Iterator[tuple[tuple[Expr, ...], int]]:
    """(indices, lanes) of every Load and Store of `buffer` in `stmt`."""
    for node in stmt_exprs(stmt):
        for sub in walk(node):
            if isinstance(sub, Load) and sub.buffer is buffer:
                yield sub.indices, lanes_of(sub)
    for store in _stores(stmt):
        if store.buffer is buffer:
            lanes = max([lanes_of(store.value), *(lanes_of(i) for i in store.indices)])
            yield store.indices, lanes


def _stores(stmt: Stmt) -> Iterator[Store]:
    match stmt:
        case Store():
            yield stmt
        case For(body=body) | Allocate(body=body) | LetStmt(body=body):
            yield from _stores(body)
        case Seq(stmts):
            for s in stmts:
                yield from _stores(s)
        case IfThenElse(_, then_body, else_body):
            yield from _stores(then_body)
            if else_body is not None:
                yield from _stores(else_body)


class _Redirect:
    """Rewrites accesses of `buffer` (constant-indexed, checked by `_split`) into
    whole accesses of its `parts`."""

    def __init__(self, buffer: Buffer, parts: tuple[Buffer, ...]) -> None:
        self.buffer = buffer
        self.parts = parts
        width = parts[0].size
        self.width = width
        self.whole: tuple[Expr, ...] = (Ramp(Const(0), 1, width) if width > 1 else Const(0),)

    def part(self, indices: tuple[Expr, ...], lanes: int) -> Buffer:
        base = _constant_base(flatten_index(self.buffer, indices), lanes)
        assert base is not None  # _split checked every access
        return self.parts[base // self.width]

    def load(self, node: Expr) -> Expr | None:
        if isinstance(node, Load) and node.buffer is self.buffer:
            return Load(self.part(node.indices, lanes_of(node)), self.whole)
        return None

    def expr(self, node: Expr) -> Expr:
        return map_expr(node, self.load)

    def stmt(self, node: Stmt) -> Stmt:
        e, s = self.expr, self.stmt
        match node:
            case Store(target, indices, value, predicate):
                mask = None if predicate is None else e(predicate)
                if target is self.buffer:
                    lanes = max([lanes_of(value), *(lanes_of(i) for i in indices)])
                    return Store(self.part(indices, lanes), self.whole, e(value), mask)
                return Store(target, tuple(e(i) for i in indices), e(value), mask)
            case For(var, extent, kind, body, unroll):
                return For(var, e(extent), kind, s(body), unroll)
            case Seq(stmts):
                return Seq(tuple(s(x) for x in stmts))
            case IfThenElse(condition, then_body, else_body):
                other = None if else_body is None else s(else_body)
                return IfThenElse(e(condition), s(then_body), other)
            case LetStmt(var, value, body):
                return LetStmt(var, e(value), s(body))
            case Allocate(inner, body):
                return Allocate(inner, s(body))
        return node
