"""Toolchain: compiler choice and flags, the build cache, loading and calling kernels
with checked arguments, and aarch64 kernels cross-compiled and run under qemu."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from compilers import host_compilers

from ember import toolchain
from ember.backend import Kernel, build_kernel, kernel_source
from ember.codegen import output_args
from ember.errors import EmberError, KernelCallError, ToolchainError
from ember.loop.ir import Buffer, For, ForKind, Load, PrimFunc, Stmt, Store, seq
from ember.target import Target, host_triple
from ember.te.expr import Const, Var, call, maximum, select
from ember.toolchain import compile_executable, compile_shared, find_compiler

F32 = "float32"
i, k, v = Var("i"), Var("k"), Var("v")
AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"


@pytest.fixture(autouse=True)
def kernel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    yield tmp_path


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL) -> For:
    return For(var, Const(extent), kind, body)


def scale_kernel(n: int = 16, name: str = "scale") -> PrimFunc:
    a, c = Buffer("A", (n,), F32), Buffer("C", (n,), F32)
    body = loop(i, n, Store(c, (i,), Load(a, (i,)) * 2.0), ForKind.PARALLEL)
    return PrimFunc(name, (a, c), body)


def test_host_compiler_flags() -> None:
    compiler = find_compiler(Target("llvm"))
    argv = compiler.argv("-c", "x.c")
    for flag in ("-O3", "-fopenmp", "-fPIC", "-std=c11", "-march=native"):
        assert flag in argv
    assert "-ffast-math" not in argv
    assert compiler.version
    assert "-march=znver4" in find_compiler("llvm -mcpu=znver4").flags


def test_flags_follow_the_compiler_family() -> None:
    """GCC's and clang's spellings of the loop vectorizer and of contraction (clang's
    `fast` would ignore the pragma that keeps rounding kernels exact)."""
    gcc = toolchain.Compiler(("gcc",), (), "gcc (Debian 12.2.0-14) 12.2.0")
    clang = toolchain.Compiler(("clang-14",), (), "Debian clang version 14.0.6")
    ndk = toolchain.Compiler(("cc",), (), "Android (11349228) clang version 18.0.2")
    assert gcc.family == "gcc" and clang.family == "clang" and ndk.family == "clang"
    assert (gcc.identity, clang.identity, ndk.identity) == ("gcc 12", "clang 14", "clang 18")
    # What tuning records note: the major version, not a packager's number before it.
    for line, identity in [
        ("gcc (crosstool-NG 1.25.0) 12.2.0", "gcc 12"),
        ("gcc (Buildroot 2021.02.4) 10.3.0", "gcc 10"),
        ("x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0", "gcc 12"),
        ("gcc (GCC) 13", "gcc 13"),
        ("Ubuntu clang version 19.1.1 (1ubuntu1)", "clang 19"),
        ("Apple clang version 15.0.0 (clang-1500.3.9.4)", "clang 15"),
        ("", "gcc"),
    ]:
        assert toolchain.Compiler(("cc",), (), line).identity == identity, line
    assert {"-ffp-contract=fast", "-fno-tree-loop-vectorize"} <= set(gcc.argv("-c"))
    for compiler in (clang, ndk):
        argv = compiler.argv("-c")
        assert {"-ffp-contract=on", "-fno-vectorize"} <= set(argv)
        assert not any("tree" in flag or flag == "-ffp-contract=fast" for flag in argv)


def test_cross_flags_come_from_cpu_and_attributes() -> None:
    flags = toolchain._target_flags
    assert flags(Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon")) == (
        "-mcpu=cortex-a72",
        "-fno-schedule-insns",  # why: toolchain._target_flags; checked in test_neon_disassembly
    )
    assert flags(Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod")) == (
        "-march=armv8.2-a+dotprod",  # GCC's arm_neon.h has vdotq_s32 from v8.2 only
        "-fno-schedule-insns",
    )
    assert flags(Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,-sve")) == (
        "-march=armv8-a+nosve",
        "-fno-schedule-insns",
    )
    assert flags(Target("llvm -mtriple=x86_64-linux-gnu -mattr=+avx2,-avx512f")) == (
        "-mavx2",
        "-mno-avx512f",
    )
    # 32-bit ARM: NEON through -mfpu, and GCC uses it for float vectors only with
    # -funsafe-math-optimizations (toolchain._arm32_flags), a compile-only flag.
    assert flags(Target("llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon")) == (
        "-march=armv7-a", "-mfpu=neon-vfpv4", "-mfloat-abi=hard", "-fno-schedule-insns",
    )  # fmt: skip
    assert flags(Target("llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72"))[:2] == (
        "-mcpu=cortex-a72", "-mfpu=neon-fp-armv8"
    )  # fmt: skip
    assert flags(Target("llvm -mtriple=armv7l-linux-gnueabihf -mattr=-neon"))[1] == "-mfpu=vfpv4"
    android = flags(Target("llvm -mtriple=aarch64-linux-android"))
    assert "-static-openmp" in android and "-fno-schedule-insns" not in android  # clang


def test_missing_cross_compiler_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ToolchainError) as error:
        find_compiler(Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon"))
    assert "aarch64-linux-gnu-gcc" in str(error.value)
    assert "apt-get install gcc-aarch64-linux-gnu" in str(error.value)
    with pytest.raises(ToolchainError, match=r"install gcc-arm-linux-gnueabihf\)"):
        find_compiler(Target("llvm -mtriple=armv7l-linux-gnueabihf"))
    with pytest.raises(ToolchainError, match="install gcc"):
        find_compiler(Target("llvm"))


def fake_compiler(directory: Path, name: str, version: str, openmp: str = "works") -> None:
    """A script named `name` that prints `version` for --version; a build (the OpenMP
    probe) fails if `openmp` is "missing", and writes a program that fails to run if it
    is "unloadable" (a runtime the loader does not find), one that runs if "works"."""
    exit_code = {"works": 0, "unloadable": 127}[openmp] if openmp != "missing" else None
    build = (
        "exit 1"
        if exit_code is None
        else 'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        f'printf "#!/bin/sh\\nexit {exit_code}\\n" > "$out"; command -p chmod +x "$out"'
    )
    script = directory / name
    script.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}\n{build}\n'
    )
    script.chmod(0o755)


@pytest.fixture
def forget_compilers() -> Iterator[None]:
    """Fake compilers' version lines stay out of the cache later tests read."""
    yield
    toolchain._compiler_version.cache_clear()
    toolchain._default_host_compiler.cache_clear()


