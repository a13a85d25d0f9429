"""Loop IR: what schedules lower to and code generators render."""

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
)

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
    "seq",
    "split_dtype",
    "vector_dtype",
]
