"""The Python runtime: a compiled network (`mod.so` plus its metadata) as an object that
takes and returns NumPy arrays.

    module = ember.runtime.load("net.tar")          # or Module.from_library(lib)
    module.set_input("data", x)
    module.run()
    y = module.get_output(0)
    print(module.benchmark(repeat=3, min_repeat_ms=500))

It wraps the C ABI every Ember library exports (`ember.runtime.abi`):
`ember_create[_from_file]`, `ember_run`, `ember_benchmark`, `ember_profile` (with
`ember_num_steps`, `ember_step_name`, `ember_step_kernel`), `ember_threads`, `ember_destroy`,
`ember_target`, `ember_last_error`, and `ember_set_step_kernel` (`set_step_kernel`: a
step runs a tuning candidate's kernel instead of its own, to time it in the network).
Input and output buffers are allocated once per module and their addresses put into
ctypes pointer arrays once, so `run()` is a single ctypes call; `set_input` copies
into an input buffer and `get_output` copies out of an output buffer, so arrays a
caller holds never alias the module's memory. Each module owns one C instance (its
own arena), so two modules of the same library run independently, also on two threads
at once (ctypes releases the GIL); a swapped kernel (`set_step_kernel`) is the
library's, so it runs in both, and swapping must wait until neither runs. One module
used from several threads is safe too: its calls take turns (a lock), since they share
the module's buffers and arena.
"""

from __future__ import annotations

import ctypes
import math
import os
import statistics
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ember.device import device_model, host_cpu_features
from ember.errors import ArtifactError, ExecutionError, InputError, ResourceError, TargetError
from ember.runtime.abi import ALIGNMENT, REBUILD_HINT, CLibrary, TensorSpec, load_library
from ember.runtime.profile import GroupInfo, Profile
from ember.target import Target, host_triple

# Instruction-set extensions compiled code may use; other /proc/cpuinfo flags
# (`constant_tsc`, `hypervisor`, ...) say nothing about whether code runs.
_ISA_FEATURE_PREFIXES = (
    "sse",
    "ssse3",
    "pni",
    "avx",
    "fma",
    "f16c",
    "bmi",
    "amx",
    "popcnt",
    "abm",
    "movbe",
    "adx",
    "neon",
    "asimd",
    "sve",
    "sme",
)

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    """What the runtime needs from a library's metadata (`mod.json`)."""

    target: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    params: tuple[TensorSpec, ...]
    # ISA extensions the code was compiled to use; checked against this CPU at load.
    cpu_features: tuple[str, ...]
    # The fused groups in run order (names, kernels, FLOPs), for the profile.
    groups: tuple[GroupInfo, ...] = ()

    @staticmethod
    def from_metadata(metadata: Mapping[str, object], source: str) -> ModuleInfo:
        """Parse metadata; a missing or ill-formed entry raises ArtifactError."""
        target = metadata.get("target")
        if not isinstance(target, str):
            raise ArtifactError(f"{source}: metadata has no target string: {REBUILD_HINT}")
        features = metadata.get("cpu_features")
        if features is None:  # built in this process: the target says what it used
            features = required_cpu_features(_parse_target(target, source))
        if not isinstance(features, list | tuple) or not all(isinstance(f, str) for f in features):
            raise ArtifactError(f"{source}: metadata 'cpu_features' is not a list: {REBUILD_HINT}")
        return ModuleInfo(
            target=target,
            inputs=_tensor_specs(metadata, "inputs", source),
            outputs=_tensor_specs(metadata, "outputs", source),
            params=_tensor_specs(metadata, "params", source),
            cpu_features=tuple(features),
            groups=GroupInfo.list_from_metadata(metadata),
        )


def _tensor_specs(metadata: Mapping[str, object], key: str, source: str) -> tuple[TensorSpec, ...]:
    entries = metadata.get(key)
    if not isinstance(entries, list):
        raise ArtifactError(f"{source}: metadata has no '{key}' list: {REBUILD_HINT}")
    specs = []
    for entry in entries:
        try:
            name, shape, dtype = entry["name"], entry["shape"], entry["dtype"]
            spec = TensorSpec(str(name), tuple(int(d) for d in shape), str(np.dtype(dtype)))
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(
                f"{source}: bad entry {entry!r} in metadata '{key}' (want name, shape, "
                f"dtype): {REBUILD_HINT}"
            ) from None
        specs.append(spec)
    return tuple(specs)