CLANG = "Debian clang version {}.1.7"


@pytest.mark.parametrize(
    ("compilers", "arch", "expected"),
    [
        # For native x86-64 code, the newest clang from 19 on whose OpenMP works first.
        ({"gcc": 12, "clang-19": 19, "clang-20": 20}, "x86_64", "clang-20"),
        ({"gcc": 12, "clang-19": 19, "clang-20": (20, "missing")}, "x86_64", "clang-19"),
        ({"gcc": 12, "clang-19": 19, "clang-20": (20, "unloadable")}, "x86_64", "clang-19"),
        ({"gcc": 12, "clang": 19}, "x86_64", "clang"),
        # Older or OpenMP-less clangs, portable code, and other hosts get gcc.
        ({"gcc": 12, "clang-18": 18, "clang": 14}, "x86_64", "gcc"),
        ({"gcc": 12, "clang-19": (19, "missing")}, "x86_64", "gcc"),
        ({"gcc": 12, "clang-19": 19}, "portable", "gcc"),
        ({"gcc": 12, "clang-19": 19}, "aarch64", "gcc"),
        # With no gcc, any clang named clang, then cc.
        ({"clang": 14, "cc": 12}, "x86_64", "clang"),
        ({"cc": 12}, "x86_64", "cc"),
    ],
)
def test_host_compiler_preference(
    compilers: dict[str, int | tuple[int, str]], arch: str, expected: str, tmp_path: Path
) -> None:
    for name, spec in compilers.items():
        major, openmp = spec if isinstance(spec, tuple) else (spec, "works")
        version = CLANG.format(major) if "clang" in name else f"gcc {major}.2.0"
        fake_compiler(tmp_path, name, version, openmp)
    assert toolchain._default_host_compiler(arch, str(tmp_path)) == (expected,)


