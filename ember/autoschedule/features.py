"""Program features: what the learned cost model (`ember.autoschedule.xgb_model`) sees
of a State.

    rows = extract_features(state)        # (num_statements, len(FEATURE_NAMES)) float32
    batch = extract_features_batch(states)

One row per store statement of the State's lowered loop program (the accumulator's
initialisation, its update in the innermost loop, the epilogue's store, ...), as in
Ansor: the model predicts a score per statement and sums them per program, so one
model serves programs with any number of statements.

Where the features come from. The State is lowered with `ember.schedule.lower.lower`
and the statements are read from that loop IR, before the code generator's passes:
annotations are still `For` kinds there (a vectorized loop shows with its lanes, an
unrolled one with its extent), and running unroll + simplify + vectorize as
`kernel_source` does would cost about 20 ms a state for little extra (the unrolled
copies only repeat the statement). Deriving features from the State alone would have
to redo bound inference and inlining, which is exactly what lowering does, so lowering
once is both the simplest and the truthful choice. Measured on 256 sampled states of
ResNet-18's 3x3 conv task on a (busy) 2-core machine: 3.7 to 4.7 ms a state in all,
lowering about 3 ms of it and the rows about 1 ms; `XGBModel` caches rows per state,
so a state is lowered once however often the search scores it. What the code
generator decides that the loop IR does not show is approximated: a VECTORIZED loop
is assumed to become vector code when its extent is a power of two from 2 to 64
(`vec_legal`), else serial.

Scaling: every count, size and extent is `log2(1 + x)` (like Ansor: the model sees
orders of magnitude, and a 2x difference weighs the same at any size); flags are 0 or
1; positions (`*_inner_distance`: 0 = the innermost loop) are plain small integers.
Arithmetic counts are per statement *in all*: operations per execution times how many
times the statement runs (`outer_prod`, the product of its enclosing loop extents).

Memory features come per buffer the statement reads or writes, in `NUM_BUFFER_SLOTS`
slots sorted by bytes accessed (most first, zero-padded). For each: bytes accessed
(with repeats), unique bytes and unique 64-byte cache lines over the whole loop nest
(from the span of every index dimension: coefficients of the loop variables times
their extents, interval bounds for floordiv/floormod atoms), cache lines fetched (the
innermost loop that moves the access decides how many elements share a line), the
stride of the innermost loop and of the vectorized loop in elements of the flattened
buffer, and reuse: *loop-carried* when an enclosing loop does not appear in the index
(its iterations re-read the same data; distance = iterations and bytes of all buffers
touched inside that loop, count = its extent), *serial* when the statement accesses
the buffer more than once without such a loop, *none* otherwise.

A State that fails to lower yields a single all-zero row; extraction never raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ember.autoschedule.buffer_access import BufferAccess, Loop, buffer_accesses, item_bytes
from ember.autoschedule.program import lowered_program_key
from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Seq,
    Stmt,
    Store,
)
from ember.schedule.lower import lower
from ember.schedule.state import State
from ember.te.expr import Binary, BinaryOp, Call, Cast, Const, Expr, Select, Unary, UnaryOp
from ember.te.visit import free_vars

NUM_BUFFER_SLOTS = 5

ARITHMETIC_FEATURES = (
    "float_add_sub",  # float +/- not fused with a multiply
    "float_mul",  # float * not feeding an add
    "float_fma",  # a * b + c pairs the compiler can fuse
    "float_div",
    "float_min_max",
    "float_compare",
    "select",  # conditional values (padding reads)
    "math_call",  # exp, tanh, sqrt, ...
    "cast",
    "int_add_sub",  # index arithmetic
    "int_mul",
    "byte_mul",  # int8/uint8 data widened and multiplied: a quantized conv's products
    "int_div_mod",  # floordiv / floormod of fused loops
    "int_compare",  # bounds tests, min/max of ints
    "logical",  # && || !
)
LOOP_FEATURES = (
    "num_loops",
    "outer_prod",  # how many times the statement runs in all
    "innermost_extent",
    "reduce_loops",  # enclosing loops absent from the stored index
    "reduce_prod",
    "innermost_is_reduce",  # flag
    "num_guards",  # enclosing IfThenElse
    "guard_in_innermost",  # flag: a test inside the innermost loop
    "vec_num",
    "vec_len",  # the innermost vectorized loop's extent
    "vec_prod",
    "vec_inner_distance",
    "vec_is_innermost",  # flag
    "vec_legal",  # flag: extent the vectorize pass accepts (power of two, 2..64)
    "unroll_num",
    "unroll_len",
    "unroll_prod",
    "unroll_inner_distance",
    "unroll_written_out",  # flag: extent <= 64, the renderer writes the copies out
    "auto_unroll_max_step",  # the pragma's budget over the statement
    "auto_unroll_iters",  # inner serial iterations the pragma unrolls
    "par_num",
    "par_len",
    "par_prod",
    "par_depth",  # position of the outermost parallel loop (0 = outermost)
    "work_per_thread",  # outer_prod / par_prod
)
STATEMENT_FEATURES = (
    "is_init",  # flag: stores a constant
    "is_update",  # flag: reads the element it stores (accumulation)
    "stores_local",  # flag: the stored buffer is local (registers)
    "local_alloc_count",  # local allocations around the statement
    "local_alloc_bytes",
    "store_alloc_bytes",  # size of the stored buffer
    "alloc_outer_prod",  # how many times the stored buffer is allocated
    "float_ops_per_unique_byte",  # arithmetic intensity of the statement
)
BUFFER_FEATURES = (
    "is_read",
    "is_write",
    "is_local",
    "accesses",  # occurrences in the statement
    "bytes",  # accessed, with repeats
    "unique_bytes",
    "lines",  # cache lines fetched, with repeats
    "unique_lines",
    "stride",  # innermost loop, elements of the flattened buffer
    "stride_is_0",
    "stride_is_1",
    "vec_stride",  # along the innermost vectorized loop
    "vec_contiguous",  # flag: stride 1 along the vectorized loop
    "reuse_loop_carried",
    "reuse_serial",
    "reuse_none",
    "reuse_distance_iters",
    "reuse_distance_bytes",
    "reuse_count",
    "bytes_per_reuse",
    "lines_per_reuse",
)

FEATURE_NAMES: tuple[str, ...] = (
    *ARITHMETIC_FEATURES,
    *LOOP_FEATURES,
    *STATEMENT_FEATURES,
    *(f"buf{slot}_{name}" for slot in range(NUM_BUFFER_SLOTS) for name in BUFFER_FEATURES),
)
_COLUMN = {name: index for index, name in enumerate(FEATURE_NAMES)}


def extract_features(state: State) -> np.ndarray:
    """Rows of features, one per store statement of `state`'s loop program (see the
    module docstring); one all-zero row when the state does not lower."""
    try:
        func = lower(state)
    except Exception:  # a bad candidate must score lowest, not stop a search
        return _no_rows()
    return _rows(func)


def extract_features_batch(states: Sequence[State]) -> list[np.ndarray]:
    """`extract_features` of each state, in order."""
    return [extract_features(state) for state in states]


def extract_features_and_keys(
    states: Sequence[State],
) -> list[tuple[np.ndarray, str | None]]:
    """`extract_features` and `program_key` of each state, in order, from one lowering
    each: the search asks the program key of every state it takes, and lowering is most
    of both (ResNet-18's states: lowering 6.3 ms, rows 2.1 ms, key 0.5 ms)."""
    results: list[tuple[np.ndarray, str | None]] = []
    for state in states:
        try:
            func = lower(state)
        except Exception:  # as extract_features and program_key say of such a state
            results.append((_no_rows(), None))
            continue
        results.append((_rows(func), lowered_program_key(func)))
    return results


def _rows(func: PrimFunc) -> np.ndarray:
    try:
        rows = [_statement_row(store, context) for store, context in _statements(func.body)]
    except Exception:  # a bad candidate must score lowest, not stop a search
        rows = []
    return np.stack(rows) if rows else _no_rows()


def _no_rows() -> np.ndarray:
    """The features of a state that does not lower: one all-zero row."""
    return np.zeros((1, len(FEATURE_NAMES)), dtype=np.float32)


def _log(value: float) -> float:
    return math.log2(1.0 + max(value, 0.0))


# -- where statements sit -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    """What encloses a statement: loops outermost first, local allocations with the
    number of loops around each, and the number of guards (with the innermost loop
    depth at which one was seen)."""

    loops: tuple[Loop, ...] = ()
    allocations: tuple[tuple[Buffer, int], ...] = ()
    guards: int = 0
    guard_depth: int = -1


def _statements(stmt: Stmt, context: _Context | None = None) -> Iterator[tuple[Store, _Context]]:
    context = context or _Context()
    match stmt:
        case Store():
            yield stmt, context
        case For(var, extent, kind, body, unroll):
            count = int(extent.value) if isinstance(extent, Const) else 1
            loop = Loop(var, count, kind, unroll)
            yield from _statements(
                body,
                _Context(
                    (*context.loops, loop), context.allocations, context.guards, context.guard_depth
                ),
            )
        case Seq(stmts):
            for child in stmts:
                yield from _statements(child, context)
        case IfThenElse(_, then_body, else_body):
            inner = _Context(
                context.loops, context.allocations, context.guards + 1, len(context.loops)
            )
            yield from _statements(then_body, inner)
            if else_body is not None:
                yield from _statements(else_body, inner)
        case Allocate(buffer, body):
            allocations = (*context.allocations, (buffer, len(context.loops)))
            yield from _statements(
                body, _Context(context.loops, allocations, context.guards, context.guard_depth)
            )
        case LetStmt(body=body):
            yield from _statements(body, context)


# -- one statement ----------------------------------------------------------------------


@dataclass(slots=True)
class _Counts:
    """Operations of one execution of a statement, and its buffer accesses."""

    ops: dict[str, int] = field(default_factory=dict)
    loads: list[Load] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.ops[name] = self.ops.get(name, 0) + 1


def _statement_row(store: Store, context: _Context) -> np.ndarray:
    row = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    counts = _Counts()
    _count(store.value, counts)
    for index in store.indices:
        _count(index, counts)
    executions = math.prod(loop.extent for loop in context.loops)
    for name in ARITHMETIC_FEATURES:
        row[_COLUMN[name]] = _log(counts.ops.get(name, 0) * executions)
    _loop_features(row, store, context, executions)
    accesses = buffer_accesses(store, counts.loads, context.loops)
    _statement_features(row, store, context, counts, accesses, executions)
    ranked = sorted(accesses, key=lambda a: (-a.bytes, -a.unique_bytes, a.buffer.name))
    for slot, access in enumerate(ranked[:NUM_BUFFER_SLOTS]):
        _buffer_features(row, slot, access, accesses, context)
    return row


_FLOAT_BINARY = {
    BinaryOp.ADD: "float_add_sub",
    BinaryOp.SUB: "float_add_sub",
    BinaryOp.MUL: "float_mul",
    BinaryOp.DIV: "float_div",
    BinaryOp.MIN: "float_min_max",
    BinaryOp.MAX: "float_min_max",
}
_INT_BINARY = {
    BinaryOp.ADD: "int_add_sub",
    BinaryOp.SUB: "int_add_sub",
    BinaryOp.MUL: "int_mul",
    BinaryOp.DIV: "int_div_mod",
    BinaryOp.FLOOR_DIV: "int_div_mod",
    BinaryOp.FLOOR_MOD: "int_div_mod",
    BinaryOp.MIN: "int_compare",
    BinaryOp.MAX: "int_compare",
}


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _count(expr: Expr, counts: _Counts) -> str:
    """Count the operations of `expr` into `counts`; returns its dtype (computed
    bottom-up: `Expr.dtype` walks down the tree on every call)."""
    match expr:
        case Binary(op, a, b):
            left, right = _count(a, counts), _count(b, counts)
            del right
            if op.is_logical:
                counts.add("logical")
                return "bool"
            if op.is_comparison:
                counts.add("float_compare" if _is_float(left) else "int_compare")
                return "bool"
            if op is BinaryOp.MUL and _is_byte_value(a) and _is_byte_value(b):
                # Four of these to a 32-bit lane make one dot-product instruction
                # (vpdpbusd, sdot) where the schedule vectorizes the packed lanes.
                counts.add("byte_mul")
            elif not _is_float(left):
                counts.add(_INT_BINARY.get(op, "int_add_sub"))
            elif op in (BinaryOp.ADD, BinaryOp.SUB) and _is_float_mul(a, b):
                counts.add("float_fma")
                counts.ops["float_mul"] = counts.ops.get("float_mul", 0) - 1
            else:
                counts.add(_FLOAT_BINARY.get(op, "float_add_sub"))
            return left
        case Load(_, indices):
            counts.loads.append(expr)
            for index in indices:
                _count(index, counts)
            return expr.buffer.dtype
        case Select(condition, true_value, false_value):
            counts.add("select")
            _count(condition, counts)
            _count(false_value, counts)
            return _count(true_value, counts)
        case Call(_, args):
            counts.add("math_call")
            dtypes = [_count(arg, counts) for arg in args]
            return dtypes[0]
        case Cast(dtype, value):
            counts.add("cast")
            _count(value, counts)
            return dtype
        case Unary(op, a):
            dtype = _count(a, counts)
            if op is UnaryOp.NOT:
                counts.add("logical")
            return dtype
    return expr.dtype  # Var, Const, Ramp, Broadcast: leaves here


def _is_byte_value(expr: Expr) -> bool:
    """A load of 8-bit integers, widened (`int32(x[i])`)."""
    return (
        isinstance(expr, Cast)
        and isinstance(expr.value, Load)
        and expr.value.buffer.dtype in ("int8", "uint8")
    )


def _is_float_mul(a: Expr, b: Expr) -> bool:
    return any(isinstance(x, Binary) and x.op is BinaryOp.MUL for x in (a, b))


def _loop_features(row: np.ndarray, store: Store, context: _Context, executions: int) -> None:
    loops = context.loops
    depth = len(loops)
    stored_vars = set().union(*(free_vars(i) for i in store.indices)) if store.indices else set()
    reduce = [loop for loop in loops if loop.var not in stored_vars]
    values = {
        "num_loops": _log(depth),
        "outer_prod": _log(executions),
        "innermost_extent": _log(loops[-1].extent) if loops else 0.0,
        "reduce_loops": _log(len(reduce)),
        "reduce_prod": _log(math.prod(loop.extent for loop in reduce)) if reduce else 0.0,
        "innermost_is_reduce": float(bool(loops) and loops[-1].var not in stored_vars),
        "num_guards": _log(context.guards),
        "guard_in_innermost": float(context.guards > 0 and context.guard_depth == depth),
    }
    for prefix, kind in (
        ("vec", ForKind.VECTORIZED),
        ("unroll", ForKind.UNROLLED),
        ("par", ForKind.PARALLEL),
    ):
        values.update(_annotation_features(prefix, kind, loops))
    budget = max((loop.unroll_max_step for loop in loops), default=0)
    values["auto_unroll_max_step"] = _log(budget)
    values["auto_unroll_iters"] = _log(_auto_unrolled(loops, budget))
    par_prod = math.prod(loop.extent for loop in loops if loop.kind is ForKind.PARALLEL)
    values["work_per_thread"] = _log(executions / max(par_prod, 1))
    for name, value in values.items():
        row[_COLUMN[name]] = value


def _annotation_features(prefix: str, kind: ForKind, loops: Sequence[Loop]) -> dict[str, float]:
    positions = [k for k, loop in enumerate(loops) if loop.kind is kind]
    if not positions:
        return {}
    extents = [loops[k].extent for k in positions]
    inner = positions[-1]
    values = {
        f"{prefix}_num": _log(len(positions)),
        f"{prefix}_prod": _log(math.prod(extents)),
    }
    if prefix == "par":
        values["par_len"] = _log(extents[0])
        values["par_depth"] = float(positions[0])
        return values
    values[f"{prefix}_len"] = _log(extents[-1])
    values[f"{prefix}_inner_distance"] = float(len(loops) - 1 - inner)
    if prefix == "vec":
        lanes = extents[-1]
        values["vec_is_innermost"] = float(inner == len(loops) - 1)
        values["vec_legal"] = float(2 <= lanes <= 64 and lanes & (lanes - 1) == 0)
    else:
        values["unroll_written_out"] = float(extents[-1] <= 64)
    return values


def _auto_unrolled(loops: Sequence[Loop], budget: int) -> int:
    """Iterations of the innermost serial/unrolled loops whose total fits the
    auto-unroll budget (what the renderer's pragma unrolls); vector lanes count once."""
    steps = 1
    for loop in reversed(loops):
        if loop.kind is ForKind.PARALLEL:
            break
        extent = 1 if loop.kind is ForKind.VECTORIZED else loop.extent
        if steps * extent > budget:
            break
        steps *= extent
    return steps if budget and steps > 1 else 0


def _statement_features(
    row: np.ndarray,
    store: Store,
    context: _Context,
    counts: _Counts,
    accesses: Sequence[BufferAccess],
    executions: int,
) -> None:
    buffer = store.buffer
    local = [(b, depth) for b, depth in context.allocations if b.scope == "local"]
    own = next((depth for b, depth in context.allocations if b is buffer), None)
    float_ops = sum(
        counts.ops.get(name, 0) * (2 if name == "float_fma" else 1)
        for name in ARITHMETIC_FEATURES[:8]
    )
    unique = sum(a.unique_bytes for a in accesses)
    values = {
        "is_init": float(isinstance(store.value, Const)),
        "is_update": float(any(ld.buffer is buffer for ld in counts.loads)),
        "stores_local": float(buffer.scope == "local"),
        "local_alloc_count": _log(len(local)),
        "local_alloc_bytes": _log(sum(item_bytes(b) * b.size for b, _ in local)),
        "store_alloc_bytes": _log(item_bytes(buffer) * buffer.size),
        "alloc_outer_prod": 0.0
        if own is None
        else _log(math.prod(loop.extent for loop in context.loops[:own])),
        "float_ops_per_unique_byte": _log(float_ops * executions / max(unique, 1)),
    }
    for name, value in values.items():
        row[_COLUMN[name]] = value


# -- buffers ---------------------------------------------------------------------------


def _buffer_features(
    row: np.ndarray,
    slot: int,
    access: BufferAccess,
    accesses: Sequence[BufferAccess],
    context: _Context,
) -> None:
    loops = context.loops
    inner = len(loops) - 1
    stride = abs(access.flat_stride(inner)) if loops else 0
    vector = [k for k, loop in enumerate(loops) if loop.kind is ForKind.VECTORIZED]
    vec_stride = abs(access.flat_stride(vector[-1])) if vector else 0
    lines = access.lines()
    values = {
        "is_read": float(access.is_read),
        "is_write": float(access.is_write),
        "is_local": float(access.buffer.scope == "local"),
        "accesses": _log(access.accesses),
        "bytes": _log(access.bytes),
        "unique_bytes": _log(access.unique_bytes),
        "lines": _log(lines),
        "unique_lines": _log(access.unique_lines(0)),
        "stride": _log(stride),
        "stride_is_0": float(bool(loops) and stride == 0),
        "stride_is_1": float(stride == 1),
        "vec_stride": _log(vec_stride),
        "vec_contiguous": float(bool(vector) and vec_stride == 1),
    }
    values.update(_reuse_features(access, accesses, loops, lines))
    prefix = f"buf{slot}_"
    for name, value in values.items():
        row[_COLUMN[prefix + name]] = value


def _reuse_features(
    access: BufferAccess, accesses: Sequence[BufferAccess], loops: Sequence[Loop], lines: float
) -> dict[str, float]:
    """Reuse type, distance and count (see the module docstring)."""
    carrier = next((k for k in range(len(loops) - 1, -1, -1) if not access.moves_with(k)), None)
    if carrier is not None:
        kind = "reuse_loop_carried"
        iterations = math.prod(loop.extent for loop in loops[carrier + 1 :])
        distance = sum(a.unique_elements(carrier + 1) * a.item_bytes for a in accesses)
        count = loops[carrier].extent
    elif access.accesses > 1:
        kind, iterations, distance = "reuse_serial", 1, access.item_bytes
        count = access.accesses
    else:
        kind, iterations, distance, count = "reuse_none", 0, 0, 1
    return {
        kind: 1.0,
        "reuse_distance_iters": _log(iterations),
        "reuse_distance_bytes": _log(distance),
        "reuse_count": _log(count),
        "bytes_per_reuse": _log(access.bytes / count),
        "lines_per_reuse": _log(lines / count),
    }
