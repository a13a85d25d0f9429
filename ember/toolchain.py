"""Compilers for generated C, chosen from the Target; a content-hash build cache; and
loading a built kernel as a Python callable over NumPy arrays.

    kernel = build_kernel(func, Target("llvm"))   # simplify, vectorize, render, compile
    kernel(a, b, out)                              # checks shapes/dtypes, calls via ctypes

Compiler choice: for this machine `$CC`, else gcc, clang or cc; for
`-mtriple=aarch64-linux-gnu` (any `<triple>`) the cross compiler `<triple>-gcc`; for
Android triples the NDK clang named by `$EMBER_NDK_CC`. A missing one raises a
ToolchainError saying what to install.

Flags: `-O3 -std=c11 -fPIC -fopenmp`, `-march=native` for this machine (or the
target's -mcpu/-mattr). Deliberately no `-ffast-math`: kernels must keep IEEE
semantics (NaN/inf, no reassociation of reductions) to match the reference
interpreter bit for bit where it can; `-ffp-contract=fast` does allow fused
multiply-add, a rounding difference far inside the fp32 test tolerance and the main
source of FLOPs on every target we care about.

Builds are cached under `cache_dir()/kernels` by a hash of the sources, the flags and
the compiler's version. Each build happens in a private temporary directory and is
renamed into place, so a concurrent process never sees a half-written library.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ember.codegen.c import entry_symbols, render_c
from ember.codegen.renderer import output_args
from ember.config import cache_dir, debug_enabled
from ember.errors import KernelCallError, ToolchainError
from ember.loop.ir import PrimFunc
from ember.loop.unroll import unroll_loops
from ember.loop.vectorize import vectorize
from ember.target import Target, host_cpu_features, host_triple

# -fno-tree-loop-vectorize: Ember vectorizes explicitly (vector types for loops a
# schedule marks vectorized), so the compiler's own loop vectorizer adds little, and
# GCC 12's miscompiles a loop nest that reads a per-iteration local copy under a guard
# (if-conversion in an outer-loop-vectorized nest; found by the compiled property test
# in tests/schedule/test_compiled_schedules.py). Straight-line (SLP) vectorization of
# unrolled register tiles stays on.
BASE_FLAGS = (
    "-O3",
    "-std=c11",
    "-fPIC",
    "-ffp-contract=fast",
    "-fopenmp",
    "-fno-tree-loop-vectorize",
)
# Vector helpers pass wide vectors by value; they are static inline, so the ABI notes
# GCC prints about it do not concern us.
QUIET_FLAGS = ("-Wno-psabi",)


@dataclass(frozen=True, slots=True)
class Compiler:
    """A C compiler invocation for one target: `command` (the compiler, maybe with
    fixed arguments), target-specific `flags`, and its version (part of cache keys)."""

    command: tuple[str, ...]
    flags: tuple[str, ...]
    version: str

    def argv(self, *args: str) -> list[str]:
        return [*self.command, *BASE_FLAGS, *QUIET_FLAGS, *self.flags, *args]


def find_compiler(target: Target | str) -> Compiler:
    """The compiler for `target`, or a ToolchainError saying what to install."""
    target = _as_target(target)
    if not target.is_cpu:
        raise ToolchainError(
            f"target {target} is not built by a C compiler yet; use a CPU target "
            "('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
        )
    command = _compiler_command(target)
    return Compiler(command, _target_flags(target), _compiler_version(command))


def _compiler_command(target: Target) -> tuple[str, ...]:
    if target.is_android:
        configured = os.environ.get("EMBER_NDK_CC", "")
        command = tuple(shlex.split(configured))
        if not command or shutil.which(command[0]) is None:
            raise ToolchainError(
                f"target {target} is an Android triple: set EMBER_NDK_CC to the Android "
                "NDK's clang for it, e.g. EMBER_NDK_CC=$NDK/toolchains/llvm/prebuilt/"
                "linux-x86_64/bin/aarch64-linux-android28-clang"
                + (f" (EMBER_NDK_CC={configured!r} is not an executable)" if configured else "")
            )
        return command
    if target.is_host:
        configured = os.environ.get("CC", "")
        if configured:
            command = tuple(shlex.split(configured))
            if shutil.which(command[0]) is None:
                raise ToolchainError(f"CC={configured!r} is not an executable: fix or unset CC")
            return command
        for name in ("gcc", "clang", "cc"):
            if shutil.which(name):
                return (name,)
        raise ToolchainError(
            "no C compiler found on PATH: install gcc (apt-get install gcc) or set CC"
        )
    triple = target.triple
    cross = f"{triple}-gcc"
    if shutil.which(cross) is None:
        raise ToolchainError(
            f"no cross compiler for target {target}: {cross} is not on PATH; install it "
            f"(apt-get install gcc-{triple})"
        )
    return (cross,)


def _target_flags(target: Target) -> tuple[str, ...]:
    """-march/-mcpu and feature flags for the target's architecture."""
    flags = list(_arch_flags(target))
    if target.is_android:
        flags.append("-static-openmp")  # Android ships no libomp.so
    return tuple(flags)


