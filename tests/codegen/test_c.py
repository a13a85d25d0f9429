"""C code generation: hand-written loop IR compiled with the host compiler, run through
ctypes, and compared with NumPy and with the loop interpreter (the oracle)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from loop.test_vectorize import index_exprs  # tests/ is on sys.path (pyproject)

from ember.backend import Kernel, build_kernel, compile_unit, generate_kernel, kernel_source
from ember.codegen import c as c_module
from ember.codegen import output_args
from ember.codegen.c import CRenderer, render_c, render_c_unit
from ember.errors import CodegenError
from ember.loop.interpret import run_func
from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Stmt,
    Store,
    seq,
)
from ember.te.expr import (
    BinaryOp,
    Const,
    Expr,
    Var,
    binary,
    call,
    cast,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
)

F32 = "float32"
i, j, k, v, t = Var("i"), Var("j"), Var("k"), Var("v"), Var("t")


@pytest.fixture(autouse=True, scope="module")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("kernels")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMBER_CACHE_DIR", str(path))
        yield path


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL, unroll: int = 0) -> For:
    return For(var, Const(extent), kind, body, unroll)


def inputs_for(func: PrimFunc, seed: int = 0) -> list[np.ndarray]:
    """Random inputs, zeroed outputs (NaN-free so results compare exactly)."""
    rng = np.random.default_rng(seed)
    outputs = output_args(func)
    arrays = []
    for buffer in func.args:
        if buffer in outputs:
            arrays.append(np.zeros(buffer.shape, buffer.dtype))
        elif buffer.dtype == "bool":
            arrays.append(rng.random(buffer.shape) < 0.5)
        elif buffer.dtype.startswith(("int", "uint")):
            arrays.append(rng.integers(-50, 50, buffer.shape).astype(buffer.dtype))
        else:
            arrays.append((rng.standard_normal(buffer.shape) * 2).astype(buffer.dtype))
    return arrays


def run_both(func: PrimFunc, arrays: list[np.ndarray]) -> tuple[Kernel, list[np.ndarray]]:
    """Run the compiled kernel on `arrays` (in place) and assert the interpreter agrees."""
    expected = [a.copy() for a in arrays]
    run_func(func, expected)
    kernel = build_kernel(func, "llvm")
    kernel(*arrays)
    for buffer, want, got in zip(func.args, expected, arrays, strict=True):
        if buffer.dtype.startswith("float"):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=buffer.name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=buffer.name)
    return kernel, arrays


def elementwise() -> PrimFunc:
    a, b, c = Buffer("A", (4, 32), F32), Buffer("B", (32,), F32), Buffer("C", (4, 32), F32)
    value = maximum(Load(a, (i, j * 16 + v)) + Load(b, (j * 16 + v,)), Const(0.0, F32))
    inner = loop(j, 2, loop(v, 16, Store(c, (i, j * 16 + v), value), ForKind.VECTORIZED))
    return PrimFunc("add_relu", (a, b, c), loop(i, 4, inner, ForKind.PARALLEL))


def test_elementwise_parallel_and_vectorized() -> None:
    func = elementwise()
    kernel, (a, b, c) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c, np.maximum(a + b, 0), rtol=1e-6)
    assert kernel.source is not None and "ember_load_float32x16" in kernel.source


def test_generated_source_is_readable() -> None:
    source = kernel_source(elementwise())
    expected = """\
void add_relu(const float* restrict A, const float* restrict B, float* restrict C) {
  #pragma omp parallel for
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      ember_store_float32x16(&C[i * 32 + j * 16], ember_max_float32x16(\
ember_load_float32x16(&A[i * 32 + j * 16]) + ember_load_float32x16(&B[j * 16]), \
ember_broadcast_float32x16(0.0f)));
    }
  }
}

