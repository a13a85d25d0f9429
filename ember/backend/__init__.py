"""Backends: the one path from a schedule to a compiled kernel, chosen from the Target.

    compiled = compile_kernel(state, target, "conv")          # a cached shared library
    compiled = compile_kernel(state, target, "conv", output=Output.OBJECT)   # for linking
    compiled = compile_kernel(state, target, "cand", path=dir / "cand.so")   # uncached
    library = compile_unit([generate_kernel(f, target) for f in funcs], target, path)
    kernel = compiled.load()                                   # a callable (this machine)
    kernel = build_kernel(func, "llvm")                        # the same from loop IR

`ember.build`, `ember.kernel` (fused groups), the tuning builder and the tests all
compile through `compile_kernel` / `compile_func`: lower (a State; `ember.schedule`)
-> the backend's loop-IR passes -> its renderer -> its toolchain.

A target picks its backend with `-backend=NAME` (`llvm -backend=portable-c`); CPU
targets default to `c`. Registered backends:

- `c`: C with GCC/Clang vector extensions and OpenMP (`ember.backend.c.CBackend`);
- `portable-c`: plain C11, scalar (`ember.backend.c.PortableCBackend`).

A new backend subclasses `ember.backend.base.Backend` and calls `register_backend`
(README, "Adding a target").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ember.backend.base import Backend, CompiledKernel, GeneratedKernel, LoopPass, Output
from ember.backend.c import CBackend, PortableCBackend
from ember.backend.kernel import Kernel
from ember.config import debug_dump
from ember.errors import TargetError, ToolchainError
from ember.loop.ir import PrimFunc
from ember.schedule.lower import OutputView, lower
from ember.schedule.state import State
from ember.target import Target, host_triple

DEFAULT_CPU_BACKEND = "c"

_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    """Make `backend` selectable as `-backend=<backend.name>` in this process; a name
    registered again is replaced (so a test can plug a backend in and take it out).
    The tuning builder's helper processes import `ember.backend` afresh: a backend
    they must build with is registered here, at the end of this module, like the two
    C backends (one registered at run time only serves `ember.build`, `ember.kernel`
    and `compile_kernel` in the process that registered it)."""
    if not backend.name:
        raise ValueError(f"{type(backend).__name__} has no name")
    _BACKENDS[backend.name] = backend


def unregister_backend(name: str) -> None:
    _BACKENDS.pop(name, None)


def registered_backends() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backend_for(target: Target | str) -> Backend:
    """The backend that builds `target` (its -backend option, else the default)."""
    target = target if isinstance(target, Target) else Target(target)
    name = target.backend or (DEFAULT_CPU_BACKEND if target.is_cpu else None)
    if name is None:
        raise ToolchainError(
            f"target {target} cannot be built yet: no backend generates code for "
            f"{target.kind}; use a CPU target ('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
        )
    backend = _BACKENDS.get(name)
    if backend is None:
        raise TargetError(
            f"unknown backend {name!r} in target {target}: registered backends are "
            f"{', '.join(_BACKENDS)}"
        )
    backend.check(target)
    return backend


def generate_kernel(func: PrimFunc, target: Target | str) -> GeneratedKernel:
    """Run the target's backend passes over lowered loop IR and render it."""
    target = target if isinstance(target, Target) else Target(target)
    return _generate(backend_for(target), func, target)


def _generate(backend: Backend, func: PrimFunc, target: Target) -> GeneratedKernel:
    prepared = func
    for loop_pass in backend.passes(target):
        prepared = loop_pass.run(prepared)
        debug_dump(f"loop IR of {func.name} after {loop_pass.name}", prepared)
    source = backend.render(prepared)
    debug_dump(f"{backend.name} source of {func.name}", source)
    packed = backend.symbols(func.name)[1]
    outputs = backend.output_args(func)
    return GeneratedKernel(func.name, backend.name, func, prepared, source, packed, outputs)


def compile_func(
    func: PrimFunc,
    target: Target | str,
    *,
    output: Output = Output.SHARED,
    path: Path | None = None,
    flags: Sequence[str] = (),
) -> CompiledKernel:
    """Generate and compile lowered loop IR (see `compile_kernel`)."""
    target = target if isinstance(target, Target) else Target(target)
    backend = backend_for(target)
    kernel = _generate(backend, func, target)
    compiled = backend.compile(kernel.source, target, output, path=path, flags=flags)
    return CompiledKernel(kernel, target, compiled, output)


def compile_kernel(
    state: State,
    target: Target | str,
    name: str,
    *,
    output: Output = Output.SHARED,
    path: Path | None = None,
    flags: Sequence[str] = (),
    views: Mapping[int, OutputView] | None = None,
) -> CompiledKernel:
    """The kernel `name` scheduled by `state`, compiled for `target`: lowered (with
    `views` of its outputs, see `ember.schedule.lower.lower`), the backend's passes,
    rendered, compiled (a shared library in the content-hash cache;
    `output=Output.OBJECT` an object file to link; `path=` a library written there,
    uncached). Lowering errors propagate as raised; a compiler that rejects the
    source raises `ember.errors.CompileError`."""
    func = lower(state, name, views)
    return compile_func(func, target, output=output, path=path, flags=flags)


def compile_unit(
    kernels: Sequence[GeneratedKernel], target: Target | str, path: Path
) -> Path | None:
    """Generated kernels (`generate_kernel` for `target`, distinct names) compiled
    into one shared library at `path`, uncached, by one compiler run; None when the
    backend cannot put them into one translation unit (`Backend.render_unit`: compile
    each with `compile_func` then). A compiler that rejects the source raises
    `ember.errors.CompileError`, for the whole unit."""
    target = target if isinstance(target, Target) else Target(target)
    backend = backend_for(target)
    source = backend.render_unit([kernel.func for kernel in kernels])
    if source is None:
        return None
    debug_dump(f"{backend.name} source of {', '.join(k.name for k in kernels)}", source)
    return backend.compile(source, target, Output.SHARED, path=path)


def build_kernel(func: PrimFunc, target: Target | str = "llvm") -> Kernel:
    """Compile lowered loop IR for this machine and load it: the whole path from loop
    IR to a callable."""
    target = target if isinstance(target, Target) else Target(target)
    if not target.is_host:
        raise ToolchainError(
            f"target {target} does not run on this machine ({host_triple()}): compile it "
            "with compile_func / compile_kernel and run the library on the device (or "
            "under qemu)"
        )
    return compile_func(func, target).load()


def kernel_source(func: PrimFunc, target: Target | str = "llvm") -> str:
    """The source the target's backend generates for lowered loop IR."""
    return generate_kernel(func, target).source


register_backend(CBackend())
register_backend(PortableCBackend())

__all__ = [
    "Backend",
    "CompiledKernel",
    "GeneratedKernel",
    "Kernel",
    "LoopPass",
    "Output",
    "backend_for",
    "build_kernel",
    "compile_func",
    "compile_kernel",
    "compile_unit",
    "generate_kernel",
    "kernel_source",
    "register_backend",
    "registered_backends",
    "unregister_backend",
]