def _parse_target(target: str, source: str) -> Target:
    try:
        return Target(target)
    except TargetError as error:
        raise ArtifactError(f"{source}: unreadable target string {target!r}: {error}") from None


def required_cpu_features(target: Target) -> tuple[str, ...]:
    """The ISA extensions code compiled for `target` (on this machine) may use."""
    features = device_model(target).features
    return tuple(sorted(f for f in features if f.startswith(_ISA_FEATURE_PREFIXES)))


def check_runs_here(info: ModuleInfo, source: str) -> None:
    """Refuse code built for another architecture or for CPU features this one lacks;
    the message names the module's target and this machine's."""
    target = _parse_target(info.target, source)
    here = f"this machine ({host_triple()}, target 'llvm')"
    if not target.is_host:
        raise ArtifactError(
            f"{source} was built for target '{info.target}' ({target.triple}) and cannot "
            f"run on {here}: run it on a {target.target_arch} device (e.g. over RPC), or "
            "rebuild it for this machine with --target llvm"
        )
    present = host_cpu_features()
    if not present:  # unknown CPU (no /proc/cpuinfo): nothing to compare against
        return
    missing = [f for f in info.cpu_features if f not in present]
    if missing:
        raise ArtifactError(
            f"{source} was built for target '{info.target}' on a CPU with "
            f"{', '.join(missing)}, which {here} lacks: rebuild it here, or build for a "
            "target both CPUs support (e.g. 'llvm -mcpu=x86-64-v2')"
        )


class LibraryLike(Protocol):
    """What `Module.from_library` needs from `ember.build`'s result."""

    @property
    def so_path(self) -> Path: ...

    @property
    def metadata(self) -> Mapping[str, object]: ...

    @property
    def params(self) -> Mapping[str, np.ndarray]: ...


@dataclass(frozen=True, slots=True)
class BenchmarkResult:
    """Timings of `Module.benchmark`: one mean time per run for each repeat.
    `mean`, `median`, `max`, `min` and `std` are in milliseconds."""

    seconds: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.seconds) * 1e3

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) * 1e3

    @property
    def max(self) -> float:
        return max(self.seconds) * 1e3

    @property
    def min(self) -> float:
        return min(self.seconds) * 1e3

    @property
    def std(self) -> float:
        # Population deviation: the repeats are all the runs there are, not a sample.
        return statistics.pstdev(self.seconds) * 1e3

    def __str__(self) -> str:
        columns = ("mean", "median", "max", "min", "std")
        header = " ".join(f"{name + ' (ms)':^12}" for name in columns)
        values = " ".join(f"{getattr(self, name):^12.4f}" for name in columns)
        return f"Execution time summary:\n{header.rstrip()}\n{values.rstrip()}"


