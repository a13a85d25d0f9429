"""What a backend is: the loop-IR passes a target needs, a renderer, and a toolchain.

A backend turns lowered loop IR into a compiled kernel in three steps, each its own:

    func = pass_n(...pass_1(func))      # backend.passes(target): named loop-IR passes
    source = backend.render(func)       # the renderer only renders
    path = backend.compile(source, ...)  # the toolchain compiles and links

`ember.backend.compile_kernel` runs them; nothing else assembles the pipeline.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ember.backend.kernel import Kernel
from ember.errors import ToolchainError
from ember.loop.ir import Buffer, PrimFunc
from ember.target import Target, host_triple


@dataclass(frozen=True, slots=True)
class LoopPass:
    """One loop-IR pass, named for debug dumps (`EMBER_DEBUG=1` prints the IR after
    each)."""

    name: str
    run: Callable[[PrimFunc], PrimFunc]


class Output(enum.Enum):
    """What `compile` makes of a kernel's source."""

    SHARED = "shared"  # a shared library with the packed entry point
    OBJECT = "object"  # an object file, to be linked with others (ember.build)


@dataclass(frozen=True, slots=True, eq=False)
class GeneratedKernel:
    """A kernel's generated code: the loop IR as lowered (its arguments are the
    kernel's: the DAG's inputs, then its outputs), the IR after the backend's passes
    (what was rendered), the source, and the packed entry point it exports."""

    name: str
    backend: str
    lowered: PrimFunc
    func: PrimFunc
    source: str
    packed_symbol: str  # `int32_t packed(void* const* args, int32_t num_args)`
    outputs: tuple[Buffer, ...]  # the arguments it writes

    @property
    def args(self) -> tuple[Buffer, ...]:
        return self.lowered.args


@dataclass(frozen=True, slots=True, eq=False)
class CompiledKernel:
    """A generated kernel and the file it was compiled into for `target`."""

    kernel: GeneratedKernel
    target: Target
    path: Path
    output: Output

    def load(self) -> Kernel:
        """The shared library as a callable; the target must be this machine and the
        kernel compiled with `output=Output.SHARED`."""
        if not self.target.is_host:
            raise ToolchainError(
                f"target {self.target} does not run on this machine ({host_triple()}): "
                "run the library on the device (or under qemu)"
            )
        if self.output is not Output.SHARED:
            raise ToolchainError(
                f"{self.path} is an object file, which cannot be loaded: compile the kernel "
                "with output=Output.SHARED (the default) to call it"
            )
        kernel = self.kernel
        return Kernel(
            kernel.lowered,
            self.path,
            kernel.source,
            packed_symbol=kernel.packed_symbol,
            outputs=kernel.outputs,
        )

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def source(self) -> str:
        return self.kernel.source

    @property
    def packed_symbol(self) -> str:
        return self.kernel.packed_symbol


class Backend(ABC):
    """A code generator for a family of targets. Subclasses give their passes, their
    renderer and their toolchain; `ember.backend.register_backend` makes one
    selectable by a target's `-backend=NAME` option."""

    name: str = ""
    description: str = ""

    def check(self, target: Target) -> None:  # noqa: B027 (optional hook)
        """Raise an EmberError saying why `target` cannot be built by this backend."""

    @abstractmethod
    def passes(self, target: Target) -> Sequence[LoopPass]:
        """The loop-IR passes between lowering and rendering, in order."""

    @abstractmethod
    def render(self, func: PrimFunc) -> str:
        """The source text of `func` after `passes`."""

    def render_unit(self, funcs: Sequence[PrimFunc]) -> str | None:
        """The source of several kernels (distinct names, each after `passes`) in one
        translation unit that compiles each to what `render` alone would, or None
        when this backend cannot put these together (the default): the tuning builder
        then compiles them one by one. One compiler process for several candidates
        saves its start, the headers and a link per candidate."""
        return None

    @abstractmethod
    def symbols(self, name: str) -> tuple[str, str]:
        """The exported names of kernel `name`'s function and of its packed entry point
        (`int32_t packed(void* const* args, int32_t num_args)`, what `ember.build`'s
        entry point and the runners call)."""

    @abstractmethod
    def output_args(self, func: PrimFunc) -> tuple[Buffer, ...]:
        """The arguments `func` writes (the others are read-only inputs)."""

    @abstractmethod
    def compile(
        self,
        source: str,
        target: Target,
        output: Output,
        *,
        path: Path | None = None,
        flags: Sequence[str] = (),
    ) -> Path:
        """Compile `source` for `target` into a cached file of kind `output`, or, given
        `path`, into that file uncached (a shared library only)."""

    @abstractmethod
    def link(self, objects: Sequence[Path], target: Target) -> Path:
        """Link object files (kernels, and the runtime and entry point `ember.build`
        compiles with `compile(..., Output.OBJECT)`) into one shared library."""
