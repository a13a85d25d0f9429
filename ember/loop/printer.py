"""Indented text form of loop IR, for debugging dumps and golden tests."""

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
    Store,
)
from ember.te.printer import format_expr


def format_stmt(stmt: Stmt, indent: int = 0) -> str:
    return "\n".join(_lines(stmt, indent))


def format_func(func: PrimFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in func.args)
    return f"func {func.name}({args}) {{\n{format_stmt(func.body, 1)}\n}}"


def _lines(stmt: Stmt, indent: int) -> list[str]:
    pad = "  " * indent
    match stmt:
        case For(var, extent, kind, body, unroll_max_step):
            label = "for" if kind is ForKind.SERIAL else f"for.{kind.value}"
            pragma = f" (unroll <= {unroll_max_step})" if unroll_max_step else ""
            head = f"{pad}{label} {var.name} in 0..{format_expr(extent)}{pragma}:"
            return [head, *_lines(body, indent + 1)]
        case Store(buffer, indices, value, predicate):
            index = ", ".join(format_expr(i) for i in indices)
            where = "" if predicate is None else f" where {format_expr(predicate)}"
            return [f"{pad}{buffer.name}[{index}] = {format_expr(value)}{where}"]
        case Allocate(buffer, body):
            head = f"{pad}allocate {buffer.name}: {buffer.dtype}{list(buffer.shape)} {buffer.scope}"
            return [head, *_lines(body, indent)]
        case IfThenElse(condition, then_body, else_body):
            lines = [f"{pad}if {format_expr(condition)}:", *_lines(then_body, indent + 1)]
            if else_body is not None:
                lines += [f"{pad}else:", *_lines(else_body, indent + 1)]
            return lines
        case Seq(stmts):
            return [line for s in stmts for line in _lines(s, indent)]
        case LetStmt(var, value, body):
            return [f"{pad}let {var.name} = {format_expr(value)}", *_lines(body, indent)]
    raise TypeError(f"cannot print statement {type(stmt).__name__}")