def test_a_clang_that_does_not_run_is_passed_over(tmp_path: Path) -> None:
    """A file named clang that cannot run (here, no interpreter) costs nothing: gcc."""
    (tmp_path / "clang-19").write_text("#!/nonexistent/interpreter\n")
    (tmp_path / "clang-19").chmod(0o755)
    fake_compiler(tmp_path, "gcc", "gcc 12.2.0")
    assert toolchain._default_host_compiler("x86_64", str(tmp_path)) == ("gcc",)


@pytest.mark.usefixtures("forget_compilers")
def test_cc_and_the_target_choose_the_compiler(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_compiler(tmp_path, "clang-19", CLANG.format(19))
    fake_compiler(tmp_path, "gcc", "gcc 12.2.0")
    fake_compiler(tmp_path, "my-cc", "gcc 12.2.0")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", "my-cc")
    assert find_compiler(Target("llvm")).command == ("my-cc",)
    monkeypatch.delenv("CC")
    if Target("llvm").target_arch != "x86_64":
        assert find_compiler(Target("llvm")).command == ("gcc",)
        return
    assert find_compiler(Target("llvm")).command == ("clang-19",)
    # Code for other machines keeps gcc: clang's would need LLVM's libomp there.
    assert find_compiler(Target("llvm -mcpu=x86-64-v3")).command == ("gcc",)


@pytest.mark.parametrize("compiler", host_compilers())
def test_each_host_compiler_builds_kernels_that_match_numpy(
    compiler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row padding, out[i, :] = 2 * A[i - 1, :] for i >= 1, else 0, in a parallel loop
    of vector rows: a guarded vector load (the C renderer's per-architecture helper),
    built by each host compiler, run, and compared with numpy."""
    monkeypatch.setenv("CC", compiler)
    a, out = Buffer("A", (3, 8), F32), Buffer("out", (4, 8), F32)
    value = select(i >= 1, Load(a, (i - 1, v)), Const(0.0, F32)) * 2.0
    body = loop(i, 4, loop(v, 8, Store(out, (i, v), value), ForKind.VECTORIZED), ForKind.PARALLEL)
    kernel = build_kernel(PrimFunc("pad_rows", (a, out), body), "llvm")
    rows = np.arange(24, dtype=np.float32).reshape(3, 8)
    result = np.full((4, 8), np.nan, np.float32)
    kernel(rows, result)
    np.testing.assert_array_equal(result, np.concatenate([np.zeros((1, 8), np.float32), rows]) * 2)


def test_android_needs_ember_ndk_cc(monkeypatch: pytest.MonkeyPatch) -> None:
    target = Target("llvm -mtriple=aarch64-linux-android -mattr=+neon")
    monkeypatch.delenv("EMBER_NDK_CC", raising=False)
    with pytest.raises(ToolchainError, match="set EMBER_NDK_CC"):
        find_compiler(target)
    monkeypatch.setenv("EMBER_NDK_CC", "/nonexistent/aarch64-linux-android28-clang")
    with pytest.raises(ToolchainError, match="is not an executable"):
        find_compiler(target)


def test_cuda_and_cross_targets_cannot_be_built_for_this_machine() -> None:
    with pytest.raises(ToolchainError, match="CPU target"):
        find_compiler("cuda -arch=sm_90")
    foreign = "llvm -mtriple=riscv64-linux-gnu" if host_triple()[:3] != "ris" else AARCH64
    with pytest.raises(ToolchainError, match="does not run on this machine"):
        build_kernel(scale_kernel(), foreign)


def test_second_build_hits_the_cache(monkeypatch: pytest.MonkeyPatch, kernel_cache: Path) -> None:
    source = kernel_source(scale_kernel())
    first = compile_shared([source], "llvm")
    assert first.parent == kernel_cache / "kernels" and first.suffix == ".so"

    def no_compiler(*args: object) -> None:
        raise AssertionError("the compiler ran again")

    monkeypatch.setattr(toolchain, "_run", no_compiler)
    assert compile_shared([source], "llvm") == first
    assert list((kernel_cache / "kernels").iterdir()) == [first]  # no temporaries left


def test_several_sources_compile_in_parallel_into_one_library() -> None:
    funcs = [scale_kernel(16), scale_kernel(32, "scale_32")]
    path = compile_shared([kernel_source(f) for f in funcs], "llvm")
    for func, n in zip(funcs, (16, 32), strict=True):
        a, c = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
        Kernel(func, path)(a, c)
        np.testing.assert_array_equal(c, a * 2)


def test_compile_errors_keep_the_source(kernel_cache: Path) -> None:
    with pytest.raises(ToolchainError) as error:
        compile_shared(["void broken( {"], "llvm")
    message = str(error.value)
    assert "compiling generated code failed" in message
    kept = next((kernel_cache / "kernels" / "failed").iterdir())
    assert str(kept) in message and kept.read_text() == "void broken( {"


def test_kernel_arguments_are_checked() -> None:
    func = scale_kernel()
    kernel = build_kernel(func)
    a, c = np.ones(16, np.float32), np.zeros(16, np.float32)
    kernel(a, c)
    np.testing.assert_array_equal(c, 2 * a)
    cases = [
        ((a,), "takes 2 arrays (A, C), got 1"),
        (
            (a, np.zeros(15, np.float32)),
            "expected a float32 array of shape (16,), got a float32 array of shape (15,)",
        ),
        ((a.astype(np.float64), c), "argument 0 ('A')"),
        ((a, [0.0] * 16), "must be a NumPy array, not list"),
        ((np.ones(32, np.float32)[::2], c), "not C-contiguous"),
        ((a, a), "overlaps argument 0"),
    ]
    readonly = np.zeros(16, np.float32)
    readonly.flags.writeable = False
    cases.append(((a, readonly), "read-only"))
    for args, message in cases:
        with pytest.raises(KernelCallError) as error:
            kernel(*args)  # type: ignore[arg-type]
        assert message in str(error.value)
        assert isinstance(error.value, EmberError)


def test_loading_a_library_without_the_kernel_is_an_error() -> None:
    path = compile_shared([kernel_source(scale_kernel())], "llvm")
    other = PrimFunc("other", scale_kernel().args, scale_kernel().body)
    with pytest.raises(KernelCallError, match="no entry point other_packed"):
        Kernel(other, path)


# -- aarch64: cross-compile, link a static driver, run under qemu ----------------------


def _cross_tools_missing() -> str | None:
    missing = [tool for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64") if not shutil.which(tool)]
    if missing:
        return (
            f"{' and '.join(missing)} not installed: `make test` installs gcc-aarch64-linux-gnu "
            "and qemu-user when run as root with apt-get"
        )
    return None


def driver_source(func: PrimFunc) -> str:
    """A C main that reads every argument buffer from argv[1], calls the kernel and
    writes every buffer to argv[2]."""
    from ember.codegen.c import entry_symbols

    _, packed = entry_symbols(func.name)
    sizes = ", ".join(str(b.size * np.dtype(b.dtype).itemsize) for b in func.args)
    count = len(func.args)
    return f"""\
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int32_t {packed}(void* const* args, int32_t num_args);
static const size_t sizes[{count}] = {{{sizes}}};
int main(int argc, char** argv) {{
  if (argc != 3) return 2;
  void* args[{count}];
  FILE* in = fopen(argv[1], "rb");
  if (!in) return 3;
  for (int n = 0; n < {count}; ++n) {{
    args[n] = aligned_alloc(64, (sizes[n] + 63) / 64 * 64);
    if (fread(args[n], 1, sizes[n], in) != sizes[n]) return 4;
  }}
  fclose(in);
  int32_t status = {packed}(args, {count});
  FILE* out = fopen(argv[2], "wb");
  for (int n = 0; n < {count}; ++n) fwrite(args[n], 1, sizes[n], out);
  fclose(out);
  return status;
}}
"""


def run_under_qemu(func: PrimFunc, arrays: list[np.ndarray], tmp_path: Path) -> list[np.ndarray]:
    executable = compile_executable(
        [kernel_source(func), driver_source(func)], AARCH64, static=True
    )
    inputs, outputs = tmp_path / "in.bin", tmp_path / "out.bin"
    inputs.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))
    subprocess.run(
        [
            "qemu-aarch64",
            "-L",
            "/usr/aarch64-linux-gnu",
            str(executable),
            str(inputs),
            str(outputs),
        ],
        check=True,
        timeout=120,
    )
    data, results, offset = outputs.read_bytes(), [], 0
    for array in arrays:
        results.append(np.frombuffer(data, array.dtype, array.size, offset).reshape(array.shape))
        offset += array.nbytes
    return results


def aarch64_kernels() -> list[PrimFunc]:
    """An elementwise kernel with math, and a matmul with a vector accumulator."""
    a, b, c = Buffer("A", (4, 8), F32), Buffer("B", (8,), F32), Buffer("C", (4, 8), F32)
    value = call("tanh", maximum(Load(a, (i, v)) + Load(b, (v,)), Const(0.0, F32)))
    elementwise = PrimFunc(
        "add_relu_tanh",
        (a, b, c),
        loop(i, 4, loop(v, 8, Store(c, (i, v), value), ForKind.VECTORIZED), ForKind.PARALLEL),
    )
    x, w, out = Buffer("X", (3, 5), F32), Buffer("W", (5, 4), F32), Buffer("Y", (3, 4), F32)
    update = Store(out, (i, v), Load(out, (i, v)) + Load(x, (i, k)) * Load(w, (k, v)))
    body = seq(Store(out, (i, v), Const(0.0, F32)), loop(k, 5, update))
    matmul = PrimFunc("matmul", (x, w, out), loop(i, 3, loop(v, 4, body, ForKind.VECTORIZED)))
    return [elementwise, matmul]


@pytest.mark.skipif(_cross_tools_missing() is not None, reason=str(_cross_tools_missing()))
@pytest.mark.parametrize("func", aarch64_kernels(), ids=lambda f: f.name)
def test_aarch64_kernels_run_under_qemu(func: PrimFunc, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    outputs = output_args(func)
    arrays = [
        np.zeros(b.shape, b.dtype) if b in outputs else rng.standard_normal(b.shape).astype(b.dtype)
        for b in func.args
    ]
    results = run_under_qemu(func, arrays, tmp_path)
    if func.name == "matmul":
        expected = arrays[0] @ arrays[1]
    else:
        expected = np.tanh(np.maximum(arrays[0] + arrays[1], 0))
    np.testing.assert_allclose(results[-1], expected, rtol=1e-5, atol=1e-6)
    source = kernel_source(func)
    assert "float32x" in source  # really vector code, not a scalar fallback


def test_32_bit_arm_libraries_leave_the_process_floating_point_alone() -> None:
    """-funsafe-math-optimizations (32-bit NEON) only compiles: at a link GCC 12 adds
    crtfastmath.o, whose constructor would set flush-to-zero for every process that
    loads the library. The code still uses NEON's quad-register FMA."""
    target = Target("llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon")
    try:
        compiler = find_compiler(target)
    except ToolchainError as error:
        pytest.skip(f"no 32-bit ARM cross compiler: {error}")
    assert compiler.compile_flags == ("-funsafe-math-optimizations",)
    assert "-funsafe-math-optimizations" not in compiler.argv("-shared")
    source = """
typedef float float32x4 __attribute__((vector_size(16)));
void axpy(float32x4* restrict y, const float32x4* restrict x, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] += (float32x4){a, a, a, a} * x[i];
}
"""
    single = toolchain.compile_shared([source], target)
    linked = toolchain.link_shared([toolchain.compile_object(source, target)], target)
    for library in (single, linked):
        symbols = subprocess.run(
            ["arm-linux-gnueabihf-objdump", "-d", str(library)],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
        assert "set_fast_math" not in symbols
        assert re.search(r"vfma\.f32\s+q", symbols), "no NEON quad-register FMA"