int32_t add_relu_packed(void* const* args, int32_t num_args) {
  if (num_args != 3) return -1;
  add_relu((const float*)args[0], (const float*)args[1], (float*)args[2]);
  return 0;
}
"""
    assert source.endswith(expected), source
    assert "typedef float float32x16 __attribute__((vector_size(64)));" in source
    assert "// inputs: A, B; outputs: C" in source


def matmul(m: int = 6, n: int = 32, kk: int = 7) -> PrimFunc:
    """C = relu(A @ B) with 2 x 16 accumulators in a local Allocate: rows unrolled,
    columns vectorized, the k loop inside."""
    a, b, c = Buffer("A", (m, kk), F32), Buffer("B", (kk, n), F32), Buffer("C", (m, n), F32)
    acc = Buffer("acc", (2, 16), F32, "local")
    row, col = i * 2 + t, j * 16 + v
    vector = ForKind.VECTORIZED

    def rows_and_lanes(body: Stmt) -> Stmt:
        return loop(t, 2, loop(v, 16, body, vector), ForKind.UNROLLED)

    update = Load(acc, (t, v)) + Load(a, (row, k)) * Load(b, (k, col))
    body = seq(
        rows_and_lanes(Store(acc, (t, v), Const(0.0, F32))),
        loop(k, kk, rows_and_lanes(Store(acc, (t, v), update))),
        rows_and_lanes(Store(c, (row, col), maximum(Load(acc, (t, v)), Const(0.0, F32)))),
    )
    tiles = loop(j, n // 16, Allocate(acc, body))
    return PrimFunc("matmul_relu", (a, b, c), loop(i, m // 2, tiles, ForKind.PARALLEL))


def test_matmul_with_register_accumulators() -> None:
    func = matmul()
    kernel, (a, b, c) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    assert kernel.source is not None
    # The unrolled rows index the accumulators with constants, so each row's vector is
    # a variable of its own (a register), not an element of a stack array.
    assert "float32x16 acc_0;" in kernel.source and "float32x16 acc_1;" in kernel.source
    assert "acc[" not in kernel.source and "acc_0 = acc_0 + " in kernel.source


def test_a_long_reduction_loop_prefetches_its_streamed_vectors() -> None:
    """B's row of 32 floats (128 bytes) is a new cache line every k: the k loop of 96
    iterations prefetches it 1 KiB ahead (8 rows), once per iteration, not per
    accumulator row; A's broadcast scalar and the output are not prefetched. A loop of
    7 iterations, too short to run ahead in, prefetches nothing."""
    func = matmul(kk=96)
    a, b, c = inputs_for(func)
    kernel = build_kernel(func, "llvm")
    kernel(a, b, c)
    # 96 products summed in float32 (fused multiply-adds against NumPy's own order):
    # about 1e-5 apart on sums of size 10.
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    assert kernel.source is not None
    calls = re.findall(r"ember_prefetch\((\w+), \((.*)\) \* 4 \+ (\d+)\);", kernel.source)
    assert [(name, ahead) for name, _, ahead in calls] == [("B", "1024")], calls
    loop_start = kernel.source.index("for (int64_t k = 0; k < 96; ++k) {")
    assert loop_start < kernel.source.index("ember_prefetch(B, ")
    assert "__builtin_prefetch" in kernel.source and "#if defined(__x86_64__)" in kernel.source
    short = kernel_source(matmul(kk=7), "llvm")
    assert "ember_prefetch" not in short


def test_two_inputs_read_at_the_same_index_are_both_prefetched() -> None:
    """An elementwise loop of 128 steps of one 64-byte vector: each input is a stream of
    its own, though both render the same index."""
    a, b, c = (Buffer(name, (128 * 16,), F32) for name in "ABC")
    index = k * 16 + v
    body = Store(c, (index,), Load(a, (index,)) + Load(b, (index,)))
    func = PrimFunc("add", (a, b, c), loop(k, 128, loop(v, 16, body, ForKind.VECTORIZED)))
    kernel, (x, y, z) = run_both(func, inputs_for(func))
    np.testing.assert_array_equal(z, x + y)
    assert kernel.source is not None
    calls = re.findall(r"ember_prefetch\((\w+), ", kernel.source)
    assert calls == ["A", "B"], calls


def test_vectorized_loops_with_tails() -> None:
    """37 elements: 4 vector blocks of 8 plus a 5-element tail, written once as a guarded
    vector loop (versioned: whole vectors, then the tail serially) and once as main
    part plus scalar tail."""
    n = 37
    a, c, d = Buffer("A", (n,), F32), Buffer("C", (n,), F32), Buffer("D", (n,), F32)
    index = i * 8 + v
    guarded = IfThenElse(index < n, Store(c, (index,), Load(a, (index,)) * 3.0))
    split = seq(
        loop(
            i, n // 8, loop(v, 8, Store(d, (index,), Load(a, (index,)) - 1.0), ForKind.VECTORIZED)
        ),
        loop(v, n % 8, Store(d, (v + 32,), Load(a, (v + 32,)) - 1.0)),
    )
    body = seq(loop(i, 5, loop(v, 8, guarded, ForKind.VECTORIZED)), split)
    func = PrimFunc("tails", (a, c, d), body)
    kernel, (a_in, c_out, d_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, a_in * 3, rtol=1e-6)
    np.testing.assert_allclose(d_out, a_in - 1, rtol=1e-6)
    assert kernel.source is not None and "ember_store_float32x8(&D[i * 8]" in kernel.source
    assert "ember_store_float32x8(&C[i * 8]" in kernel.source


def test_predicated_store_writes_only_the_lanes_in_the_row() -> None:
    """Rows of 37 stored by whole vectors of 8 over a source padded to 40: the fifth
    vector of a row stores 5 lanes. Rows go last to first, so a lane written past a
    row's end would clobber the row after it, already stored."""
    n = 37
    a, c = Buffer("A", (3, 40), F32), Buffer("C", (3, n), F32)
    row, index = Const(2) - i, k * 8 + v
    guarded = IfThenElse(index < n, Store(c, (row, index), Load(a, (row, index)) + 1.0))
    func = PrimFunc("rows", (a, c), loop(i, 3, loop(k, 5, loop(v, 8, guarded, ForKind.VECTORIZED))))
    kernel, (a_in, c_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, a_in[:, :n] + 1, rtol=1e-6)
    assert kernel.source is not None and "ember_store_float32x8(&C[" in kernel.source


