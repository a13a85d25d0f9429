"""The unroll pass: UNROLLED loops with a small constant extent become straight-line code.

`unroll_loops(func) -> func`. Pre: loop IR. Post: every UNROLLED For whose extent is a
constant of at most `MAX_UNROLL` is replaced by one copy of its body per iteration, each
wrapped in `LetStmt(var, Const(i), body)`; `simplify` then inlines the constant, so the
indices of a register tile fold to constants (`acc[0, 48]`) and `promote_registers`
can keep the tile in variables. Longer or variable UNROLLED loops are kept (the
renderer puts an unroll pragma on them).

Each copy is the same statement object, so a buffer allocated inside the loop is
allocated once per copy (the renderer scopes each copy's declaration in its own block
when the names clash).
"""

from __future__ import annotations

from ember.loop.ir import For, ForKind, LetStmt, PrimFunc, Stmt, rewrite_func, seq
from ember.te.expr import Const

# Longest loop written out copy by copy (the renderer's explicit-unroll limit too).
MAX_UNROLL = 64


def unroll_loops(func: PrimFunc) -> PrimFunc:
    """`func` with its short constant-extent UNROLLED loops written out."""
    return rewrite_func(func, _unrolled)


def _unrolled(stmt: Stmt) -> Stmt | None:
    if not isinstance(stmt, For) or stmt.kind is not ForKind.UNROLLED:
        return None
    count = _extent(stmt.extent)
    if count is None or count > MAX_UNROLL:
        return None
    var = stmt.var
    return seq(*(LetStmt(var, Const(i, var.dtype), stmt.body) for i in range(count)))


def _extent(extent: object) -> int | None:
    if isinstance(extent, Const) and not isinstance(extent.value, (bool, float)):
        return int(extent.value)
    return None