def _arch_flags(target: Target) -> tuple[str, ...]:
    cpu = target.mcpu
    if target.target_arch == "aarch64":
        # NEON is part of the AArch64 baseline; other features are -march/-mcpu suffixes.
        extras = "".join(
            f"+{a[1:]}" if a[0] == "+" else f"+no{a[1:]}" for a in target.mattr if a[1:] != "neon"
        )
        if target.is_native:
            return ("-mcpu=native",) if not extras else (f"-march=native{extras}",)
        if cpu:
            return (f"-mcpu={cpu}{extras}",)
        return (f"-march=armv8-a{extras}",) if extras else ()
    if target.target_arch == "x86_64":
        march = ("-march=native",) if target.is_native else (f"-march={cpu}",) if cpu else ()
        return (*march, *(f"-m{a[1:]}" if a[0] == "+" else f"-mno-{a[1:]}" for a in target.mattr))
    return (f"-mcpu={cpu}",) if cpu else ()


@functools.cache
def _compiler_version(command: tuple[str, ...]) -> str:
    try:
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as error:
        raise ToolchainError(f"cannot run compiler {command[0]}: {error}") from error
    return (result.stdout or result.stderr).splitlines()[0] if result.returncode == 0 else ""


def _as_target(target: Target | str) -> Target:
    return target if isinstance(target, Target) else Target(target)


# -- building -------------------------------------------------------------------------


def compile_shared(sources: Sequence[str], target: Target | str) -> Path:
    """Compile C sources into one shared library for `target`; cached by content."""
    return _build(sources, find_compiler(target), ("-shared",), ".so")


def compile_executable(
    sources: Sequence[str], target: Target | str, *, static: bool = False
) -> Path:
    """Compile C sources (one with `main`) into an executable; `static` links libc and
    OpenMP in, so it runs under qemu-user or on a board without our libraries."""
    return _build(sources, find_compiler(target), ("-static",) if static else (), "")


def compile_object(source: str, target: Target | str, flags: Sequence[str] = ()) -> Path:
    """Compile one C source into an object file for `target`, to link with others by
    `link_shared`; cached by content, so an unchanged kernel is never recompiled."""
    return _build([source], find_compiler(target), ("-c", *flags), ".o")


