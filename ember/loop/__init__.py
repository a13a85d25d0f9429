"""Loop IR: what schedules lower to and code generators render."""

from ember.loop.interpret import compile_func, evaluate_expr, run_func
from ember.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
    seq,
    split_dtype,
    vector_dtype,
    walk_stmts,
)
from ember.loop.simplify import simplify, simplify_expr
from ember.loop.verify import verify

__all__ = [
    "Allocate",
    "Broadcast",
    "Buffer",
    "For",
    "ForKind",
    "IfThenElse",
    "LetStmt",
    "Load",
    "PrimFunc",
    "Ramp",
    "Seq",
    "Stmt",
    "Store",
    "compile_func",
    "evaluate_expr",
    "run_func",
    "seq",
    "simplify",
    "simplify_expr",
    "split_dtype",
    "vector_dtype",
    "verify",
    "walk_stmts",
]
