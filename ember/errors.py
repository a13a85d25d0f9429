"""Errors a user can cause. Each says what was wrong and what to do about it."""

from __future__ import annotations


class EmberError(Exception):
    """Base class of every error Ember raises for bad input or a bad environment."""


class ModelLoadError(EmberError):
    """The model file could not be read: missing, not ONNX, truncated or inconsistent."""


class UnsupportedOperatorError(EmberError):
    """The model uses operators that Ember cannot import."""


class ShapeError(EmberError):
    """Shapes or dtypes do not fit: a bad input shape override or an ill-typed graph."""


class ResourceError(EmberError):
    """A computation needs more memory than the machine has (a huge tensor)."""


class GraphError(EmberError):
    """A graph is structurally invalid (failed `verify`)."""


class WorkloadError(EmberError):
    """An unknown built-in workload or unsupported workload options."""


class LoopIRError(EmberError):
    """Loop IR is invalid (failed `verify`), or an interpreted kernel read or wrote
    outside a buffer: a bug in the schedule or the lowering that produced it."""


class TargetError(EmberError):
    """A target string could not be parsed or names something Ember does not support."""


class ToolchainError(EmberError):
    """No usable compiler for the target, or compiling/linking generated code failed."""


class CompileError(ToolchainError):
    """The compiler rejected generated code: `argv` is the command, `returncode` its
    exit status, `stderr` what it printed."""

    def __init__(self, message: str, argv: list[str], returncode: int, stderr: str) -> None:
        super().__init__(message)
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


class KernelCallError(EmberError):
    """A compiled kernel was called with arrays that do not match its buffers."""


class CodegenError(EmberError):
    """Loop IR uses something the code generator cannot render (e.g. an unsupported
    dtype)."""


class ArtifactError(EmberError):
    """An artifact (.tar) cannot be used: unreadable, incomplete, from another Ember
    format version, or built for a machine other than this one."""


class InputError(EmberError):
    """An input given to a compiled module does not fit it: unknown name or index,
    wrong shape or dtype, or never set before `run()`."""


class ExecutionError(EmberError):
    """A compiled module reported an error while creating an instance or running."""


class BuildError(EmberError):
    """`ember.build` cannot build the graph: missing params, an op with no C
    implementation, or tuning records it cannot use."""


class UsageError(EmberError):
    """A command-line option is out of range or names a file that cannot be used."""
