"""The C toolchain: compilers for generated C chosen from the Target, and a
content-hash build cache. The C backends (`ember.backend`) compile and link with it.

    path = compile_shared([source], Target("llvm"))          # cached by content
    path = compile_shared([source], target, output=my_path)  # uncached, into my_path
    obj = compile_object(source, target); lib = link_shared([obj, ...], target)

Compiler choice: for this machine `$CC`; else, for native x86-64 code, the newest
clang from 19 on with a working OpenMP (`PREFERRED_CLANG` says why); else gcc, clang
or cc; for
`-mtriple=aarch64-linux-gnu` (any `<triple>`) the cross compiler `<triple>-gcc`; for
Android triples the NDK clang named by `$EMBER_NDK_CC`. A missing one raises a
ToolchainError saying what to install.

Flags: `-O3 -std=c11 -fPIC -fopenmp`, `-march=native` for this machine (or the
target's -mcpu/-mattr). Deliberately no `-ffast-math`: kernels must keep IEEE
semantics (NaN/inf, no reassociation of reductions) to match the reference
interpreter bit for bit where it can; `-ffp-contract` (GCC's `fast`, clang's `on`)
does allow fused multiply-add, a rounding difference far inside the fp32 test
tolerance and the main source of FLOPs on every target we care about (kernels that
round floats to integers, a quantized model's requantization, turn it off:
`ember.codegen.c`). Flags that differ between GCC and clang follow the compiler's
`--version` (`Compiler.family`).

clang 19 (apt-get install clang-19 libomp-19-dev; `make test` and `make demo` install
it where they can) compiles Ember's kernels in about 60% of GCC's time, which shortens
tuning, where compiling candidates is most of the work; see BENCHMARKS.md. `CC=gcc`
keeps GCC.

Builds are cached under `cache_dir()/kernels` by a hash of the sources, the flags and
the compiler's version. Each build happens in a private temporary directory and is
renamed into place, so a concurrent process never sees a half-written library.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ember.config import cache_dir
from ember.device import host_cpu_count, host_cpu_features
from ember.errors import CompileError, ToolchainError
from ember.target import Target

# The loop vectorizer off (GCC's -fno-tree-loop-vectorize, clang's -fno-vectorize,
# `Compiler.argv`): Ember vectorizes explicitly (vector types for loops a
# schedule marks vectorized), so the compiler's own loop vectorizer adds little, and
# GCC 12's miscompiles a loop nest that reads a per-iteration local copy under a guard
# (if-conversion in an outer-loop-vectorized nest; found by the compiled property test
# in tests/schedule/test_compiled_schedules.py). Straight-line (SLP) vectorization of
# unrolled register tiles stays on.
# -fno-math-errno: no kernel reads errno, and without it `sqrtf` must stay a call that
# may set it, where with it a lane loop of `sqrtf` is one vector square root. Results
# are unchanged (IEEE semantics are kept; only errno is not written).
BASE_FLAGS = (
    "-O3",
    "-std=c11",
    "-fPIC",
    "-fopenmp",
    "-fno-math-errno",
)
# Contraction into fused multiply-adds (module docstring): GCC's "fast" fuses across
# statements and still obeys `#pragma GCC optimize("fp-contract=off")`; clang's "fast"
# ignores every pragma, so clang gets "on" (within a statement, where Ember's kernels
# write each multiply-add), which obeys `#pragma STDC FP_CONTRACT OFF`.
FAMILY_FLAGS = {
    "gcc": ("-ffp-contract=fast", "-fno-tree-loop-vectorize"),
    "clang": ("-ffp-contract=on", "-fno-vectorize"),
}
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
    # Flags for compiling C and never for a link (`-c` in the arguments): a link with
    # -funsafe-math-optimizations adds crtfastmath.o, whose constructor turns on
    # flush-to-zero in every process that loads the library (32-bit ARM).
    compile_flags: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """ "clang" or "gcc" (any other compiler is taken to accept GCC's flags)."""
        return "clang" if "clang" in self.version.lower() else "gcc"

    @property
    def identity(self) -> str:
        """Family and major version, "gcc 12" or "clang 19": what tuning records note,
        since a schedule tuned with one compiler can be slower built by another."""
        if self.family == "clang":
            version = _CLANG_VERSION.search(self.version)
        else:  # GCC's version follows its packager's note: "gcc (Debian 12.2.0-14) 12.2.0"
            version = re.search(r"(?:^|\)|\s)(\d+)(?:\.\d+)*\s*$", self.version)
        return f"{self.family} {version.group(1)}" if version else self.family

    def argv(self, *args: str) -> list[str]:
        compiling = self.compile_flags if "-c" in args else ()
        base = (*BASE_FLAGS, *FAMILY_FLAGS[self.family])
        return [*self.command, *base, *QUIET_FLAGS, *self.flags, *compiling, *args]


def find_compiler(target: Target | str) -> Compiler:
    """The compiler for `target`, or a ToolchainError saying what to install."""
    target = _as_target(target)
    if not target.is_cpu:
        raise ToolchainError(
            f"target {target} is not built by a C compiler yet; use a CPU target "
            "('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
        )
    command = _compiler_command(target)
    return Compiler(
        command, _target_flags(target), _compiler_version(command), _compile_only_flags(target)
    )


def compiler_identity(target: Target | str) -> str:
    """`Compiler.identity` of the compiler that builds for `target`, or "" where there
    is none (the builder then fails, saying why)."""
    try:
        return find_compiler(target).identity
    except (ToolchainError, subprocess.SubprocessError):
        return ""


def ndk_compiler(why: str) -> tuple[str, ...]:
    """The Android NDK's compiler command from `$EMBER_NDK_CC`, or a ToolchainError
    that starts with `why` (what needs it) and says how to set it."""
    configured = os.environ.get("EMBER_NDK_CC", "")
    command = tuple(shlex.split(configured))
    if not command or shutil.which(command[0]) is None:
        raise ToolchainError(
            f"{why}: set EMBER_NDK_CC to the Android NDK's clang for it, e.g. "
            "EMBER_NDK_CC=$NDK/toolchains/llvm/prebuilt/linux-x86_64/bin/"
            "aarch64-linux-android28-clang"
            + (f" (EMBER_NDK_CC={configured!r} is not an executable)" if configured else "")
        )
    return command


def _compiler_command(target: Target) -> tuple[str, ...]:
    if target.is_android:
        return ndk_compiler(f"target {target} is an Android triple")
    if target.is_host:
        configured = os.environ.get("CC", "")
        if configured:
            command = tuple(shlex.split(configured))
            if shutil.which(command[0]) is None:
                raise ToolchainError(f"CC={configured!r} is not an executable: fix or unset CC")
            return command
        # clang's kernels need its OpenMP runtime where they run: only for this machine.
        arch = target.target_arch if target.is_native else "portable"
        return _default_host_compiler(arch, os.environ.get("PATH", os.defpath))
    triple = _gnu_triple(target)
    cross = f"{triple}-gcc"
    if shutil.which(cross) is None:
        raise ToolchainError(
            f"no cross compiler for target {target}: {cross} is not on PATH; install it "
            f"(apt-get install gcc-{triple})"
        )
    return (cross,)


# When $CC is unset and the code is for this x86-64 machine (`-march=native`), the
# newest clang from PREFERRED_CLANG on (`clang` or `clang-NN` on PATH) whose OpenMP
# runtime links and loads comes first: clang 19 compiles Ember's kernels in about 0.6
# of GCC 12's time, which shortens tuning, where compiling candidates is most of the
# work, and its untuned networks ran in 0.975-1.022x GCC's time (BENCHMARKS.md, issue
# 19). clang 14 was slower than GCC on MobileNetV2 (1.03-1.07x); clangs after 19 were
# not measured and are taken as no worse. The kernels then need LLVM's libomp.so.5
# where they run, so code for other machines (a portable -mcpu, a board reached by RPC)
# keeps gcc, which needs libgomp.so.1; so do other hosts (an AArch64 one), where the
# code generator's choices were made against GCC's output
# (tests/schedule/test_neon_disassembly.py).
PREFERRED_CLANG = 19
_CLANG_NAME = re.compile(r"clang(-\d+)?")
_CLANG_VERSION = re.compile(r"clang version (\d+)")


@functools.cache
def _default_host_compiler(arch: str, path: str) -> tuple[str, ...]:
    """The host compiler when $CC is unset, for native code of an `arch` host
    ("portable" for code that may run elsewhere) and a PATH of `path`."""
    if arch == "x86_64":
        clang = preferred_clang(path)
        if clang is not None:
            return (clang,)
    for name in ("gcc", "clang", "cc"):
        if shutil.which(name, path=path):
            return (name,)
    raise ToolchainError("no C compiler found on PATH: install gcc (apt-get install gcc) or set CC")


def preferred_clang(path: str | None = None) -> str | None:
    """The name of the newest clang on `path` (default $PATH) from PREFERRED_CLANG on
    whose OpenMP programs build and load, or None (`make host-compiler` asks)."""
    path = os.environ.get("PATH", os.defpath) if path is None else path
    found: dict[str, tuple[int, str]] = {}  # name -> (major version, executable)
    for directory in path.split(os.pathsep):
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for name in names:
            if name in found or not _CLANG_NAME.fullmatch(name):
                continue
            executable = shutil.which(name, path=path)
            major = _clang_major(executable) if executable else None
            if executable and major is not None and major >= PREFERRED_CLANG:
                found[name] = (major, executable)
    for name in sorted(found, key=lambda name: (-found[name][0], name)):
        if _runs_openmp(found[name][1]):
            return name
    return None


def _clang_major(executable: str) -> int | None:
    """clang's major version from `--version`; None for anything else, or for a file
    named clang that does not run (a wrong-architecture binary, a hanging wrapper)."""
    try:
        version = _CLANG_VERSION.search(_compiler_version((executable,)))
    except (ToolchainError, subprocess.SubprocessError):
        return None
    return int(version.group(1)) if version else None


@functools.cache
def _runs_openmp(executable: str) -> bool:
    """Whether `executable` builds an OpenMP program that then runs: clang needs its
    runtime installed apart (apt-get install libomp-NN-dev), and a clang from a
    tarball may link one the loader then does not find."""
    with tempfile.TemporaryDirectory(prefix="ember-openmp-") as work:
        source, program = Path(work) / "probe.c", Path(work) / "probe"
        source.write_text(
            "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
        )
        try:
            built = subprocess.run(
                [executable, "-fopenmp", str(source), "-o", str(program)],
                capture_output=True,
                check=False,
                timeout=120,
            )
            if built.returncode != 0:
                return False
            ran = subprocess.run([str(program)], capture_output=True, check=False, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
    return ran.returncode == 0


def _gnu_triple(target: Target) -> str:
    """The triple GNU cross compilers are named by: 32-bit ARM's `armv7l-linux-
    gnueabihf` (what `uname -m` says on a Raspberry Pi) is Debian's
    `arm-linux-gnueabihf`."""
    rest = target.triple.partition("-")[2]
    if target.target_arch == "arm" and rest:
        return f"arm-{rest}"
    return target.triple


def _target_flags(target: Target) -> tuple[str, ...]:
    """-march/-mcpu and feature flags for the target's architecture."""
    flags = list(_arch_flags(target))
    if target.target_arch in ("aarch64", "arm") and not target.is_android:
        # GCC's scheduling before register allocation hoists every load of an unrolled
        # register tile ahead of its FMAs (all of an ARM FMA's operands are registers),
        # and the accumulators then go through the stack; without it a tile of up to
        # 28 accumulators stays in registers on AArch64 (read from objdump in
        # tests/schedule/test_neon_disassembly.py), and 32-bit ARM spills less. The
        # NDK's clang has no such pass.
        flags.append("-fno-schedule-insns")
    if target.is_android:
        flags.append("-static-openmp")  # Android ships no libomp.so
    return tuple(flags)


_ARMV82_FEATURES = frozenset({"dotprod", "i8mm", "fp16", "bf16"})


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
        # The dot product and int8 matrix multiply are ARMv8.2 features: GCC's
        # arm_neon.h refuses their intrinsics under armv8-a even with +dotprod.
        v82 = any(a[0] == "+" and a[1:] in _ARMV82_FEATURES for a in target.mattr)
        base = "armv8.2-a" if v82 else "armv8-a"
        return (f"-march={base}{extras}",) if extras else ()
    if target.target_arch == "x86_64":
        march = ("-march=native",) if target.is_native else (f"-march={cpu}",) if cpu else ()
        return (*march, *(f"-m{a[1:]}" if a[0] == "+" else f"-mno-{a[1:]}" for a in target.mattr))
    if target.target_arch == "arm":
        return _arm32_flags(target)
    return (f"-mcpu={cpu}",) if cpu else ()


# 32-bit-only ARM cores; every other -mcpu an ARM target names is an ARMv8 core.
_ARMV7_CORES = frozenset(
    ("cortex-a5", "cortex-a7", "cortex-a8", "cortex-a9", "cortex-a15", "cortex-a17")
)


def _arm32_flags(target: Target) -> tuple[str, ...]:
    """32-bit ARM (ARMv7-A and ARMv8 cores in AArch32), hard float. NEON is a
    floating-point unit choice (`-mfpu`): neon-vfpv4 (fused multiply-add, Cortex-A7
    and later) or, for an ARMv8 core, neon-fp-armv8.

    ARMv7 NEON flushes subnormals to zero, so GCC emits NEON float arithmetic for
    Ember's vector types only under -funsafe-math-optimizations; without it every
    vector FMA becomes four scalar VFP ones through memory (read from objdump). With
    it GCC may also reassociate and use reciprocals: results stay within the fp32
    tolerance of the tests, not bit for bit those of the other targets. The flag is a
    compile flag only (`_compile_only_flags`): given to a link, GCC 12 adds the
    startup code that sets flush-to-zero for the whole process loading the library."""
    cpu = target.mcpu
    armv8 = cpu is not None and cpu not in _ARMV7_CORES
    fpu = ("neon-fp-armv8" if armv8 else "neon-vfpv4") if _arm32_neon(target) else "vfpv4"
    return (f"-mcpu={cpu}" if cpu else "-march=armv7-a", f"-mfpu={fpu}", "-mfloat-abi=hard")


def _compile_only_flags(target: Target) -> tuple[str, ...]:
    """Flags for `Compiler.compile_flags`: -funsafe-math-optimizations where 32-bit
    ARM code uses NEON (`_arm32_flags` says why), kept off the link."""
    return ("-funsafe-math-optimizations",) if _arm32_neon(target) else ()


def _arm32_neon(target: Target) -> bool:
    """Whether code for `target` is 32-bit ARM with NEON (unless -mattr=-neon)."""
    return target.target_arch == "arm" and "-neon" not in target.mattr


@functools.cache
def _compiler_version(command: tuple[str, ...]) -> str:
    try:
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as error:
        raise ToolchainError(f"cannot run compiler {command[0]}: {error}") from error
    lines = (result.stdout or result.stderr).splitlines() if result.returncode == 0 else []
    return lines[0] if lines else ""


def _as_target(target: Target | str) -> Target:
    return target if isinstance(target, Target) else Target(target)


# -- building -------------------------------------------------------------------------


def compile_shared(
    sources: Sequence[str], target: Target | str, *, output: Path | None = None
) -> Path:
    """Compile C sources into one shared library for `target`; cached by content, or,
    given `output`, written there and not cached (the tuning builder's thousands of
    candidates must not fill the cache; a failure keeps no copy of the source)."""
    if output is None:
        return _build(sources, find_compiler(target), ("-shared",), ".so")
    if not sources:
        raise ValueError("compile needs at least one source")
    output = Path(output)
    _build_into(sources, find_compiler(target), ("-shared",), output, keep_failed=False)
    return output


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
    argv = [*compiler.argv(*link_flags), *compiler.compile_flags]
    # -march=native code differs per CPU; a cache shared between machines must not mix.
    cpu = sorted(host_cpu_features()) if any("native" in flag for flag in argv) else []
    for part in (compiler.version, *argv, *cpu, *sources):
        digest.update(part.encode())
        digest.update(b"\0")
    final = _kernels_dir() / f"{digest.hexdigest()[:40]}{suffix}"
    if not final.exists():
        _build_into(sources, compiler, link_flags, final, keep_failed=True)
    return final


def _build_into(
    sources: Sequence[str],
    compiler: Compiler,
    link_flags: tuple[str, ...],
    final: Path,
    *,
    keep_failed: bool,
) -> None:
    """Compile `sources` into `final`: in a private temporary directory beside it, then
    renamed into place, so a concurrent reader sees no file or a whole one.
    `keep_failed`: a failing source is copied to the cache's `failed/` for a report."""
    work = Path(tempfile.mkdtemp(prefix=f"{final.stem}-", dir=final.parent))
    try:
        files = [work / f"source{i}.c" for i in range(len(sources))]
        for file, source in zip(files, sources, strict=True):
            file.write_text(source)
        output = work / f"out{final.suffix}"
        libraries = () if "-c" in link_flags else ("-lm",)  # objects link nothing yet
        # One compiler process compiles and links, unless a link must not see the
        # compile-only flags (then objects first, as for several sources).
        if len(files) == 1 and ("-c" in link_flags or not compiler.compile_flags):
            inputs = list(map(str, files))
        else:
            inputs = list(map(str, _compile_objects(compiler, files, keep_failed)))
        args = [*inputs, *link_flags, "-o", str(output), *libraries]
        _run(compiler, args, files, keep_failed=keep_failed)
        os.replace(output, final)  # atomic
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile_objects(compiler: Compiler, files: list[Path], keep_failed: bool) -> list[Path]:
    objects = [file.with_suffix(".o") for file in files]
    workers = min(len(files), host_cpu_count())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        jobs = [
            pool.submit(
                _run, compiler, ["-c", str(file), "-o", str(obj)], [file], keep_failed=keep_failed
            )
            for file, obj in zip(files, objects, strict=True)
        ]
        for job in jobs:
            job.result()
    return objects


def _run(
    compiler: Compiler, args: list[str], sources: list[Path], *, keep_failed: bool = True
) -> None:
    argv = compiler.argv(*args)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as error:
        raise ToolchainError(f"cannot run compiler {argv[0]}: {error}") from error
    if result.returncode == 0:
        return
    errors = "\n".join(result.stderr.splitlines()[:40])
    failed = (
        f"compiling generated code failed ({shlex.join(argv[:1])} exited with {result.returncode})"
    )
    if not keep_failed:
        raise CompileError(f"{failed}:\n{errors}", argv, result.returncode, result.stderr)
    kept = _keep_failed_sources(sources)
    raise CompileError(
        f"{failed}; the source is kept at {', '.join(map(str, kept))}. This is a bug in "
        f"Ember's code generator or the toolchain setup; please report it with that "
        f"file.\n{errors}",
        argv,
        result.returncode,
        result.stderr,
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