def aligned_empty(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `ALIGNMENT`-byte
    boundary: vector loads in the kernels never straddle a cache line, and timings do
    not depend on where NumPy happened to place the array."""
    item, count = np.dtype(dtype), math.prod(shape)
    # At least one element: NumPy moves the data of an empty view off the buffer.
    nbytes = max(count, 1) * item.itemsize
    try:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    except MemoryError:
        raise ResourceError(
            f"a {dtype}[{', '.join(map(str, shape))}] tensor ({nbytes:,} bytes) does not fit "
            "in this machine's memory"
        ) from None
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(item)[:count].reshape(shape)


def _restore_kernels(library: ctypes.CDLL, replacements: dict[int, ctypes.CDLL]) -> None:
    """Give the steps of `replacements` their own kernels back."""
    for step in list(replacements):
        library.ember_set_step_kernel(step, None)
    replacements.clear()


def _pointer_array(arrays: Sequence[np.ndarray]) -> ctypes.Array[ctypes.c_void_p]:
    # At least one slot: a zero-length ctypes array cannot be built portably.
    return (ctypes.c_void_p * max(len(arrays), 1))(*(a.ctypes.data for a in arrays))


class Module:
    """A compiled network, ready to run on this machine."""

    def __init__(
        self,
        library_path: Path | str,
        info: ModuleInfo,
        params: Path | str | Mapping[str, np.ndarray],
        *,
        source: str | None = None,
    ) -> None:
        """Load `library_path` and create its instance; `params` is a safetensors file
        (`mod.params`) the library reads itself, or arrays by name, which the
        module keeps alive because the library borrows them."""
        self.info = info
        self.library_path = Path(library_path)
        self.source = source or str(library_path)
        self._abi = CLibrary(Path(library_path), self.source)
        self._check_library_target()
        self._params = self._create_instance(params)
        self._inputs = [aligned_empty(spec.shape, spec.dtype) for spec in info.inputs]
        self._outputs = [aligned_empty(spec.shape, spec.dtype) for spec in info.outputs]
        self._input_pointers = _pointer_array(self._inputs)
        self._output_pointers = _pointer_array(self._outputs)
        self._unset = set(range(len(info.inputs)))
        # Libraries whose kernels replace steps' own (set_step_kernel), kept loaded;
        # the steps get their own back when the module is closed or collected.
        self._replacements: dict[int, ctypes.CDLL] = {}
        self._restorer = weakref.finalize(
            self, _restore_kernels, self._abi.library, self._replacements
        )
        # Reentrant: __call__ holds it over set_input, run and get_output.
        self._lock = threading.RLock()

    @classmethod
    def from_library(cls, library: LibraryLike) -> Module:
        """Run a freshly built library in place (no export): `Library.load()`."""
        info = ModuleInfo.from_metadata(library.metadata, str(library.so_path))
        check_runs_here(info, str(library.so_path))
        return cls(library.so_path, info, library.params)

    def _check_library_target(self) -> None:
        built_for = self._abi.library.ember_target()
        built_for = built_for.decode(errors="replace") if built_for else ""
        source = self.source
        if _parse_target(built_for, source) != _parse_target(self.info.target, source):
            raise ArtifactError(
                f"{source}: the library was built for target '{built_for}' but its "
                f"metadata says '{self.info.target}': the files come from different "
                "builds; rebuild the artifact with `ember compile`"
            )

    def _create_instance(self, params: Path | str | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        library = self._abi.library
        if isinstance(params, Path | str):
            kept: list[np.ndarray] = []
            handle = library.ember_create_from_file(os.fsencode(params))
        else:
            kept = [_param_array(params, spec, self.source) for spec in self.info.params]
            handle = library.ember_create(_pointer_array(kept))
        if not handle:
            raise ExecutionError(
                f"{self.source}: creating the module failed: {self._abi.last_error()}"
            )
        self._handle = ctypes.c_void_p(handle)
        # A finalizer, not __del__: it runs once, also at interpreter exit, and
        # holds the library so ember_destroy outlives the module object.
        self._finalizer = weakref.finalize(self, library.ember_destroy, self._handle)
        return kept

    # -- signature --------------------------------------------------------------------

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.info.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.info.outputs

    @property
    def target(self) -> str:
        return self.info.target

    def get_num_inputs(self) -> int:
        return len(self.info.inputs)

    def get_num_outputs(self) -> int:
        return len(self.info.outputs)

    def get_input_info(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Input name -> (shape, dtype), in the order `run` takes them."""
        return {spec.name: (spec.shape, spec.dtype) for spec in self.info.inputs}

    def get_output_info(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Output name -> (shape, dtype), in `get_output` index order."""
        return {spec.name: (spec.shape, spec.dtype) for spec in self.info.outputs}

    # -- running ----------------------------------------------------------------------

    def set_input(self, key: str | int, value: np.ndarray) -> None:
        """Copy `value` into input `key` (a name or an index); shape and dtype must
        match exactly (no silent casts: a float64 image would lose precision)."""
        index, array = checked_input(self.info.inputs, key, value)
        with self._lock:
            np.copyto(self._inputs[index], array)
            self._unset.discard(index)

    def run(self) -> None:
        """Run the network once on the inputs set so far."""
        with self._lock:
            self._check_ready()
            status = self._abi.library.ember_run(
                self._handle, self._input_pointers, self._output_pointers
            )
        if status != 0:
            raise ExecutionError(f"{self.source}: run failed: {self._abi.last_error()}")

    @property
    def threads(self) -> int:
        """The thread count runs use now: measured and chosen run by run (fewer while
        other programs keep cores busy, see c/threads.h), at most OpenMP's setting
        (OMP_NUM_THREADS); that setting itself when EMBER_ADAPTIVE_THREADS=0."""
        with self._lock:
            return int(self._abi.library.ember_threads(self._handle))

    def get_output(self, key: int | str) -> np.ndarray:
        """A copy of output `key` (an index or a name) from the last run."""
        index = tensor_index(self.info.outputs, key, "output")
        with self._lock:
            return self._outputs[index].copy()

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Set the inputs by name, run, and return the outputs by name."""
        with self._lock:
            for name, value in inputs.items():
                self.set_input(name, value)
            self.run()
            return {spec.name: self.get_output(i) for i, spec in enumerate(self.info.outputs)}

    def benchmark(
        self,
        repeat: int = 3,
        number: int = 1,
        min_repeat_ms: float = 500,
        cache_flush: bool = False,
    ) -> BenchmarkResult:
        """Time `run` in C: `repeat` measurements of `number` runs each, `number` grown
        until one measurement lasts `min_repeat_ms`; `cache_flush` evicts the caches
        before each run (cold-cache timing, as tuning measures)."""
        # The C side takes int32 counts; NaN or inf ms would grow `number` forever.
        counts_fit = 1 <= repeat <= _INT32_MAX and 1 <= number <= _INT32_MAX
        if not counts_fit or not 0 <= min_repeat_ms < math.inf:
            raise ValueError(
                f"benchmark needs repeat >= 1, number >= 1 (both <= {_INT32_MAX}) and a "
                f"finite min_repeat_ms >= 0; got "
                f"repeat={repeat}, number={number}, min_repeat_ms={min_repeat_ms}"
            )
        seconds = (ctypes.c_double * repeat)()
        with self._lock:
            self._check_ready()
            status = self._abi.library.ember_benchmark(
                self._handle,
                self._input_pointers,
                self._output_pointers,
                number,
                repeat,
                float(min_repeat_ms),
                int(cache_flush),
                seconds,
            )
        if status != 0:
            raise ExecutionError(f"{self.source}: benchmark failed: {self._abi.last_error()}")
        return BenchmarkResult(tuple(seconds))

    def profile(self, repeat: int = 10) -> Profile:
        """Time every step of `run` in C (`ember_profile`): a warm-up run, then
        `repeat` runs reading the clock after each step; the median per step, with
        each group's share of the total and GFLOP/s (see ember.runtime.profile)."""
        if not 1 <= repeat <= _INT32_MAX:
            raise ValueError(f"profile needs 1 <= repeat <= {_INT32_MAX}; got repeat={repeat}")
        library = self._abi.library
        count = library.ember_num_steps()
        names = [_text(library.ember_step_name(i)) for i in range(count)]
        kernels = [_text(library.ember_step_kernel(i)) for i in range(count)]
        seconds = (ctypes.c_double * max(count, 1))()
        with self._lock:
            self._check_ready()
            status = library.ember_profile(
                self._handle, self._input_pointers, self._output_pointers, repeat, seconds
            )
        if status != 0:
            raise ExecutionError(f"{self.source}: profile failed: {self._abi.last_error()}")
        return Profile.from_steps(names, kernels, seconds[:count], self.info.groups, repeat)

    def kernel_steps(self, workload_key: str) -> list[int]:
        """The indices of the steps that run a group of `workload_key` (a tuning
        task's: `SearchTask.workload_key`), in run order, where a kernel of the task
        can stand in for the group's (`set_step_kernel`): not those whose kernel writes
        views of a larger output (an in-place concatenation's inputs)."""
        keyed = {
            group.name
            for group in self.info.groups
            if group.workload_key == workload_key and not group.output_views
        }
        library = self._abi.library
        names = [_text(library.ember_step_name(i)) for i in range(library.ember_num_steps())]
        return [index for index, name in enumerate(names) if name in keyed]

    def set_step_kernel(
        self, step: int, library: Path | str | None = None, symbol: str = ""
    ) -> None:
        """Have kernel step `step` call `symbol`, the packed entry point of a kernel
        in the shared library `library`, instead of its own kernel; `library=None`
        gives the step its own kernel back. For tuning, to time a candidate inside the
        network: a candidate of the step's task (`kernel_steps`), built for this target
        (`LocalBuilder`: BuildResult.path and .symbol), takes the step's arguments.
        Nothing can check that in C, so anything else is undefined behaviour. The
        swap holds for every Module of this library in the process (the library has
        one table of what its steps call; identical builds share one library), until
        this module gives the steps back (`None`, `close`, or when it is collected);
        so swap only while no Module of the library runs. The profile still names the
        step's own kernel."""
        function = getattr(self._abi.library, "ember_set_step_kernel", None)
        if function is None:
            raise ArtifactError(
                f"{self.source}: the library was built by an earlier Ember, which could not "
                "swap kernels; rebuild it with `ember compile`"
            )
        with self._lock:
            self._check_open()
            if library is None:
                address = None
            else:
                try:
                    replacement = load_library(Path(library))
                    address = ctypes.cast(replacement[symbol], ctypes.c_void_p).value
                except (OSError, AttributeError) as error:
                    raise ExecutionError(
                        f"cannot take the kernel {symbol!r} from {library}: {error}"
                    ) from None
            if function(step, address) != 0:
                raise ExecutionError(f"{self.source}: {self._abi.last_error()}")
            if library is None:
                self._replacements.pop(step, None)
            else:
                self._replacements[step] = replacement

    def close(self) -> None:
        """Free the C instance now rather than when the module is collected (waits
        for a run in progress on another thread)."""
        with self._lock:
            self._restorer()
            self._finalizer()

    def _check_ready(self) -> None:
        self._check_open()
        check_inputs_set(self.info.inputs, self._unset)

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ExecutionError(f"{self.source}: the module was closed; load it again")

    def __repr__(self) -> str:
        inputs = ", ".join(map(str, self.info.inputs))
        return f"Module({self.source!r}, target='{self.info.target}', inputs=[{inputs}])"


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


def checked_input(
    specs: Sequence[TensorSpec], key: str | int, value: np.ndarray
) -> tuple[int, np.ndarray]:
    """The index of input `key` (a name or an index) and `value` as an array, whose
    shape and dtype must match the input's exactly (no silent casts: a float64 image
    would lose precision)."""
    index = tensor_index(specs, key, "input")
    spec = specs[index]
    array = np.asarray(value)
    if array.dtype != np.dtype(spec.dtype):
        raise InputError(
            f"input '{spec.name}' must be {spec.dtype}, got {array.dtype}: convert it "
            f"first, e.g. array.astype('{spec.dtype}')"
        )
    if array.shape != spec.shape:
        raise InputError(
            f"input '{spec.name}' must have shape {spec.shape}, got {array.shape}: "
            "resize or transpose it, or rebuild the module for that shape "
            "(ember compile --input-shapes)"
        )
    return index, array


def check_inputs_set(specs: Sequence[TensorSpec], unset: set[int]) -> None:
    """Refuse to run before every input has been set."""
    if unset:
        names = ", ".join(f"'{specs[i].name}'" for i in sorted(unset))
        raise InputError(f"input {names} not set: call set_input(name, array) before run()")


def tensor_index(specs: Sequence[TensorSpec], key: str | int, kind: str) -> int:
    """The index of the input or output `key`: an index, or a name."""
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        if 0 <= key < len(specs):
            return int(key)
    else:
        for index, spec in enumerate(specs):
            if spec.name == key:
                return index
    listing = "; ".join(f"{i}: {spec}" for i, spec in enumerate(specs))
    raise InputError(f"the module has no {kind} {key!r}; its {kind}s are {listing}")


def _param_array(params: Mapping[str, np.ndarray], spec: TensorSpec, source: str) -> np.ndarray:
    if spec.name not in params:
        raise ArtifactError(f"{source}: param '{spec.name}' is missing from the params")
    array = np.asarray(params[spec.name], order="C")  # keeps 0-d params 0-d
    if array.shape != spec.shape or array.dtype != np.dtype(spec.dtype):
        raise ArtifactError(
            f"{source}: param '{spec.name}' is {array.shape} {array.dtype}, the library "
            f"expects {spec.shape} {spec.dtype}: the params come from a different build"
        )
    return array
