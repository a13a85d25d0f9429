"""Which program a State lowers to, as a key: states with equal keys generate the same
kernel, so the search measures only one of them.

    key = program_key(state)      # None where the state does not lower

Different step lists often make the same code: a compute location that lowers alike,
and above all an auto_unroll_max_step pragma whose values (0, 16, 64, 512) unroll the
same loops because no loop inside falls between them. 42% of the trials of a 2,000-trial
ResNet-18 run generated the code of an earlier trial of their task (BENCHMARKS.md,
issue 19, seventh session).

The key is the lowered loop program (`ember.schedule.lower`, the IR the features are
read from, 4-5 ms a state), printed, with each pragma's value replaced by the least
value that unrolls the same loops. Which loops a pragma unrolls is decided when the C
is rendered (`ember.codegen.renderer`: a serial loop inside it whose leaf-statement
count, `const_steps`, is within the budget), after the backend's passes, which make a
vectorized loop one vector statement, or a serial loop where its width cannot be a
vector. Here a loop's count is therefore known only between two bounds: its vectorized
loops counted as one statement each, or as their extent. Where a pragma's value falls
between a loop's bounds, the value is kept as it is. So equal keys mean the same code;
the same code may still have two keys (the builder's exact `code_key` catches those).
"""

from __future__ import annotations

from ember.autoschedule.builder import code_key
from ember.codegen.renderer import const_steps
from ember.loop.ir import For, ForKind, PrimFunc, Stmt, rewrite_func, rewrite_stmts, walk_stmts
from ember.loop.printer import format_func
from ember.schedule.lower import lower
from ember.schedule.state import State


def program_key(state: State) -> str | None:
    """A digest of the program `state` lowers to, pragmas in canonical form; None when
    it does not lower (its build will say why). Kept on the state, where the feature
    helpers' key (`remember_program_key`) may already be."""
    known = state.__dict__.get(_PROGRAM_KEY)
    if known is not None:
        return known[0]
    try:
        func = lower(state)
    except Exception:  # any failure to lower: the builder reports it as the candidate's
        key = None
    else:
        key = lowered_program_key(func)
    remember_program_key(state, key)
    return key


def lowered_program_key(func: PrimFunc) -> str:
    """`program_key` of the state that lowered to `func`: for callers that lower the
    state anyway (feature extraction: the key then costs ~0.5 ms instead of a second
    ~6 ms lowering)."""
    canonical = rewrite_func(func, _canonical_pragma)
    return code_key(format_func(canonical))  # the builder's digest, of the printed IR


def remember_program_key(state: State, key: str | None) -> None:
    """Keep `key` as `state`'s program key (computed elsewhere, e.g. by a helper
    process from a copy of the state)."""
    state.__dict__[_PROGRAM_KEY] = (key,)  # past the frozen dataclass's __setattr__


_PROGRAM_KEY = "_ember_program_key"  # (key,): a key of None is known too


def _canonical_pragma(stmt: Stmt) -> Stmt | None:
    """A loop with an unroll pragma: the least budget that unrolls the same loops
    inside it (0 when it unrolls none), or the budget as it is where some loop's count
    is uncertain around it."""
    if not isinstance(stmt, For) or stmt.unroll_max_step <= 0:
        return None
    budget = stmt.unroll_max_step
    least = 0.0
    for inner in walk_stmts(stmt.body):
        # Serial loops are the renderer's to unroll; vectorized and parallel ones may
        # become serial in the backend's passes. Unrolled ones are unrolled anyway.
        if not isinstance(inner, For) or inner.kind is ForKind.UNROLLED:
            continue
        low, high = _steps_bounds(inner)
        if budget >= high:
            least = max(least, high)
        elif budget >= low:
            return None  # whether the renderer unrolls it depends on the passes
    canonical = int(least)  # a count within the budget: finite
    if canonical == budget:
        return None
    return For(stmt.var, stmt.extent, stmt.kind, stmt.body, canonical)


def _steps_bounds(loop: For) -> tuple[float, float]:
    """The leaf-statement count of `loop` after the backend's passes, at least and at
    most: its vectorized loops as one statement, or as their extent."""
    return const_steps(_without_vectorized(loop)), const_steps(loop)


def _without_vectorized(stmt: Stmt) -> Stmt:
    """`stmt` with each vectorized loop replaced by its body (counted once)."""

    def collapse(inner: Stmt) -> Stmt | None:
        if isinstance(inner, For) and inner.kind is ForKind.VECTORIZED:
            return inner.body
        return None

    return rewrite_stmts(stmt, collapse)
