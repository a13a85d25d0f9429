"""C code generation: a PrimFunc (after the C backend's passes: unroll, simplify,
vectorize, promote_registers) as a C11 translation unit.

The kernel `void name(const float* restrict a, ..., float* restrict out)` takes its
buffers in argument order, inputs as pointers to const (outputs are the buffers the
body stores into, see `output_args`); indices are flattened row-major. Next to it,
`int32_t name_packed(void* const* args, int32_t num_args)` calls it from an array of
pointers, one C signature for every kernel, so ctypes and the AOT runtime need no
per-kernel glue; it returns -1 when `num_args` is wrong, else 0.

- PARALLEL loops get `#pragma omp parallel for` (the loop variable, declared in the
  loop, is private; what the body declares is private too).
- UNROLLED loops with a constant extent are written out, one block per iteration;
  `unroll_max_step` puts `#pragma GCC unroll N` on the small serial loops inside.
- Vectors use GCC/Clang vector extensions (`typedef float float32x16
  __attribute__((vector_size(64)))`), so performance does not rest on the
  auto-vectoriser. Contiguous loads and stores go through memcpy (any alignment, no
  aliasing trouble; compilers emit one vector move), others through lane loops
  (gathers, math calls). A vector of bools is a mask `int32xN` with lanes -1 or 0,
  what vector comparisons of 32-bit values produce; bool buffers hold 0/1 bytes, as
  NumPy's do, and bool scalars are `_Bool`.
- Operators C lacks (floor division/modulo, min/max, sigmoid) are small inline
  helpers; min/max return the first operand unless the second compares greater/less,
  so NaN handling matches the loop interpreter. `round` is `nearbyint` in the default
  rounding mode: half to even.
- A serial loop of 64 or more iterations with no loop inside prefetches, on x86-64,
  each input vector it loads a cache line or more further every iteration, 1 KiB
  ahead (`CRenderer._prefetch`): the packed weights a register tile's reduction loop
  streams, which is what it is for, and also an elementwise loop's 64-byte vectors
  (AVX-512), which the hardware prefetchers follow anyway (one instruction per vector;
  the networks' measured gains include it). With 32-byte vectors (AVX2) a loop that
  steps one vector per iteration prefetches nothing (not measured there).
- Local Allocates accessed only whole (after `promote_registers`: a register tile's
  accumulators, one vector each) are variables; other local Allocates, and global
  ones inside a loop (a buffer computed at a tile: a heap allocation per iteration
  would cost more than the tile), are aligned stack arrays up to
  `STACK_LIMIT_BYTES`; larger ones and global ones outside loops go to the heap
  (aligned_alloc/free), so OpenMP threads' small stacks do not overflow.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ember.codegen.c_helpers import (
    VECTOR_MATH,
    dot4_helper,
    float_floor_division,
    integer_division,
    vector_math_helpers,
)
from ember.codegen.renderer import (
    ADDITIVE,
    BIT_AND,
    BIT_OR,
    HELPER_OPS,
    INFIX,
    PRIMARY,
    UNARY,
    Names,
    Renderer,
    needs_checked_division,
    output_args,
)
from ember.device import dtype_bits
from ember.errors import CodegenError
from ember.graph.ops.quantized import DOT_GROUP
from ember.loop.analysis import linear_coefficients
from ember.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    Load,
    PrimFunc,
    Ramp,
    Store,
    split_dtype,
    stmt_exprs,
    vector_dtype,
    walk_stmts,
)
from ember.loop.registers import register_buffers
from ember.loop.simplify import simplify_expr
from ember.loop.vectorize import flatten_index, lane_of, lanes_of
from ember.runtime.abi import ALIGNMENT
from ember.te.expr import Binary, BinaryOp, Call, Cast, Const, Expr, Select, Unary, UnaryOp, Var
from ember.te.visit import float_rounding, walk

STACK_LIMIT_BYTES = 256 * 1024

# Software prefetch of a micro-kernel's streamed operand (`CRenderer._prefetch`): this
# many bytes ahead along the stream, in loops of at least PREFETCH_MIN_EXTENT
# iterations with no loop inside (the reduction loop of a register tile, its rows and
# vectors unrolled; an elementwise loop of 64-byte vectors qualifies too, see the
# module docstring). On x86-64 only, where it was measured: the hardware prefetchers
# left ViT-B/16's dense products (8 rows x 3 vectors, a packed weight panel streamed
# from L2 one line per vector per k) waiting on L2; prefetched 1 KiB ahead they ran
# 3-10% faster alone on a 2-core Xeon (Sapphire Rapids class), weights warm or evicted,
# and whole untuned networks there in 0.94x (ViT-B/16, ResNet-18), 0.95x (ResNet-50),
# 0.97x (EfficientNet-B0) and 0.99x (MobileNetV2) of their time without (clang 19;
# GCC 12: ResNet-50 0.94x, ViT-B/16 0.95x). BENCHMARKS.md, sixteenth session.
CACHE_LINE_BYTES = 64
PREFETCH_AHEAD_BYTES = 1024
PREFETCH_MIN_EXTENT = 64
PREFETCH_HELPER = """static inline void ember_prefetch(const void* base, int64_t offset) {
#if defined(__x86_64__)
  /* integer arithmetic: the address may lie outside the buffer, which a prefetch allows */
  __builtin_prefetch((const void*)((uintptr_t)base + (uintptr_t)offset), 0, 3);
#else
  (void)base;
  (void)offset;
#endif
}"""

C_TYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "bool": "_Bool",
}

# Math functions by Call name; float32 takes the `f` suffix. sigmoid is a helper.
C_MATH = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "tanh": "tanh",
    "erf": "erf",
    "abs": "fabs",
    "floor": "floor",
    "ceil": "ceil",
    "round": "nearbyint",
    "sin": "sin",
    "cos": "cos",
    "log1p": "log1p",
    "expm1": "expm1",
    "pow": "pow",
    "fmod": "fmod",
}

_PREAMBLE = """\
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
"""


# Kernels that round float values to integers (a quantized model's requantization) are
# compiled without fused multiply-adds: an FMA rounds once where the interpreter
# rounds twice, and a value on the edge of a rounding step can then land on the other
# side (one quantization step apart, where the float output of any other kernel would
# differ in its last bit). Without them such kernels equal the interpreter exactly
# (`rounds_floats`).
_NO_CONTRACTION = """\
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
"""


def rounds_floats(func: PrimFunc) -> bool:
    """Whether `func` rounds float arithmetic to integer values (a rounding call, or a
    cast of a float to an integer type) and could match the interpreter exactly: not
    when it also computes a transcendental function (exp, tanh, ...), whose vector
    forms differ from NumPy's in the last bit anyway; those keep their FMAs."""
    rounds, inexact = float_rounding(stmt_exprs(func.body))
    return rounds and not inexact