def test_unroll_pragma_from_unroll_max_step() -> None:
    a, c = Buffer("A", (8, 4), F32), Buffer("C", (8,), F32)
    reduce = loop(k, 4, Store(c, (i,), Load(c, (i,)) + Load(a, (i, k))))
    body = loop(i, 8, seq(Store(c, (i,), Const(0.0, F32)), reduce), unroll=16)
    func = PrimFunc("row_sum", (a, c), body)
    kernel, (a_in, c_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, a_in.sum(axis=1), rtol=1e-5, atol=1e-6)
    assert kernel.source is not None and "#pragma GCC unroll 4" in kernel.source


MATH = ["exp", "log", "sqrt", "tanh", "erf", "sigmoid", "abs", "floor", "ceil", "round"]
MATH += ["sin", "cos", "log1p", "expm1"]


@pytest.mark.parametrize("lanes", [1, 8])
def test_math_functions(lanes: int) -> None:
    a = Buffer("A", (16,), F32)
    outs = [Buffer(f"out_{name}", (16,), F32) for name in MATH]
    pow_out, fmod_out = Buffer("out_pow", (16,), F32), Buffer("out_fmod", (16,), F32)
    x = Load(a, (i * lanes + v,))
    positive = call("abs", x) + 0.5
    stores = [
        Store(out, (i * lanes + v,), call(name, positive if name in ("log", "sqrt") else x))
        for name, out in zip(MATH, outs, strict=True)
    ]
    stores.append(Store(pow_out, (i * lanes + v,), call("pow", positive, x)))
    stores.append(Store(fmod_out, (i * lanes + v,), call("fmod", x, Const(0.75, F32))))
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    body = loop(i, 16 // lanes, loop(v, lanes, seq(*stores), kind))
    func = PrimFunc(f"math_{lanes}", (a, *outs, pow_out, fmod_out), body)
    arrays = inputs_for(func)
    arrays[0][:6] = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5]  # round: half to even
    _, results = run_both(func, arrays)
    x_in = results[0]
    np.testing.assert_array_equal(results[1 + MATH.index("round")], np.round(x_in))
    np.testing.assert_allclose(results[1 + MATH.index("exp")], np.exp(x_in), rtol=1e-6)
    sigmoid = 1 / (1 + np.exp(-x_in.astype(np.float64)))
    np.testing.assert_allclose(results[1 + MATH.index("sigmoid")], sigmoid, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("lanes", [1, 4])
def test_integer_floor_division_and_modulo_with_negatives(dtype: str, lanes: int) -> None:
    a, b = Buffer("A", (8,), dtype), Buffer("B", (8,), dtype)
    quotient, remainder = Buffer("Q", (8,), dtype), Buffer("R", (8,), dtype)
    truncated = Buffer("T", (8,), dtype)
    index = i * lanes + v
    x, y = Load(a, (index,)), Load(b, (index,))
    stores = seq(
        Store(quotient, (index,), x // y),
        Store(remainder, (index,), x % y),
        Store(truncated, (index,), binary(BinaryOp.DIV, x, y)),
    )
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    func = PrimFunc(
        "divmod",
        (a, b, quotient, remainder, truncated),
        loop(i, 8 // lanes, loop(v, lanes, stores, kind)),
    )
    arrays = inputs_for(func)
    arrays[0][:] = [7, -7, 7, -7, 0, -1, 13, -13]
    arrays[1][:] = [2, 2, -2, -2, 3, 5, -4, 4]
    _, (x_in, y_in, q, r, tr) = run_both(func, arrays)
    np.testing.assert_array_equal(q, x_in // y_in)
    np.testing.assert_array_equal(r, x_in % y_in)
    np.testing.assert_array_equal(tr, np.trunc(x_in / y_in).astype(dtype))


def test_float_floor_division_and_modulo_match_numpy() -> None:
    a, b = Buffer("A", (8,), F32), Buffer("B", (8,), F32)
    quotient, remainder = Buffer("Q", (8,), F32), Buffer("R", (8,), F32)
    x, y = Load(a, (i,)), Load(b, (i,))
    body = loop(i, 8, seq(Store(quotient, (i,), x // y), Store(remainder, (i,), x % y)))
    func = PrimFunc("fdivmod", (a, b, quotient, remainder), body)
    arrays = inputs_for(func)
    arrays[0][:] = [7.5, -7.5, 7.5, -7.5, 0.0, -1.0, 6.0, -0.25]
    arrays[1][:] = [2.0, 2.0, -2.0, -2.0, 3.0, 0.5, 1.5, 4.0]
    _, (x_in, y_in, q, r) = run_both(func, arrays)
    np.testing.assert_array_equal(q, np.floor_divide(x_in, y_in))
    np.testing.assert_array_equal(r, np.remainder(x_in, y_in))


def test_int64_extremes_render_as_valid_literals() -> None:
    # -9223372036854775808 is not a C literal (its digits overflow; gcc warns and goes
    # through unsigned), and it is the identity of an int64 max-reduction.
    out = Buffer("out", (2,), "int64")
    body = seq(
        Store(out, (Const(0),), Const(-(2**63), "int64")),
        Store(out, (Const(1),), Const(2**63 - 1, "int64")),
    )
    func = PrimFunc("extremes", (out,), body)
    assert "INT64_MIN" in kernel_source(func)
    _, (values,) = run_both(func, inputs_for(func))
    assert values.tolist() == [-(2**63), 2**63 - 1]


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "uint16"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_integer_division_by_zero_and_minus_one_do_not_trap(lanes: int, dtype: str) -> None:
    # C traps (SIGFPE, killing the process) on x / 0 and INT_MIN / -1; kernels give
    # what the NumPy reference does: 0, and INT_MIN.
    a, b = Buffer("A", (16,), dtype), Buffer("B", (16,), dtype)
    outs = [Buffer(name, (16,), dtype) for name in ("quotient", "floor_quotient", "modulo")]
    index = i * lanes + v
    x, y = Load(a, (index,)), Load(b, (index,))
    values = (binary(BinaryOp.DIV, x, y), x // y, x % y)
    stores = seq(*(Store(out, (index,), value) for out, value in zip(outs, values, strict=True)))
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    body = loop(i, 16 // lanes, loop(v, lanes, stores, kind))
    func = PrimFunc(f"int_division_{dtype}_{lanes}", (a, b, *outs), body)
    info = np.iinfo(dtype)
    minus_one = -1 if info.min < 0 else info.max
    x_in = np.resize(np.array([7, info.max, 0, info.min, info.max, 5, 3, info.min], dtype), 16)
    y_in = np.resize(np.array([0, 0, 0, minus_one, minus_one, 2, 2, 3], dtype), 16)
    q, fq, m = (np.zeros(16, dtype) for _ in range(3))
    build_kernel(func, "llvm")(x_in, y_in, q, fq, m)
    with np.errstate(divide="ignore", over="ignore"):
        floor_q, mod = np.floor_divide(x_in, y_in), np.mod(x_in, y_in)
        truncated = np.where((mod != 0) & ((x_in < 0) != (y_in < 0)), floor_q + 1, floor_q)
    np.testing.assert_array_equal(q, truncated.astype(dtype))
    np.testing.assert_array_equal(fq, floor_q)
    np.testing.assert_array_equal(m, mod)


@pytest.mark.parametrize("lanes", [1, 8])
def test_bool_buffers_comparisons_and_select(lanes: int) -> None:
    a, b, mask = Buffer("A", (16,), F32), Buffer("B", (16,), F32), Buffer("M", (16,), "bool")
    greater, picked = Buffer("greater", (16,), "bool"), Buffer("picked", (16,), F32)
    logic, as_float = Buffer("logic", (16,), "bool"), Buffer("as_float", (16,), F32)
    index = i * lanes + v
    x, y, m = Load(a, (index,)), Load(b, (index,)), Load(mask, (index,))
    stores = seq(
        Store(greater, (index,), x > y),
        Store(picked, (index,), select(m, x, select(x > 0.0, x, x * 0.1))),
        Store(logic, (index,), logical_or(logical_and(m, x < y), logical_not(cast("bool", y)))),
        Store(as_float, (index,), cast(F32, m) + cast(F32, x >= y) * 2.0),
    )
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    body = loop(i, 16 // lanes, loop(v, lanes, stores, kind))
    func = PrimFunc(f"bools_{lanes}", (a, b, mask, greater, picked, logic, as_float), body)
    arrays = inputs_for(func)
    arrays[1][:4] = 0.0  # cast("bool", 0.0) is false
    _, (x_in, y_in, m_in, g, p, lg, f) = run_both(func, arrays)
    np.testing.assert_array_equal(g, x_in > y_in)
    np.testing.assert_array_equal(
        p, np.where(m_in, x_in, np.where(x_in > 0, x_in, x_in * np.float32(0.1)))
    )
    np.testing.assert_array_equal(lg, (m_in & (x_in < y_in)) | (y_in == 0))
    np.testing.assert_array_equal(f, m_in + (x_in >= y_in) * 2.0)
    assert set(np.unique(g.view(np.uint8))) <= {0, 1}


@pytest.mark.parametrize("lanes", [1, 8])
def test_bool_ordering_min_max_and_select_of_bools(lanes: int) -> None:
    # Vector bools are masks (true is -1): ordering, min/max and selects of bool
    # values must still treat true as the greater value and a bool as a bool.
    a, b, c = (Buffer(name, (16,), "bool") for name in "abc")
    less, low, high, picked = (Buffer(name, (16,), "bool") for name in ("lt", "lo", "hi", "pick"))
    index = i * lanes + v
    x, y, m = Load(a, (index,)), Load(b, (index,)), Load(c, (index,))
    stores = seq(
        Store(less, (index,), x < y),
        Store(low, (index,), minimum(x, y)),
        Store(high, (index,), maximum(x, y)),
        Store(picked, (index,), select(m, x, y)),
    )
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    body = loop(i, 16 // lanes, loop(v, lanes, stores, kind))
    func = PrimFunc(f"bool_order_{lanes}", (a, b, c, less, low, high, picked), body)
    _, (x_in, y_in, m_in, lt, lo, hi, pick) = run_both(func, inputs_for(func))
    np.testing.assert_array_equal(lt, x_in < y_in)
    np.testing.assert_array_equal(lo, x_in & y_in)
    np.testing.assert_array_equal(hi, x_in | y_in)
    np.testing.assert_array_equal(pick, np.where(m_in, x_in, y_in))


@pytest.mark.parametrize("lanes", [1, 8])
def test_min_max_propagate_nan_like_the_interpreter(lanes: int) -> None:
    a, lo, hi = Buffer("A", (8,), F32), Buffer("lo", (8,), F32), Buffer("hi", (8,), F32)
    x, index = Load(a, (i * lanes + v,)), i * lanes + v
    clip = minimum(maximum(x, Const(-1.0, F32)), Const(1.0, F32))
    stores = seq(Store(lo, (index,), clip), Store(hi, (index,), maximum(Const(0.0, F32), x)))
    kind = ForKind.VECTORIZED if lanes > 1 else ForKind.SERIAL
    func = PrimFunc("clip", (a, lo, hi), loop(i, 8 // lanes, loop(v, lanes, stores, kind)))
    arrays = inputs_for(func)
    arrays[0][:3] = [np.nan, np.inf, -np.inf]
    _, (_, low, high) = run_both(func, arrays)
    assert np.isnan(low[0]) and low[1] == 1.0 and low[2] == -1.0
    assert high[1] == np.inf


def test_strided_gathered_and_scattered_vector_accesses() -> None:
    a, row, c = Buffer("A", (8, 8), F32), Buffer("A_row", (8,), F32), Buffer("C", (8, 8), F32)
    index, index32 = Buffer("I", (8,), "int64"), Buffer("J", (8,), "int32")
    # C[v, i] = A[i, v] + A[I[v] mod 8, i] + A_row[J[v] mod 8]: a strided store, a
    # contiguous load and gathers with int64 and int32 indices.
    value = Load(a, (i, v)) + Load(a, (Load(index, (v,)) % 8, i))
    value = value + Load(row, (Load(index32, (v,)) % Const(8, "int32"),))
    func = PrimFunc(
        "transpose",
        (a, row, index, index32, c),
        loop(i, 8, loop(v, 8, Store(c, (v, i), value), ForKind.VECTORIZED)),
    )
    kernel, (a_in, row_in, idx, idx32, c_out) = run_both(func, inputs_for(func))
    expected = a_in.T + a_in[idx % 8, :] + row_in[idx32 % 8][:, None]
    np.testing.assert_allclose(c_out, expected, rtol=1e-6)
    source = kernel.source or ""
    for helper in ("store_strided", "gather_float32x8(", "gather_float32x8_by_int32("):
        assert f"ember_{helper}" in source


def test_global_allocation_on_the_heap_and_names_that_need_cleaning() -> None:
    a, c = Buffer("input.0", (64,), F32), Buffer("int", (64,), F32)
    tmp = Buffer("input.0", (64,), F32, "global")  # same name, another buffer
    body = Allocate(
        tmp,
        seq(
            loop(i, 64, Store(tmp, (i,), Load(a, (i,)) * 2.0)),
            loop(i, 64, Store(c, (i,), Load(tmp, (63 - i,)) + 1.0)),
        ),
    )
    func = PrimFunc("reverse.double", (a, c), body)
    kernel, (a_in, c_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, a_in[::-1] * 2 + 1, rtol=1e-6)
    source = kernel.source or ""
    assert "aligned_alloc(64, 256)" in source and "free(input_0_1);" in source
    assert re.search(
        r"void reverse_double\(const float\* restrict input_0, float\* restrict int_1\)", source
    )


def test_global_allocation_inside_a_loop_is_on_the_stack() -> None:
    """A buffer computed at a tile (compute_at) is allocated per iteration of the
    tile's loop: on the stack, not by a heap allocation per tile."""
    a, c = Buffer("A", (4, 16), F32), Buffer("C", (4, 16), F32)
    tmp = Buffer("row", (16,), F32, "global")
    body = Allocate(
        tmp,
        seq(
            loop(j, 16, Store(tmp, (j,), Load(a, (i, j)) * 2.0)),
            loop(j, 16, Store(c, (i, j), Load(tmp, (15 - j,)))),
        ),
    )
    func = PrimFunc("rows", (a, c), loop(i, 4, body, ForKind.PARALLEL))
    kernel, (a_in, c_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, a_in[:, ::-1] * 2, rtol=1e-6)
    source = kernel.source or ""
    assert "float row[16] __attribute__((aligned(64)));" in source
    assert "aligned_alloc" not in source


def test_floor_division_of_loop_indices_is_plain_c_division() -> None:
    """Loop variables run from 0: a fused index divided by a positive constant is C's
    `/` and `%` (what the compiler strength-reduces best). A let may be negative: it
    keeps the floor-division helper."""
    a, c = Buffer("A", (24,), F32), Buffer("C", (24,), F32)
    transpose = loop(i, 24, Store(c, (i % 6 * 4 + i // 6,), Load(a, (i,)) + 1.0))
    func = PrimFunc("transpose", (a, c), transpose)
    kernel, (a_in, c_out) = run_both(func, inputs_for(func))
    np.testing.assert_allclose(c_out, (a_in + 1).reshape(4, 6).T.reshape(24), rtol=1e-6)
    source = kernel.source or ""
    assert "i / 6" in source and "ember_floordiv" not in source
    shifted = LetStmt(k, i - 3, Store(c, (i,), cast(F32, k // 4)))
    source = kernel_source(PrimFunc("shifted", (c,), loop(i, 24, shifted)))
    assert "ember_floordiv_int64(k, 4)" in source


def test_small_integer_arithmetic_wraps_like_the_dtype() -> None:
    a, c = Buffer("A", (4,), "int8"), Buffer("C", (4,), "int8")
    func = PrimFunc(
        "wrap",
        (a, c),
        loop(i, 4, Store(c, (i,), (Load(a, (i,)) + Const(100, "int8")) // Const(2, "int8"))),
    )
    arrays = inputs_for(func)
    arrays[0][:] = [100, 27, -100, 28]
    _, (_, c_out) = run_both(func, arrays)
    assert list(c_out) == [-28, 63, 0, -64]


def test_unsupported_dtype_is_a_codegen_error() -> None:
    a, c = Buffer("A", (4,), "float16"), Buffer("C", (4,), "float16")
    func = PrimFunc("half", (a, c), loop(i, 4, Store(c, (i,), Load(a, (i,)))))
    with pytest.raises(CodegenError, match=r"float16 is not supported.*cast"):
        kernel_source(func)


def test_select_on_a_scalar_condition_stays_lazy_around_vector_branches() -> None:
    """Row padding: out[i, :] = A[i - 1, :] for i >= 1, else 0; row -1 is never read:
    on x86-64 the helper is C's lazy ?:; elsewhere, without a branch, the load reads
    the start of A instead when the condition is false, and the lanes are then
    replaced by the other branch (run under qemu by tests/test_build.py)."""
    a, out = Buffer("A", (3, 8), F32), Buffer("out", (4, 8), F32)
    value = select(i >= 1, Load(a, (i - 1, v)), Const(0.0, F32))
    body = loop(i, 4, loop(v, 8, Store(out, (i, v), value), ForKind.VECTORIZED))
    kernel, (a_in, padded) = run_both(
        PrimFunc("pad_rows", (a, out), body), inputs_for(PrimFunc("pad_rows", (a, out), body))
    )
    np.testing.assert_array_equal(padded, np.concatenate([np.zeros((1, 8), np.float32), a_in]))
    assert kernel.source is not None
    assert "ember_load_if_float32x8(i >= 1, &A[(i - 1) * 8], A, " in kernel.source
    assert "return ember_select_float32x8(ember_broadcast_int32x8(-(int32_t)c), " in (kernel.source)
    assert "ember_load_float32x8(c ? p : safe)" in kernel.source
    assert "#if defined(__x86_64__)\n  (void)safe;\n  return c ? ember_load_float32x8(p) : " in (
        kernel.source
    )


def test_select_on_a_scalar_condition_with_two_loads_stays_a_branch() -> None:
    """A select between two loads keeps C's lazy ?: (neither load may be made safe by
    reading another address: both would need one)."""
    a, out = Buffer("A", (3, 8), F32), Buffer("out", (4, 8), F32)
    value = select(i >= 1, Load(a, (i - 1, v)), Load(a, (i - i, v)) * 2.0)
    body = loop(i, 4, loop(v, 8, Store(out, (i, v), value), ForKind.VECTORIZED))
    func = PrimFunc("pad_rows2", (a, out), body)
    kernel, (a_in, result) = run_both(func, inputs_for(func))
    expected = np.concatenate([a_in[:1] * 2, a_in])
    np.testing.assert_array_equal(result, expected)
    assert kernel.source is not None and "i >= 1 ? ember_load_float32x8(" in kernel.source


@settings(max_examples=10, deadline=None)
@given(load_index=index_exprs())
def test_random_vector_index_arithmetic_compiles_to_the_same_results(load_index: Expr) -> None:
    """Index expressions of the lane (ramps, gathers, vector floordiv/mod/max, casts)
    rendered as C agree with the interpreter."""
    a, out = Buffer("A", (64,), F32), Buffer("out", (3, 8), F32)
    value = Load(a, (load_index % 64,)) + cast(F32, load_index)
    body = loop(i, 3, loop(v, 8, Store(out, (i, v), value), ForKind.VECTORIZED))
    func = PrimFunc("random_index", (a, out), body)
    run_both(func, inputs_for(func))


def _fma_flips(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """a, b, c (float32) where round(a * b + c) depends on whether a * b is rounded
    before the add (as the interpreter does) or fused with it (an FMA)."""
    rng = np.random.default_rng(5)
    a = rng.uniform(1.5, 2, 100_000).astype(np.float32)
    b = rng.uniform(1.5, 2, 100_000).astype(np.float32)
    # a * b + c near 0.5, where float32 is finer than at a * b (2 to 4): the product's
    # rounding error, which an FMA keeps, moves the sum off the tie.
    c = (np.float32(0.5) - a * b).astype(np.float32)
    separate = np.round((a * b).astype(np.float32) + c)
    fused = np.round((a.astype(np.float64) * b + c).astype(np.float32))
    flips = np.flatnonzero(separate != fused)[:count]
    assert flips.size == count
    return a[flips], b[flips], c[flips]


def requantize() -> PrimFunc:
    """Q = round(A * B + C) to uint8, 16 lanes."""
    a_buf, b_buf, c_buf = (Buffer(name, (16,), F32) for name in "ABC")
    out = Buffer("Q", (16,), "uint8")
    value = cast("uint8", call("round", Load(a_buf, (v,)) * Load(b_buf, (v,)) + Load(c_buf, (v,))))
    return PrimFunc("requantize", (a_buf, b_buf, c_buf, out),
                    loop(v, 16, Store(out, (v,), value), ForKind.VECTORIZED))  # fmt: skip


def test_kernels_that_round_floats_do_not_fuse_multiply_adds() -> None:
    """round(a * b + c) to uint8 (a requantization) on inputs where an FMA lands on the
    other side of a rounding step (all 16 differ with FMAs): the kernel is compiled
    without contraction and equals the interpreter; a kernel without rounding keeps
    FMAs."""
    func = requantize()
    a_buf, b_buf, c_buf, _ = func.args
    assert "fp-contract=off" in kernel_source(func, "llvm")
    a, b, c = _fma_flips(16)
    run_both(func, [a, b, c, np.zeros(16, np.uint8)])
    plain = Buffer("P", (16,), F32)
    fused = PrimFunc("fma", (a_buf, b_buf, c_buf, plain), loop(v, 16, Store(
        plain, (v,), Load(a_buf, (v,)) * Load(b_buf, (v,)) + Load(c_buf, (v,))),
        ForKind.VECTORIZED))  # fmt: skip
    assert "fp-contract" not in kernel_source(fused, "llvm")


def test_a_unit_reuses_its_kernels_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuning builder renders each candidate alone, then the batch as one unit:
    the unit takes the parts rendered a moment before (one rendering per kernel), and
    is the same text as rendered afresh. Another function, even an equal one, is
    rendered for itself."""
    generated = [generate_kernel(func, "llvm") for func in (elementwise(), matmul())]
    funcs = [kernel.func for kernel in generated]
    rendered: list[str] = []
    original = CRenderer.parts

    def counting(self: CRenderer) -> object:
        rendered.append(self.func.name)
        return original(self)

    monkeypatch.setattr(CRenderer, "parts", counting)
    unit = render_c_unit(funcs)
    assert rendered == []
    c_module._RECENT_PARTS.clear()
    assert render_c_unit(funcs) == unit
    assert rendered == [func.name for func in funcs]
    twin = dataclasses.replace(funcs[0])
    assert twin == funcs[0] and twin is not funcs[0]
    assert render_c(twin) == generated[0].source
    assert rendered[-1] == twin.name and len(rendered) == 3


def test_kernels_share_a_translation_unit(tmp_path: Path) -> None:
    """`compile_unit`: two kernels in one translation unit (the tuning builder's
    batches), each written as alone, the helpers they share once; each runs from the
    one library as the interpreter does. A kernel that rounds floats (compiled without
    contraction) shares no unit with one that does not."""
    funcs = [elementwise(), matmul()]
    generated = [generate_kernel(func, "llvm") for func in funcs]
    unit = render_c_unit([kernel.func for kernel in generated])
    assert unit is not None and unit.count("#include <math.h>") == 1
    assert unit.count("static inline float32x16 ember_max_float32x16(") == 1
    for kernel in generated:
        function = kernel.source[kernel.source.index(f"void {kernel.name}(") :]
        assert function in unit
    library = compile_unit(generated, "llvm", tmp_path / "unit.so")
    assert library == tmp_path / "unit.so"
    for func, kernel in zip(funcs, generated, strict=True):
        arrays = inputs_for(func)
        expected = [a.copy() for a in arrays]
        run_func(func, expected)
        Kernel(func, library, packed_symbol=kernel.packed_symbol)(*arrays)
        for got, want in zip(arrays, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    rounding = generate_kernel(requantize(), "llvm")
    assert render_c_unit([generated[0].func, rounding.func]) is None
    assert compile_unit([generated[0], rounding], "llvm", tmp_path / "mixed.so") is None
    assert "fp-contract=off" in str(render_c_unit([rounding.func, rounding.func]))
