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

from ember.loop.ir import (
    Allocate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Seq,
    Stmt,
    seq,
)
from ember.te.expr import Const

# Longest loop written out copy by copy (the renderer's explicit-unroll limit too).
MAX_UNROLL = 64


def unroll_loops(func: PrimFunc) -> PrimFunc:
    """`func` with its short constant-extent UNROLLED loops written out."""
    body = _unroll(func.body)
    return func if body is func.body else PrimFunc(func.name, func.args, body)


def _unroll(stmt: Stmt) -> Stmt:
    match stmt:
        case For(var, extent, kind, body, unroll):
            new_body = _unroll(body)
            count = _extent(extent)
            if kind is ForKind.UNROLLED and count is not None and count <= MAX_UNROLL:
                return seq(*(LetStmt(var, Const(i, var.dtype), new_body) for i in range(count)))
            return stmt if new_body is body else For(var, extent, kind, new_body, unroll)
        case Seq(stmts):
            new = tuple(_unroll(s) for s in stmts)
            return stmt if all(a is b for a, b in zip(new, stmts, strict=True)) else seq(*new)
        case IfThenElse(condition, then_body, else_body):
            then_new = _unroll(then_body)
            else_new = None if else_body is None else _unroll(else_body)
            if then_new is then_body and else_new is else_body:
                return stmt
            return IfThenElse(condition, then_new, else_new)
        case Allocate(buffer, body):
            new_body = _unroll(body)
            return stmt if new_body is body else Allocate(buffer, new_body)
        case LetStmt(var, value, body):
            new_body = _unroll(body)
            return stmt if new_body is body else LetStmt(var, value, new_body)
    return stmt


def _extent(extent: object) -> int | None:
    if isinstance(extent, Const) and not isinstance(extent.value, (bool, float)):
        return int(extent.value)
    return None