def render_c(func: PrimFunc) -> str:
    """C source of `func`, which the C backend's passes have prepared (no VECTORIZED
    loop left: `ember.backend.c.CBackend.passes`); rendering only renders."""
    return _kernel_source(func.name, _recent_parts(func))


def render_c_unit(funcs: Sequence[PrimFunc]) -> str | None:
    """Prepared functions (distinct names) as one translation unit: one preamble, the
    vector types and helpers they use once each, then each kernel and its packed
    wrapper as `render_c` writes them, so each compiles to the same code as alone.
    None when they cannot share one: some round floats and others do not (the
    pragma that turns off contraction holds for the rest of the unit), or two define
    a helper of one name differently."""
    parts = [_recent_parts(func) for func in funcs]
    if len({part.no_contraction for part in parts}) > 1:
        return None
    typedefs: dict[str, str] = {}
    helpers: dict[str, str] = {}
    for part in parts:
        for table, mine in ((typedefs, part.typedefs), (helpers, part.helpers)):
            for name, definition in mine.items():
                if table.setdefault(name, definition) != definition:
                    return None
    names = ", ".join(f"'{func.name}'" for func in funcs)
    lines = [
        f"// Kernels {names}, generated by Ember from loop IR.",
        _PREAMBLE,
        *([_NO_CONTRACTION] if parts and parts[0].no_contraction else []),
        *typedefs.values(),
        *(f"{definition}\n" for definition in helpers.values()),
    ]
    for func, part in zip(funcs, parts, strict=True):
        lines += [f"// Kernel '{func.name}': {part.comment}", *part.function, ""]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class _Parts:
    """A rendered kernel before it is put into a translation unit."""

    comment: str  # "inputs: ...; outputs: ..."
    no_contraction: bool  # it needs `_NO_CONTRACTION` before it
    typedefs: dict[str, str]  # vector types it uses, by name
    helpers: dict[str, str]  # helper definitions, by name, in dependency order
    function: list[str]  # the kernel and its packed wrapper


def _kernel_source(name: str, parts: _Parts) -> str:
    """One kernel's translation unit."""
    lines = [
        f"// Kernel '{name}', generated by Ember from loop IR.",
        f"// {parts.comment}",
        _PREAMBLE,
        *([_NO_CONTRACTION] if parts.no_contraction else []),
        *parts.typedefs.values(),
        *(f"{definition}\n" for definition in parts.helpers.values()),
        *parts.function,
    ]
    return "\n".join(lines) + "\n"


# The parts of the last few functions rendered, by identity (the IR is immutable;
# each entry holds its function, so that its id is not reused while it is here).
# The tuning builder renders each candidate alone (its code's digest finds repeats),
# then the batch as one unit: without this, a candidate was rendered twice, ~8 ms of
# its ~40 ms of Python. Rendered parts are only read, never changed.
_RECENT_PARTS: OrderedDict[int, tuple[PrimFunc, _Parts]] = OrderedDict()
# Four times the tuning builder's batch (`ember.autoschedule.builder.MAX_BATCH`, 4): a
# batch larger than this would push out each kernel's parts before the unit needs them.
_RECENT_LIMIT = 16
_RECENT_LOCK = threading.Lock()


def _recent_parts(func: PrimFunc) -> _Parts:
    with _RECENT_LOCK:
        entry = _RECENT_PARTS.get(id(func))
        if entry is not None and entry[0] is func:
            _RECENT_PARTS.move_to_end(id(func))
            return entry[1]
    parts = CRenderer(func).parts()
    with _RECENT_LOCK:
        _RECENT_PARTS[id(func)] = (func, parts)
        while len(_RECENT_PARTS) > _RECENT_LIMIT:
            _RECENT_PARTS.popitem(last=False)
    return parts


def entry_symbols(name: str) -> tuple[str, str]:
    """The exported names of kernel `name`'s function and of its packed wrapper."""
    names = Names()
    kernel = names.reserve(name)
    return kernel, names.reserve(f"{kernel}_packed")


def lane_bits(dtype: str) -> int:
    """The width of one lane of a vector of `dtype`: bool vectors are int32 masks."""
    return 32 if split_dtype(dtype)[0] == "bool" else dtype_bits(dtype)


# Ordered operators on masks, as the operator on swapped operands that orders the
# bools they stand for (min(x, y) of bools is max(y, x) of their masks).
_MASK_ORDER = {
    BinaryOp.LT: BinaryOp.LT,
    BinaryOp.LE: BinaryOp.LE,
    BinaryOp.GT: BinaryOp.GT,
    BinaryOp.GE: BinaryOp.GE,
    BinaryOp.MIN: BinaryOp.MAX,
    BinaryOp.MAX: BinaryOp.MIN,
}


