"""The C backends: C with GCC/Clang vector extensions and OpenMP (`c`, the default for
CPU targets), and portable C11 without extensions (`portable-c`).

Both compile with the target's C toolchain (`ember.toolchain`: the host compiler, a
cross gcc, or the Android NDK clang, with the target's -march/-mcpu flags).

The `c` backend's passes, in this order (each needs the one before):

1. unroll_loops: short UNROLLED loops become one copy per iteration, first, so that
2. simplify folds the unrolled loop variables into constant indices (which register
   promotion needs) and folds index arithmetic before
3. vectorize looks for affine (Ramp) forms in it (it folds its own Ramp algebra);
4. promote_registers: small constant-indexed local buffers (a register tile's
   accumulators) become one variable per vector, after vectorize has made the
   accesses whole vectors.

`portable-c` runs unroll_loops, simplify and scalarize (VECTORIZED loops run as serial
loops) and renders with `ember.codegen.portable_c`: no vector types, no GCC pragmas.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ember.backend.base import Backend, LoopPass, Output
from ember.codegen.c import entry_symbols, render_c, render_c_unit
from ember.codegen.portable_c import render_portable_c
from ember.codegen.renderer import output_args
from ember.errors import ToolchainError
from ember.loop.ir import Buffer, PrimFunc
from ember.loop.registers import promote_registers
from ember.loop.scalarize import scalarize
from ember.loop.simplify import simplify
from ember.loop.unroll import unroll_loops
from ember.loop.vectorize import vectorize
from ember.target import Target
from ember.toolchain import compile_object, compile_shared, link_shared


class CBackend(Backend):
    """C11 with GCC/Clang vector types for explicit SIMD, OpenMP for parallel loops."""

    name = "c"
    description = "C with GCC/Clang vector extensions and OpenMP (the default for CPUs)"

    def check(self, target: Target) -> None:
        if not target.is_cpu:
            raise ToolchainError(
                f"target {target} is not built by a C compiler yet; use a CPU target "
                "('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
            )

    def passes(self, target: Target) -> Sequence[LoopPass]:
        return (
            LoopPass("unroll", unroll_loops),
            LoopPass("simplify", simplify),
            LoopPass("vectorize", vectorize),
            LoopPass("promote_registers", promote_registers),
        )

    def render(self, func: PrimFunc) -> str:
        return render_c(func)

    def render_unit(self, funcs: Sequence[PrimFunc]) -> str | None:
        return render_c_unit(funcs)

    def symbols(self, name: str) -> tuple[str, str]:
        return entry_symbols(name)

    def output_args(self, func: PrimFunc) -> tuple[Buffer, ...]:
        return output_args(func)

    def compile(
        self,
        source: str,
        target: Target,
        output: Output,
        *,
        path: Path | None = None,
        flags: Sequence[str] = (),
    ) -> Path:
        if output is Output.OBJECT:
            if path is not None:
                raise ValueError("object files go to the build cache; path= is for libraries")
            return compile_object(source, target, flags)
        if flags:
            raise ValueError("extra flags are for object files (ember.build's linking)")
        return compile_shared([source], target, output=path)

    def link(self, objects: Sequence[Path], target: Target) -> Path:
        return link_shared(objects, target)


class PortableCBackend(CBackend):
    """Plain C11 (scalar loops, OpenMP pragmas a compiler may ignore)."""

    name = "portable-c"
    description = "plain C11 without vector extensions: any C compiler, a scalar reference"

    def passes(self, target: Target) -> Sequence[LoopPass]:
        return (
            LoopPass("unroll", unroll_loops),
            LoopPass("simplify", simplify),
            LoopPass("scalarize", scalarize),
        )

    def render(self, func: PrimFunc) -> str:
        return render_portable_c(func)

    def render_unit(self, funcs: Sequence[PrimFunc]) -> str | None:
        return None  # its renderer writes whole translation units only
