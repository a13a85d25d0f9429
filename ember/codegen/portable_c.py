"""Portable C: the C renderer without GCC/Clang extensions, for compilers that lack
them and as a scalar reference to diff the vector code against.

Renders a PrimFunc after the portable backend's passes (unroll, simplify, scalarize: no
vector expressions). Differences from `ember.codegen.c`: no vector types (a vector
expression is a CodegenError naming the pass that should have removed it), stack
arrays aligned with C11 `_Alignas` instead of `__attribute__((aligned))`, and no
`#pragma GCC unroll` (OpenMP's `parallel for` stays: a compiler without OpenMP
ignores it and runs the loop serially, still correct).
"""

from __future__ import annotations

from ember.codegen.c import ALIGNMENT, CRenderer
from ember.errors import CodegenError
from ember.loop.ir import For, ForKind, PrimFunc


def render_portable_c(func: PrimFunc) -> str:
    """Plain C11 source of `func` (scalar loop IR)."""
    return PortableCRenderer(func).render()


class PortableCRenderer(CRenderer):
    """Renders scalar loop IR as standard C11 (plus OpenMP pragmas)."""

    def vector_type(self, dtype: str) -> str:
        raise CodegenError(
            f"portable C has no vector types (found {dtype}): the portable backend runs "
            "scalarize instead of vectorize; this is a bug in its pass list"
        )

    def stack_array(self, c_type: str, name: str, size: int) -> str:
        return f"_Alignas({ALIGNMENT}) {c_type} {name}[{size}];"

    def loop_pragma(self, loop: For) -> str | None:
        if loop.kind is ForKind.PARALLEL:
            return "#pragma omp parallel for"
        return None
