"""The scalarize pass: VECTORIZED loops become SERIAL loops, for backends without
vector types.

`scalarize(func) -> func`. Pre: loop IR before `vectorize` (no Ramp or Broadcast).
Post: no For of kind VECTORIZED remains; each became a SERIAL loop with the same body,
which computes the same result (the annotation only asserts that iterations are
independent, so running them in order is always legal). Everything else is kept.
"""

from __future__ import annotations

from ember.loop.ir import For, ForKind, PrimFunc, Stmt, rewrite_func


def scalarize(func: PrimFunc) -> PrimFunc:
    """`func` with its VECTORIZED loops run one iteration at a time."""
    return rewrite_func(func, _serial)


def _serial(stmt: Stmt) -> Stmt | None:
    if isinstance(stmt, For) and stmt.kind is ForKind.VECTORIZED:
        return For(stmt.var, stmt.extent, ForKind.SERIAL, stmt.body, stmt.unroll_max_step)
    return None