def link_shared(objects: Sequence[Path], target: Target | str) -> Path:
    """Link object files (from `compile_object`) into one shared library for
    `target`; cached by the objects' contents."""
    if not objects:
        raise ValueError("link_shared needs at least one object file")
    compiler = find_compiler(target)
    digest = hashlib.sha256()
    for part in (compiler.version, *compiler.argv("-shared")):
        digest.update(part.encode() + b"\0")
    for path in objects:
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    final = _kernels_dir() / f"{digest.hexdigest()[:40]}.so"
    if final.exists():
        return final
    work = Path(tempfile.mkdtemp(prefix=f"{final.stem}-", dir=_kernels_dir()))
    try:
        output = work / "out.so"
        _run(compiler, [*map(str, objects), "-shared", "-o", str(output), "-lm"], [])
        os.replace(output, final)  # atomic, as in _build
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _kernels_dir() -> Path:
    path = cache_dir() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _build(
    sources: Sequence[str], compiler: Compiler, link_flags: tuple[str, ...], suffix: str
) -> Path:
    if not sources:
        raise ValueError("compile needs at least one source")
    digest = hashlib.sha256()
    argv = compiler.argv(*link_flags)
    # -march=native code differs per CPU; a cache shared between machines must not mix.
    cpu = sorted(host_cpu_features()) if any("native" in flag for flag in argv) else []
    for part in (compiler.version, *argv, *cpu, *sources):
        digest.update(part.encode())
        digest.update(b"\0")
    directory = _kernels_dir()
    final = directory / f"{digest.hexdigest()[:40]}{suffix}"
    if final.exists():
        return final
    work = Path(tempfile.mkdtemp(prefix=f"{final.stem}-", dir=directory))
    try:
        files = [work / f"source{i}.c" for i in range(len(sources))]
        for file, source in zip(files, sources, strict=True):
            file.write_text(source)
        output = work / f"out{suffix}"
        libraries = () if "-c" in link_flags else ("-lm",)  # objects link nothing yet
        if len(files) == 1:  # one compiler process does compile and link
            _run(compiler, [*map(str, files), *link_flags, "-o", str(output), *libraries], files)
        else:
            objects = _compile_objects(compiler, files)
            _run(compiler, [*map(str, objects), *link_flags, "-o", str(output), *libraries], files)
        os.replace(output, final)  # atomic: readers see no file or a whole one
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _compile_objects(compiler: Compiler, files: list[Path]) -> list[Path]:
    objects = [file.with_suffix(".o") for file in files]
    workers = min(len(files), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = [
            pool.submit(_run, compiler, ["-c", str(file), "-o", str(obj)], [file])
            for file, obj in zip(files, objects, strict=True)
        ]
        for job in jobs:
            job.result()
    return objects


def _run(compiler: Compiler, args: list[str], sources: list[Path]) -> None:
    argv = compiler.argv(*args)
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return
    kept = _keep_failed_sources(sources)
    errors = "\n".join(result.stderr.splitlines()[:40])
    raise ToolchainError(
        f"compiling generated code failed ({shlex.join(argv[:1])} exited with "
        f"{result.returncode}); the source is kept at {', '.join(map(str, kept))}. "
        f"This is a bug in Ember's code generator or the toolchain setup; please report "
        f"it with that file.\n{errors}"
    )


def _keep_failed_sources(sources: list[Path]) -> list[Path]:
    failed = _kernels_dir() / "failed"
    failed.mkdir(exist_ok=True)
    kept = []
    for source in sources:
        if source.suffix == ".c" and source.exists():
            target = failed / f"{source.parent.name}-{source.name}"
            shutil.copyfile(source, target)
            kept.append(target)
    return kept


# -- loading and calling ----------------------------------------------------------------


class Kernel:
    """A compiled kernel: call it with one C-contiguous NumPy array per buffer argument
    of its PrimFunc, in order; it writes its outputs in place."""

    def __init__(self, func: PrimFunc, path: Path, source: str | None = None) -> None:
        self.func = func
        self.path = Path(path)
        self.source = source
        self.outputs = output_args(func)
        self._library = ctypes.CDLL(str(self.path))
        _, packed = entry_symbols(func)
        try:
            self._entry = getattr(self._library, packed)
        except AttributeError:
            raise KernelCallError(
                f"{self.path} has no entry point {packed}: it was not built from "
                f"kernel '{func.name}'"
            ) from None
        self._entry.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)
        self._entry.restype = ctypes.c_int32

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check_args(arrays)
        pointers = (ctypes.c_void_p * max(len(arrays), 1))(*(a.ctypes.data for a in arrays))
        status = self._entry(pointers, len(arrays))
        if status != 0:
            raise KernelCallError(f"kernel '{self.func.name}' returned error {status}")

    def check_args(self, arrays: Sequence[np.ndarray]) -> None:
        func = self.func
        if len(arrays) != len(func.args):
            names = ", ".join(b.name for b in func.args)
            raise KernelCallError(
                f"kernel '{func.name}' takes {len(func.args)} arrays ({names}), got {len(arrays)}"
            )
        for position, (buffer, array) in enumerate(zip(func.args, arrays, strict=True)):
            where = f"argument {position} ('{buffer.name}') of kernel '{func.name}'"
            if not isinstance(array, np.ndarray):
                raise KernelCallError(f"{where} must be a NumPy array, not {type(array).__name__}")
            expected = f"{buffer.dtype} array of shape {tuple(buffer.shape)}"
            if array.dtype != np.dtype(buffer.dtype) or array.shape != tuple(buffer.shape):
                raise KernelCallError(
                    f"{where}: expected a {expected}, got a {array.dtype} array of shape "
                    f"{array.shape}"
                )
            if not array.flags.c_contiguous:
                raise KernelCallError(
                    f"{where} is not C-contiguous: pass np.ascontiguousarray(...) of it"
                )
            if buffer in self.outputs:
                self._check_output(where, position, array, arrays)

    def _check_output(
        self, where: str, position: int, array: np.ndarray, arrays: Sequence[np.ndarray]
    ) -> None:
        if not array.flags.writeable:
            raise KernelCallError(f"{where} is an output but the array is read-only")
        for other_position, other in enumerate(arrays):
            if other_position != position and np.may_share_memory(array, other):
                raise KernelCallError(
                    f"{where} is an output and overlaps argument {other_position}: "
                    "kernels assume their arrays do not alias; pass a separate array"
                )


def load_kernel(path: Path | str, func: PrimFunc, source: str | None = None) -> Kernel:
    """Load a library built from `func`'s C source and return it as a callable."""
    return Kernel(func, Path(path), source)


def kernel_source(func: PrimFunc) -> str:
    """The C source `build_kernel` compiles: unroll, simplify, vectorize, render."""
    # Unroll first so simplify folds the unrolled loop variables into constant indices
    # (which the renderer's register promotion needs); simplify before vectorize so
    # index arithmetic is folded before it looks for affine (Ramp) forms; vectorize
    # itself folds what its Ramp algebra produces.
    func = unroll_loops(func)
    func = _simplify(func)
    func = vectorize(func)
    if debug_enabled():
        print(f"[ember] vectorized loop IR:\n{func}")
    source = render_c(func)
    if debug_enabled():
        print(f"[ember] C source:\n{source}")
    return source


def _simplify(func: PrimFunc) -> PrimFunc:
    from ember.loop.simplify import simplify

    return simplify(func)


def build_kernel(func: PrimFunc, target: Target | str = "llvm") -> Kernel:
    """Compile `func` for this machine and load it: the whole path from loop IR to a
    callable. Cross targets build with `compile_shared` and run on their device."""
    target = _as_target(target)
    if not target.is_host:
        raise ToolchainError(
            f"target {target} does not run on this machine ({host_triple()}): build it with "
            "compile_shared(...) and run the library on the device (or under qemu)"
        )
    source = kernel_source(func)
    return load_kernel(compile_shared([source], target), func, source)