class CRenderer(Renderer):
    """Renders C with OpenMP and GCC/Clang vector extensions."""

    def __init__(self, func: PrimFunc) -> None:
        super().__init__(func)
        self.typedefs: dict[str, str] = {}
        # Local buffers declared as one variable each (see `is_register`), by identity.
        self.registers: set[Buffer] = set()
        self._register_ids = {id(buffer) for buffer in register_buffers(func.body)}
        # The buffers the body stores into (`output_args`); the others are inputs.
        self.outputs = output_args(func)
        self._input_ids = {id(buffer) for buffer in func.args if buffer not in self.outputs}
        # The innermost loop being rendered that prefetches its streamed loads, and
        # the addresses it prefetches so far (`_prefetch`).
        self._prefetching: tuple[Var, set[str]] | None = None

    # -- the translation unit --------------------------------------------------------

    def render(self) -> str:
        return _kernel_source(self.func.name, self.parts())

    def parts(self) -> _Parts:
        func = self.func
        name, packed = entry_symbols(func.name)
        self.names.reserve(name)
        self.names.reserve(packed)
        outputs = self.outputs
        params = [self.param(buffer, buffer in outputs) for buffer in func.args]
        body = self.body_lines()
        inputs = ", ".join(b.name for b in func.args if b not in outputs) or "-"
        output_names = ", ".join(b.name for b in outputs) or "-"
        function = [
            f"void {name}({', '.join(params) or 'void'}) {{",
            *body,
            "}",
            "",
            *self.packed_wrapper(name, packed, outputs),
        ]
        return _Parts(
            f"inputs: {inputs}; outputs: {output_names}",
            rounds_floats(func),
            self.typedefs,
            self.helpers,
            function,
        )

    def param(self, buffer: Buffer, is_output: bool) -> str:
        const = "" if is_output else "const "
        return f"{const}{self.scalar_type(buffer.dtype)}* restrict {self.names.of(buffer)}"

    def packed_wrapper(self, name: str, packed: str, outputs: tuple[Buffer, ...]) -> list[str]:
        casts = [
            f"({'' if b in outputs else 'const '}{self.scalar_type(b.dtype)}*)args[{i}]"
            for i, b in enumerate(self.func.args)
        ]
        return [
            f"int32_t {packed}(void* const* args, int32_t num_args) {{",
            f"  if (num_args != {len(self.func.args)}) return -1;",
            f"  {name}({', '.join(casts)});",
            "  return 0;",
            "}",
        ]

    # -- types -------------------------------------------------------------------------

    def scalar_type(self, dtype: str) -> str:
        base, lanes = split_dtype(dtype)
        if lanes > 1:
            return self.vector_type(dtype)
        c_type = C_TYPES.get(base)
        if c_type is None:
            raise CodegenError(
                f"dtype {dtype} is not supported by the C code generator; supported: "
                f"{', '.join(C_TYPES)} (cast float16/bfloat16 models to float32)"
            )
        return c_type

    def vector_type(self, dtype: str) -> str:
        """The C vector type of `dtype`, declared on first use; boolxN is a mask."""
        base, lanes = split_dtype(dtype)
        if base == "bool":
            base = "int32"
        name = f"{base}x{lanes}"
        if name not in self.typedefs:
            size = dtype_bits(base) // 8 * lanes
            self.typedefs[name] = (
                f"typedef {self.scalar_type(base)} {name} __attribute__((vector_size({size})));"
            )
        return name

    # -- statements ------------------------------------------------------------------

    def loop_pragma(self, loop: For) -> str | None:
        if loop.kind is ForKind.PARALLEL:
            return "#pragma omp parallel for"
        return super().loop_pragma(loop)

    def for_loop(self, loop: For) -> None:
        if not _prefetches(loop):
            super().for_loop(loop)
            return
        saved, self._prefetching = self._prefetching, (loop.var, set())
        try:
            super().for_loop(loop)
        finally:
            self._prefetching = saved

    def _prefetch(self, buffer: Buffer, base: Expr, base_text: str) -> None:
        """Before the statement that loads a vector at `base`: prefetch the vector
        PREFETCH_AHEAD_BYTES along its stream, when the load is of a kernel input and
        steps a cache line or more per iteration of the loop being rendered (a
        packed weight panel read once per k, the micro-kernel's streamed operand)."""
        if self._prefetching is None or id(buffer) not in self._input_ids:
            return
        var, done = self._prefetching
        affine = linear_coefficients(base, var)
        name = self.names.of(buffer)
        key = f"{name}[{base_text}]"
        if affine is None or key in done:
            return
        element_bytes = dtype_bits(buffer.dtype) // 8
        step_bytes = affine[0] * element_bytes
        if step_bytes < CACHE_LINE_BYTES:
            return
        done.add(key)
        ahead = max(step_bytes, PREFETCH_AHEAD_BYTES // step_bytes * step_bytes)
        helper = self.helper("ember_prefetch", PREFETCH_HELPER)
        # The buffer and a byte offset, not `&buffer[index]`: a load a guard keeps
        # from running (padding's `cond ? load : 0`) may have an index outside the
        # buffer, and the prefetch before its statement must not form that pointer.
        offset = f"({base_text}) * {element_bytes} + {ahead}"
        self.emit(f"{helper}({name}, {offset});")

    def allocate(self, allocate: Allocate) -> None:
        buffer = allocate.buffer
        name, c_type = self.names.of(buffer), self.scalar_type(buffer.dtype)
        size = max(buffer.size, 1)
        nbytes = size * dtype_bits(buffer.dtype) // 8
        in_loop = self.loop_depth > 0  # allocated per iteration: never the heap
        on_stack = nbytes <= STACK_LIMIT_BYTES and (buffer.scope == "local" or in_loop)
        if not self.declare(name):
            with self.block(""):
                self.allocate(allocate)
            return
        if id(buffer) in self._register_ids:
            # One value accessed whole: a variable the compiler keeps in a register.
            self.registers.add(buffer)
            self.emit(f"{self.scalar_type(vector_dtype(buffer.dtype, size))} {name};")
            self.stmt(allocate.body)
            return
        if on_stack:
            self.emit(self.stack_array(c_type, name, size))
            self.stmt(allocate.body)
            return
        # aligned_alloc wants a multiple of the alignment.
        size_bytes = (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        self.emit(
            f"{c_type}* restrict {name} = ({c_type}*)aligned_alloc({ALIGNMENT}, {size_bytes});"
        )
        self.stmt(allocate.body)
        self.emit(f"free({name});")

    def stack_array(self, c_type: str, name: str, size: int) -> str:
        """The declaration of an aligned array on the stack."""
        return f"{c_type} {name}[{size}] __attribute__((aligned({ALIGNMENT})));"

    def rendered(self, expr: Expr) -> tuple[str, int]:
        if isinstance(expr, Load) and expr.buffer in self.registers:
            return self.names.of(expr.buffer), PRIMARY
        return super().rendered(expr)

    def store(self, store: Store) -> None:
        if store.buffer in self.registers:
            size = store.buffer.size
            value = store.value if lanes_of(store.value) == size else Broadcast(store.value, size)
            self.emit(f"{self.names.of(store.buffer)} = {self.expr(value)};")
            return
        value_lanes = lanes_of(store.value)
        index_lanes = max((lanes_of(i) for i in store.indices), default=1)
        if value_lanes == 1 and index_lanes == 1:
            super().store(store)
            return
        lanes = max(value_lanes, index_lanes)
        value = store.value if value_lanes == lanes else Broadcast(store.value, lanes)
        buffer, flat = store.buffer, flatten_index(store.buffer, store.indices)
        vtype = self.vector_type(f"{buffer.dtype}x{lanes}")
        name, text = self.names.of(buffer), self.expr(value)
        if store.predicate is not None:
            self._predicated_store(store, flat, vtype, text)
            return
        match flat:
            case Ramp(base, 1, _):
                helper = self.memory_helper("store", buffer.dtype, lanes, vtype)
                self.emit(f"{helper}(&{name}[{self.expr(base)}], {text});")
            case Ramp(base, stride, _):
                helper = self.memory_helper("store_strided", buffer.dtype, lanes, vtype)
                self.emit(f"{helper}(&{name}[{self.expr(base)}], {stride}, {text});")
            case _:
                helper = self.memory_helper("scatter", buffer.dtype, lanes, vtype, flat.dtype)
                index = self.expr(flat if lanes_of(flat) > 1 else Broadcast(flat, lanes))
                self.emit(f"{helper}({name}, {index}, {text});")

    def _predicated_store(self, store: Store, flat: Expr, vtype: str, text: str) -> None:
        """A whole vector store when the predicate's first and last lanes hold (then
        all do: `Store`), else the lanes that hold one by one (a row's tail)."""
        assert store.predicate is not None and isinstance(flat, Ramp) and flat.stride == 1
        lanes, name = flat.lanes, self.names.of(store.buffer)
        value_name = self.names.reserve("tail")
        base = self.expr(flat.base)
        tests = [simplify_expr(lane_of(store.predicate, n)) for n in range(lanes)]
        whole = [self.expr(t) for t in (tests[0], tests[-1]) if not _always(t)]
        helper = self.memory_helper("store", store.buffer.dtype, lanes, vtype)
        with self.block(""):
            self.emit(f"const {vtype} {value_name} = {text};")
            with self.block(f"if ({' && '.join(f'({t})' for t in whole) or '1'})"):
                self.emit(f"{helper}(&{name}[{base}], {value_name});")
            with self.block("else"):
                for n, test in enumerate(tests):
                    store_lane = f"{name}[{base} + {n}] = {value_name}[{n}];"
                    self.emit(
                        store_lane if _always(test) else f"if ({self.expr(test)}) {store_lane}"
                    )

    # -- scalar expressions ------------------------------------------------------------

    def call(self, name: str, args: tuple[Expr, ...], dtype: str) -> str:
        texts = ", ".join(self.expr(a) for a in args)
        return f"{self.math_function(name, dtype)}({texts})"

    def math_function(self, name: str, dtype: str) -> str:
        if dtype not in ("float32", "float64"):
            raise CodegenError(f"math function {name} on {dtype}: cast to float32 first")
        if name == "sigmoid":
            t, exp = self.scalar_type(dtype), self.math_function("exp", dtype)
            return self.helper(
                f"ember_sigmoid_{dtype}",
                f"static inline {t} ember_sigmoid_{dtype}({t} x) {{\n"
                f"  return ({t})1 / (({t})1 + {exp}(-x));\n}}",
            )
        return C_MATH[name] + ("f" if dtype == "float32" else "")

    def scalar_helper(self, op: str, dtype: str) -> str:
        t, name = self.scalar_type(dtype), f"ember_{op}_{dtype}"
        if name in self.helpers:
            return name
        if op in ("min", "max"):
            body = f"  return b {'<' if op == 'min' else '>'} a ? b : a;"
        elif dtype.startswith("float"):
            body = float_floor_division(op, t, "f" if dtype == "float32" else "")
        else:
            body = integer_division(op, t, signed=not dtype.startswith("uint"))
        return self.helper(name, f"static inline {t} {name}({t} a, {t} b) {{\n{body}\n}}")

    # -- vector expressions ------------------------------------------------------------

    def vector_expr(self, expr: Expr) -> tuple[str, int]:
        lanes = lanes_of(expr)
        match expr:
            case Ramp(base, stride, _):
                vtype = self.vector_type(expr.dtype)
                t = self.scalar_type(base.dtype)
                name = f"ember_ramp_{vtype}"
                offsets = ", ".join(map(str, range(lanes)))
                body = f"  return base + stride * ({vtype}){{{offsets}}};"
                signature = f"static inline {vtype} {name}({t} base, {t} stride)"
                helper = self.helper(name, f"{signature} {{\n{body}\n}}")
                return f"{helper}({self.expr(base)}, {stride})", PRIMARY
            case Broadcast(value, _):
                # Only a bool needs its operand parenthesised (it becomes -(int32_t)x).
                text = self.wrapped(value, UNARY) if value.dtype == "bool" else self.expr(value)
                return self.broadcast(text, value.dtype, lanes), PRIMARY
            case Binary():
                return self.vector_binary(expr)
            case Unary(UnaryOp.NEG, a):
                return self.unary("-", a), UNARY
            case Unary(UnaryOp.NOT, a):
                return self.unary("~", a), UNARY
            case Select(condition, true_value, false_value):
                if lanes_of(condition) == 1:
                    guarded = self.guarded_load(condition, true_value, false_value)
                    return (guarded, PRIMARY) if guarded else self.scalar_expr(expr)
                width = lane_bits(true_value.dtype)
                helper = self.select_helper(true_value.dtype)
                mask = self.mask_to_width(condition, width)
                return (
                    f"{helper}({mask}, {self.expr(true_value)}, {self.expr(false_value)})",
                    PRIMARY,
                )
            case Cast(dtype, value):
                return self.vector_cast(dtype, value)
            case Call(name, args) if name in VECTOR_MATH and expr.dtype.startswith("float32x"):
                vtype = self.vector_type(expr.dtype)
                itype = self.vector_type(f"int32x{lanes}")
                helpers = vector_math_helpers(name, vtype, itype)
                for helper_name, definition in helpers:
                    self.helper(helper_name, definition)
                return f"{helpers[-1][0]}({self.expr(args[0])})", PRIMARY
            case Call(name, args):
                vtype = self.vector_type(expr.dtype)
                scalar = self.math_function(name, split_dtype(expr.dtype)[0])
                lane = f"{scalar}({', '.join(f'a{i}[l]' for i in range(len(args)))})"
                helper = self.lanewise(
                    f"ember_{name}_{vtype}", vtype, [vtype] * len(args), lanes, lane
                )
                return f"{helper}({', '.join(self.expr(a) for a in args)})", PRIMARY
            case Load(buffer, indices, None):
                return self.vector_load(buffer, indices, lanes), PRIMARY
            case Load():
                return self.masked_load(expr, lanes), PRIMARY
        raise CodegenError(f"cannot render vector expression {type(expr).__name__}: {expr}")

    def dot_product(self, expr: Binary) -> str | None:
        """A sum holding the four products of a quantized conv's reduction step
        (`ember.topi.quantized`), `int32(a[i + j]) * int32(w[ramp(k + j, 4, lanes)])` for
        j = 0..3 with `a` uint8 (the same in every lane) and `w` int8, as one call of
        `ember_dot4_u8i8_<vector>(rest of the sum, &a[i], &w[k])`: one `vpdpbusd` where
        the compiler targets AVX-512 VNNI (16 lanes) or AVX-VNNI (8), `sdot` where it
        targets ARM's dot product (4), a loop of the same products otherwise. None when
        the sum holds no such group."""
        lanes = lanes_of(expr)
        terms = list(_additive_terms(expr))
        found = _dot_group(terms, lanes)
        if found is None:
            return None
        group, data, weight = found
        rest = [term for index, term in enumerate(terms) if index not in group]
        vtype = self.vector_type(f"int32x{lanes}")
        accumulator = " + ".join(self.wrapped(term, ADDITIVE + 1) for term in rest)
        if not rest:
            accumulator = f"({vtype}){{0}}"
        name = self.helper(f"ember_dot4_u8i8_{vtype}", dot4_helper(vtype, lanes))
        return (
            f"{name}({accumulator}, &{self.names.of(data.buffer)}[{self.expr(data.base)}], "
            f"&{self.names.of(weight.buffer)}[{self.expr(weight.base)}])"
        )

    def broadcast(self, text: str, dtype: str, lanes: int) -> str:
        """`text`, a scalar of `dtype`, in every lane (for a bool, `text` must bind at
        unary precedence)."""
        if dtype == "bool":  # a mask: -1 for true
            vtype = self.vector_type(f"int32x{lanes}")
            text = f"-(int32_t){text}"
        else:
            vtype = self.vector_type(f"{dtype}x{lanes}")
        t = self.scalar_type(split_dtype(vtype)[0])
        # A literal of copies compiles to one broadcast instruction (a lane loop
        # does not, with GCC 12).
        name = f"ember_broadcast_{vtype}"
        body = f"  return ({vtype}){{{', '.join(['x'] * lanes)}}};"
        helper = self.helper(name, f"static inline {vtype} {name}({t} x) {{\n{body}\n}}")
        return f"{helper}({text})"

    def vector_binary(self, expr: Binary) -> tuple[str, int]:
        op, a, b = expr.op, expr.a, expr.b
        lanes, operand = lanes_of(expr), a.dtype
        if op is BinaryOp.ADD and operand == f"int32x{lanes}":
            dot = self.dot_product(expr)
            if dot is not None:
                return dot, PRIMARY
        if split_dtype(operand)[0] == "bool" and op in _MASK_ORDER:
            # A mask holds -1 for true, so its order is the bools' order reversed.
            op, a, b = _MASK_ORDER[op], b, a
        if op is BinaryOp.AND or op is BinaryOp.OR:
            # Masks combine bitwise; operands always in parentheses, for the reader.
            symbol, precedence = ("&", BIT_AND) if op is BinaryOp.AND else ("|", BIT_OR)
            return f"{self.wrapped(a, UNARY)} {symbol} {self.wrapped(b, UNARY)}", precedence
        if op in HELPER_OPS:
            vtype = self.vector_type(operand)
            if op in (BinaryOp.MIN, BinaryOp.MAX):
                select = self.select_helper(operand)
                compare = "<" if op is BinaryOp.MIN else ">"
                body = f"  return {select}(b {compare} a, b, a);"
                name = f"ember_{HELPER_OPS[op]}_{vtype}"
                self.helper(
                    name, f"static inline {vtype} {name}({vtype} a, {vtype} b) {{\n{body}\n}}"
                )
            else:
                scalar = self.scalar_helper(HELPER_OPS[op], split_dtype(operand)[0])
                name = self.lanewise(
                    f"ember_{HELPER_OPS[op]}_{vtype}",
                    vtype,
                    [vtype, vtype],
                    lanes,
                    f"{scalar}(a0[l], a1[l])",
                )
            return f"{name}({self.expr(a)}, {self.expr(b)})", PRIMARY
        if op is BinaryOp.DIV and needs_checked_division(operand, b):
            vtype = self.vector_type(operand)
            scalar = self.scalar_helper("div", split_dtype(operand)[0])
            name = self.lanewise(
                f"ember_div_{vtype}", vtype, [vtype, vtype], lanes, f"{scalar}(a0[l], a1[l])"
            )
            return f"{name}({self.expr(a)}, {self.expr(b)})", PRIMARY
        symbol, precedence = INFIX[op]
        text = f"{self.wrapped(a, precedence)} {symbol} {self.wrapped(b, precedence + 1)}"
        if op.is_comparison and dtype_bits(operand) != 32 and split_dtype(operand)[0] != "bool":
            mask = self.vector_type(f"int32x{lanes}")
            return f"__builtin_convertvector({text}, {mask})", PRIMARY
        return text, precedence

    def guarded_load(self, condition: Expr, true_value: Expr, false_value: Expr) -> str | None:
        """`condition ? load : other` as one helper, or None. Only for a contiguous
        vector load, of a buffer at least a vector long, against an `other` that cannot
        fault; this is what an inlined padding looks like in a depthwise conv or a
        pool. How the helper does it depends on the architecture it is compiled for:
        - on x86-64, C's lazy ?: (the load made only where the condition holds), which
          GCC and clang turn into what suits them there. The branch-free form below
          ran MobileNetV2's first depthwise conv 13% slower with GCC 12 and 2x slower
          with clang 19 (which kept the pointer choice as a `cmov` and the select as
          vector ANDs); MobileNetV2 built by clang 19 ran 1.11x GCC's time with it
          (BENCHMARKS.md, issue 19, fourteenth session);
        - on every other architecture (AArch64, 32-bit ARM, i386), without a branch:
          the load reads a safe address (the start of its buffer) when the condition
          is false, and its lanes are then replaced by `other`. With a branch per load,
          GCC kept an AArch64 depthwise conv's accumulators on the stack
          (tests/schedule/test_neon_disassembly.py). Cross builds run this form under
          qemu (tests/test_build.py)."""
        if _is_contiguous_load(false_value) and _cannot_fault(true_value):
            condition = Unary(UnaryOp.NOT, condition)
            true_value, false_value = false_value, true_value
        if not (_is_contiguous_load(true_value) and _cannot_fault(false_value)):
            return None
        assert isinstance(true_value, Load)
        buffer, lanes = true_value.buffer, lanes_of(true_value)
        if buffer.dtype == "bool" or buffer.size < lanes:
            return None
        vtype = self.vector_type(true_value.dtype)
        t = self.scalar_type(buffer.dtype)
        load = self.memory_helper("load", buffer.dtype, lanes, vtype)
        select = self.select_helper(true_value.dtype)
        mask = self.broadcast("c", "bool", lanes)
        if lane_bits(buffer.dtype) != 32:
            mask_type = self.vector_type(f"int{lane_bits(buffer.dtype)}x{lanes}")
            mask = f"__builtin_convertvector({mask}, {mask_type})"
        name = f"ember_load_if_{buffer.dtype}x{lanes}"
        self.helper(
            name,
            f"static inline {vtype} {name}(_Bool c, const {t}* p, const {t}* safe, "
            f"{vtype} otherwise) {{\n"
            "#if defined(__x86_64__)\n"
            "  (void)safe;\n"
            f"  return c ? {load}(p) : otherwise;\n"
            "#else\n"
            f"  return {select}({mask}, {load}(c ? p : safe), otherwise);\n"
            "#endif\n}",
        )
        flat = flatten_index(buffer, true_value.indices)
        assert isinstance(flat, Ramp)
        name_of = self.names.of(buffer)
        return (
            f"{name}({self.expr(condition)}, &{name_of}[{self.expr(flat.base)}], {name_of}, "
            f"{self.expr(false_value)})"
        )

    def mask_to_width(self, mask: Expr, width: int) -> str:
        """A canonical (int32) mask as the mask of `width`-bit lanes."""
        if width == 32:
            return self.expr(mask)
        vtype = self.vector_type(f"int{width}x{lanes_of(mask)}")
        return f"__builtin_convertvector({self.expr(mask)}, {vtype})"

    def select_helper(self, dtype: str) -> str:
        """`ember_select_T(mask, a, b)`: lanes of a where mask is -1, of b where 0, with
        a mask of the same lane width (bitwise, so it stays in vector registers)."""
        vtype = self.vector_type(dtype)
        lanes, width = split_dtype(dtype)[1], lane_bits(dtype)
        bits = self.vector_type(f"int{width}x{lanes}")
        name = f"ember_select_{vtype}"
        body = f"  return ({vtype})((m & ({bits})a) | (~m & ({bits})b));"
        return self.helper(
            name, f"static inline {vtype} {name}({bits} m, {vtype} a, {vtype} b) {{\n{body}\n}}"
        )

    def vector_cast(self, dtype: str, value: Expr) -> tuple[str, int]:
        target, source = split_dtype(dtype)[0], split_dtype(value.dtype)[0]
        lanes = lanes_of(value)
        if target == source:
            return self.rendered(value)
        if target == "bool":  # nonzero -> true, like C's (_Bool)
            zero = Broadcast(Const(0, source), lanes)
            return self.rendered(Binary(BinaryOp.NE, value, zero))
        vtype = self.vector_type(dtype)
        text = self.expr(value) if source != "bool" else self.unary("-", value)
        if source == "bool" and target == "int32":
            return text, UNARY
        # GCC 12 converts between 8- or 16-bit integer and float vectors one lane at a
        # time (vpextrb + vcvtusi2ss per lane: a uint8 depthwise conv ran 9x slower);
        # through int32 it is one widening and one conversion instruction. Exact: every
        # 8/16-bit integer is an int32, and a float in the narrow type's range (what
        # C defines) converts to the same integer either way.
        narrow = {"int8", "uint8", "int16", "uint16"}
        if source in ("int8", "uint8") and (target == "int32" or _is_float(target)):
            text = f"{self.widen_helper(source, lanes)}({text})"
            if target == "int32":
                return text, PRIMARY
        elif (source in narrow and _is_float(target)) or (_is_float(source) and target in narrow):
            wide = self.vector_type(f"int32x{lanes}")
            text = f"__builtin_convertvector({text}, {wide})"
        return f"__builtin_convertvector({text}, {vtype})", PRIMARY

    def widen_helper(self, source: str, lanes: int) -> str:
        """`ember_widen_<source>x<lanes>(v)`: bytes to int32 lanes. GCC 12 sometimes
        expands `__builtin_convertvector` of a byte vector lane by lane (vpextrb per
        lane inside a large kernel, where the same line alone gives one vpmovzxbd); the
        intrinsic is one instruction where the target has it."""
        vtype, wide = self.vector_type(f"{source}x{lanes}"), self.vector_type(f"int32x{lanes}")
        name = f"ember_widen_{vtype}"
        sign = "u" if source == "uint8" else "i"
        lines = [f"static inline {wide} {name}({vtype} v) {{"]
        if lanes == 16:
            lines += [
                "#if defined(__AVX512F__)",
                f"  return ({wide})_mm512_cvtep{sign}8_epi32((__m128i)v);",
                "#else",
            ]
        lines += [f"  return __builtin_convertvector(v, {wide});"]
        if lanes == 16:
            lines += ["#endif"]
        lines += ["}"]
        header = "#if defined(__AVX512F__)\n#include <immintrin.h>\n#endif\n" if lanes == 16 else ""
        return self.helper(name, header + "\n".join(lines))

    # -- vector memory -------------------------------------------------------------------

    def vector_load(self, buffer: Buffer, indices: tuple[Expr, ...], lanes: int) -> str:
        flat, name = flatten_index(buffer, indices), self.names.of(buffer)
        vtype = self.vector_type(f"{buffer.dtype}x{lanes}")
        match flat:
            case Ramp(base, 1, _):
                helper = self.memory_helper("load", buffer.dtype, lanes, vtype)
                base_text = self.expr(base)
                self._prefetch(buffer, base, base_text)
                return f"{helper}(&{name}[{base_text}])"
            case Ramp(base, stride, _):
                helper = self.memory_helper("load_strided", buffer.dtype, lanes, vtype)
                return f"{helper}(&{name}[{self.expr(base)}], {stride})"
            case Broadcast(value, _):  # every lane reads the same element
                return self.broadcast(f"{name}[{self.expr(value)}]", buffer.dtype, lanes)
        helper = self.memory_helper("gather", buffer.dtype, lanes, vtype, flat.dtype)
        return f"{helper}({name}, {self.expr(flat)})"

    def masked_load(self, load: Load, lanes: int) -> str:
        """A load of the lanes where its predicate holds, zero in the others, which it
        does not read (a row's tail vector, past the end of the buffer): a lane loop,
        which GCC makes a masked load where the target has one."""
        assert load.predicate is not None
        buffer = load.buffer
        flat, name = flatten_index(buffer, load.indices), self.names.of(buffer)
        vtype, t = self.vector_type(f"{buffer.dtype}x{lanes}"), self.scalar_type(buffer.dtype)
        mask_type = self.vector_type(f"int32x{lanes}")
        mask = self.expr(load.predicate)
        contiguous = isinstance(flat, Ramp) and flat.stride == 1
        kind = "load_masked" if contiguous else "gather_masked"
        helper = f"ember_{kind}_{buffer.dtype}x{lanes}"
        element = "p[l]" if contiguous else "p[i[l]]"
        lane = f"-(int32_t){element}" if buffer.dtype == "bool" else element
        index_type = self.vector_type(f"int64x{lanes}")
        extra = "" if contiguous else f", {index_type} i"
        self.helper(
            helper,
            f"static inline {vtype} {helper}({mask_type} m, const {t}* p{extra}) {{\n"
            f"  {vtype} r = {{0}};\n"
            f"  for (int l = 0; l < {lanes}; ++l) if (m[l]) r[l] = {lane};\n"
            "  return r;\n}",
        )
        if contiguous:
            assert isinstance(flat, Ramp)
            return f"{helper}({mask}, &{name}[{self.expr(flat.base)}])"
        index = flat if lanes_of(flat) > 1 else Broadcast(flat, lanes)
        if index.dtype != f"int64x{lanes}":
            index = Cast(f"int64x{lanes}", index)
        return f"{helper}({mask}, {name}, {self.expr(index)})"

    def memory_helper(
        self, kind: str, dtype: str, lanes: int, vtype: str, index_dtype: str = "int64"
    ) -> str:
        """Load/store helpers: contiguous (memcpy), strided, gather and scatter."""
        t = self.scalar_type(dtype)
        name = f"ember_{kind}_{dtype}x{lanes}"
        index_base = split_dtype(index_dtype)[0]
        if index_base != "int64":  # another signature: another name
            name += f"_by_{index_base}"
        if name in self.helpers:
            return name
        is_bool = dtype == "bool"
        if kind == "load" and not is_bool:
            body = f"  {vtype} v;\n  memcpy(&v, p, sizeof v);\n  return v;"
            return self.helper(name, f"static inline {vtype} {name}(const {t}* p) {{\n{body}\n}}")
        if kind == "store" and not is_bool:
            body = "  memcpy(p, &v, sizeof v);"
            return self.helper(name, f"static inline void {name}({t}* p, {vtype} v) {{\n{body}\n}}")
        element = {
            "load": "p[l]",
            "store": "p[l]",
            "load_strided": "p[l * s]",
            "store_strided": "p[l * s]",
            "gather": "p[i[l]]",
            "scatter": "p[i[l]]",
        }[kind]
        extra = {"load_strided": ", int64_t s", "store_strided": ", int64_t s"}.get(kind, "")
        if kind in ("gather", "scatter"):
            extra = f", {self.vector_type(index_dtype)} i"
        loop = f"  for (int l = 0; l < {lanes}; ++l) "
        if kind.startswith(("load", "gather")):
            lane = f"-(int32_t){element}" if is_bool else element
            body = f"  {vtype} r;\n{loop}r[l] = {lane};\n  return r;"
            signature = f"static inline {vtype} {name}(const {t}* p{extra})"
        else:
            lane = "v[l] != 0" if is_bool else "v[l]"
            body = f"{loop}{element} = {lane};"
            signature = f"static inline void {name}({t}* p{extra}, {vtype} v)"
        return self.helper(name, f"{signature} {{\n{body}\n}}")

    def lanewise(
        self,
        name: str,
        vtype: str,
        arg_types: list[str],
        lanes: int,
        lane_expr: str,
    ) -> str:
        """A helper computing each lane `l` of a `vtype` result from `lane_expr` over
        arguments a0, a1, ... (vectors indexed `a0[l]`, or scalars)."""
        if name in self.helpers:
            return name
        params = ", ".join(f"{t} a{i}" for i, t in enumerate(arg_types))
        body = f"  {vtype} r;\n  for (int l = 0; l < {lanes}; ++l) r[l] = {lane_expr};\n  return r;"
        return self.helper(name, f"static inline {vtype} {name}({params}) {{\n{body}\n}}")


@dataclass(frozen=True, slots=True)
class _Bytes:
    """Four consecutive bytes of `buffer` from flat index `base` (scalar) or, for
    weights, `4 * lanes` bytes from `base`."""

    buffer: Buffer
    base: Expr


def _additive_terms(expr: Expr) -> Iterator[Expr]:
    if isinstance(expr, Binary) and expr.op is BinaryOp.ADD:
        yield from _additive_terms(expr.a)
        yield from _additive_terms(expr.b)
    else:
        yield expr


def _dot_group(terms: list[Expr], lanes: int) -> tuple[set[int], _Bytes, _Bytes] | None:
    """Indices of four terms forming one dot-product step, with the data and weight
    bytes they read, or None."""
    products: dict[int, tuple[Load, Load]] = {}
    for index, term in enumerate(terms):
        operands = _byte_product(term, lanes)
        if operands is not None:
            products[index] = operands
    for first, (data, weight) in products.items():
        data_base = flatten_index(data.buffer, data.indices)
        weight_base = flatten_index(weight.buffer, weight.indices)
        if not isinstance(weight_base, Ramp) or weight_base.stride != DOT_GROUP:
            continue
        group = {first}
        for j in range(1, DOT_GROUP):
            match = next(
                (
                    index
                    for index, (d, w) in products.items()
                    if index not in group
                    and d.buffer is data.buffer
                    and w.buffer is weight.buffer
                    and _offset(flatten_index(d.buffer, d.indices), data_base) == j
                    and _ramp_offset(flatten_index(w.buffer, w.indices), weight_base) == j
                ),
                None,
            )
            if match is None:
                break
            group.add(match)
        if len(group) == DOT_GROUP:
            return group, _Bytes(data.buffer, data_base), _Bytes(weight.buffer, weight_base.base)
    return None


def _byte_product(term: Expr, lanes: int) -> tuple[Load, Load] | None:
    """(uint8 scalar load, int8 vector load) if `term` is their product in int32."""
    if not (isinstance(term, Binary) and term.op is BinaryOp.MUL):
        return None
    for a, b in ((term.a, term.b), (term.b, term.a)):
        data, weight = _broadcast_byte(a), _vector_byte(b, lanes)
        if data is not None and weight is not None:
            return data, weight
    return None


def _broadcast_byte(expr: Expr) -> Load | None:
    """The uint8 scalar load in `broadcast(int32(load))` or `int32xN(broadcast(load))`."""
    match expr:
        case Broadcast(Cast("int32", Load() as load)) | Cast(_, Broadcast(Load() as load)):
            if load.buffer.dtype == "uint8" and lanes_of(load) == 1:
                return load
    return None


def _vector_byte(expr: Expr, lanes: int) -> Load | None:
    match expr:
        case Cast(dtype, Load() as load) if dtype == f"int32x{lanes}":
            if load.buffer.dtype == "int8" and lanes_of(load) == lanes:
                return load
    return None


def _offset(flat: Expr, base: Expr) -> int | None:
    difference = simplify_expr(Binary(BinaryOp.SUB, flat, base))
    return int(difference.value) if isinstance(difference, Const) else None


def _ramp_offset(flat: Expr, base: Ramp) -> int | None:
    if not isinstance(flat, Ramp) or flat.stride != base.stride or flat.lanes != base.lanes:
        return None
    return _offset(flat.base, base.base)


def _is_contiguous_load(expr: Expr) -> bool:
    if not isinstance(expr, Load) or lanes_of(expr) == 1:
        return False
    flat = flatten_index(expr.buffer, expr.indices)
    return isinstance(flat, Ramp) and flat.stride == 1 and lanes_of(flat.base) == 1


def _cannot_fault(expr: Expr) -> bool:
    """No load and no integer division in `expr`: safe to evaluate in any case."""
    for node in walk(expr):
        if isinstance(node, Load):
            return False
        if isinstance(node, Binary) and node.op in _DIVISIONS and _is_integer(node.dtype):
            return False
    return True


_DIVISIONS = (BinaryOp.DIV, BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _is_integer(dtype: str) -> bool:
    return split_dtype(dtype)[0].startswith(("int", "uint"))


def _always(test: Expr) -> bool:
    """Whether a simplified condition is the constant true."""
    return isinstance(test, Const) and bool(test.value)


def _prefetches(loop: For) -> bool:
    """Whether `loop` prefetches its streamed loads (`CRenderer._prefetch`): a serial
    loop of PREFETCH_MIN_EXTENT iterations or more with no loop inside, so each
    prefetch is issued once per iteration, well ahead of its load."""
    return (
        loop.kind is ForKind.SERIAL
        and isinstance(loop.extent, Const)
        and int(loop.extent.value) >= PREFETCH_MIN_EXTENT
        and not any(isinstance(stmt, For) for stmt in walk_stmts(loop.body))
    )
