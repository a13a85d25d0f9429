"""The AOT entry point: generated C that runs a whole graph, one step after another,
with every tensor at a place fixed at build time.

`ember.build` describes the run as an `AotProgram` (tensors at the boundary, arena
size, steps) and `render_entry_point` turns it into C defining `ember_model` (with a
table naming each step and what it calls), `ember_model_run` and
`ember_model_run_timed` (declared in `c/ember_internal.h`; the same steps, the second
reading the clock after each one, for `ember_profile`). The C ABI itself
(`ember.runtime.abi`: `ember_create`, `ember_run`, `ember_benchmark`, `ember_profile`,
...) is hand-written once in `c/runtime.c`, with the safetensors reader (`c/safetensors.c`),
topk (`c/topk.c`) and the index checks (`c/indices.c`); `runtime_sources()` returns them
ready to compile. Every step reads and writes through a `BufferRef`: a graph input,
output or param by index, or a byte offset into the instance's arena (the memory plan).

Steps:
- `KernelStep`: a generated kernel, called through its packed wrapper
  `int32_t name_packed(void* const* args, int32_t num_args)` (ember/codegen/c.py),
  after its `IndexCheck`s: data-dependent indices it reads are checked in range first.
- `TopKStep`: the hand-written topk for one dtype.
- `CopyStep`: a memcpy, for graph outputs that are inputs, params or another output.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ember.codegen.c import C_TYPES
from ember.graph.ir import Node
from ember.graph.ops.attrs import TopKAttrs
from ember.runtime.abi import SAFETENSORS_DTYPES, TensorSpec

# dtypes c/topk.c has a function for (its EMBER_TOPK lines), with their C types.
TOPK_DTYPES = {
    dtype: C_TYPES[dtype]
    for dtype in (
        *("float32", "float64", "int8", "int16", "int32", "int64"),
        *("uint8", "uint16", "uint32", "uint64"),
    )
}

# Before any system header: clock_gettime, fseeko and off_t need POSIX under -std=c11;
# madvise's MADV_HUGEPAGE (runtime.c) is glibc's default set beyond it.
_FEATURES = (
    "#define _POSIX_C_SOURCE 200809L\n#define _DEFAULT_SOURCE\n#define _FILE_OFFSET_BITS 64\n"
)
_RUNTIME_FILES = ("runtime.c", "safetensors.c", "topk.c", "indices.c")
# dtypes c/indices.c checks (the index dtypes gather accepts).
INDEX_CHECK_DTYPES = {"int32": "int32_t", "int64": "int64_t"}


class Region(enum.Enum):
    INPUT = "inputs"
    OUTPUT = "outputs"
    PARAM = "params"
    ARENA = "arena"


@dataclass(frozen=True, slots=True)
class BufferRef:
    """Where a tensor lives during a run: `index` is the input/output/param position,
    or the byte offset into the arena."""

    region: Region
    index: int

    def c_pointer(self) -> str:
        if self.region is Region.ARENA:
            return f"(void*)(arena + {self.index})"
        return f"(void*){self.region.value}[{self.index}]"


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """`count` indices of `dtype` at `indices`, each in [-extent, extent), or the run
    fails naming `node`."""

    node: str
    dtype: str
    indices: BufferRef
    count: int
    extent: int


@dataclass(frozen=True, slots=True)
class KernelStep:
    """Call kernel `symbol` (its packed wrapper) with `args`: inputs, then outputs;
    after `checks`."""

    name: str
    symbol: str
    args: tuple[BufferRef, ...]
    checks: tuple[IndexCheck, ...] = ()


@dataclass(frozen=True, slots=True)
class TopKStep:
    """topk along the middle axis of `data` viewed as [outer, extent, inner]."""

    name: str
    dtype: str
    data: BufferRef
    values: BufferRef
    indices: BufferRef
    outer: int
    extent: int
    inner: int
    k: int
    largest: bool


@dataclass(frozen=True, slots=True)
class CopyStep:
    name: str
    source: BufferRef
    destination: BufferRef
    nbytes: int


Step = KernelStep | TopKStep | CopyStep


@dataclass(frozen=True, slots=True)
class AotProgram:
    """Everything the entry point needs: boundary tensors, arena size, steps in order."""

    target: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    params: tuple[TensorSpec, ...]
    arena_bytes: int
    steps: tuple[Step, ...]


def topk_step(node: Node, data: BufferRef, values: BufferRef, indices: BufferRef) -> TopKStep:
    """The TopKStep computing `node` (a topk whose dtype is in TOPK_DTYPES)."""
    attrs = node.attrs
    assert isinstance(attrs, TopKAttrs) and node.op == "topk"
    shape = node.inputs[0].shape
    axis = attrs.axis % len(shape)
    return TopKStep(
        name=node.name,
        dtype=node.inputs[0].dtype,
        data=data,
        values=values,
        indices=indices,
        outer=int(np.prod(shape[:axis], dtype=np.int64)),
        extent=shape[axis],
        inner=int(np.prod(shape[axis + 1 :], dtype=np.int64)),
        k=attrs.k,
        largest=attrs.largest,
    )


def internal_header() -> str:
    return _c_file("ember_internal.h")


def runtime_sources() -> list[str]:
    """The hand-written C of every library, each with the internal header prepended
    (and runtime.c with the timing loop it shares with the auto-scheduler's timer, and
    the thread-count policy)."""
    header = internal_header()
    runtime_headers = timing_header() + threads_header()
    return [
        f"{_FEATURES}{header}\n{runtime_headers if name == 'runtime.c' else ''}{_c_file(name)}"
        for name in _RUNTIME_FILES
    ]


def timing_header() -> str:
    """`c/timing.h`: the benchmark loop, for sources that prepend it."""
    return _c_file("timing.h") + "\n"


def threads_header() -> str:
    """`c/threads.h`: how many threads a run uses, for sources that prepend it."""
    return _c_file("threads.h") + "\n"


def _c_file(name: str) -> str:
    return resources.files("ember.runtime").joinpath("c", name).read_text(encoding="utf-8")


def c_string(text: str) -> str:
    """`text` as a C string literal (non-ASCII bytes as octal escapes)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':  # ? too: no trigraphs
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def render_entry_point(program: AotProgram) -> str:
    """The generated C source: `ember_model`, `ember_model_run` and
    `ember_model_run_timed`."""
    lines = [
        "// AOT entry point, generated by Ember: runs the model's steps in order.",
        _FEATURES + internal_header(),
        "#include <string.h>",
        "",
        *_declarations(program.steps),
        "",
        *_tensor_table("inputs", program.inputs),
        *_tensor_table("outputs", program.outputs),
        *_tensor_table("params", program.params),
        *_step_table(program.steps),
        *_kernel_table(program.steps),
        "const ember_model_info ember_model = {",
        f"  {c_string(program.target)}, {len(program.inputs)}, {len(program.outputs)}, "
        f"{len(program.params)},",
        "  model_inputs, model_outputs, model_params,",
        f"  {program.arena_bytes}u, {len(program.steps)}, model_steps,",
        "};",
        "",
        "/* Every step in order. With step_ends, step_ends[i] = ember_now_seconds() after",
        " * step i; inlined into both callers, so ember_model_run has no clock reads. */",
        "static inline __attribute__((always_inline)) int32_t run_steps(",
        "    const void* const* params, const void* const* inputs, void* const* outputs,",
        "    unsigned char* arena, double* step_ends) {",
        "  (void)params; (void)inputs; (void)outputs; (void)arena; (void)step_ends;",
    ]
    for index, step in enumerate(program.steps):
        lines.extend(f"  {line}" for line in _step_lines(step, index))
        lines.append(f"  if (step_ends) step_ends[{index}] = ember_now_seconds();")
    lines += [
        "  return 0;",
        "}",
        "",
        "int32_t ember_model_run(const void* const* params, const void* const* inputs,",
        "                        void* const* outputs, unsigned char* arena) {",
        "  return run_steps(params, inputs, outputs, arena, 0);",
        "}",
        "",
        "int32_t ember_model_run_timed(const void* const* params, const void* const* inputs,",
        "                              void* const* outputs, unsigned char* arena,",
        "                              double* step_ends) {",
        "  return run_steps(params, inputs, outputs, arena, step_ends);",
        "}",
        "",
    ]
    return "\n".join(lines)


def step_kernel(step: Step) -> str:
    """What a step calls, as the step table and `ember_step_kernel` name it."""
    if isinstance(step, KernelStep):
        return step.symbol
    if isinstance(step, TopKStep):
        return f"ember_topk_{step.dtype}"
    return "memcpy"


def _step_table(steps: tuple[Step, ...]) -> list[str]:
    entries = [
        f"  {{{c_string(step.name)}, {c_string(step_kernel(step))}, {_packed(step)}}},"
        for step in steps
    ]
    # One dummy entry keeps the array non-empty; num_steps says how many are real.
    entries = entries or ['  {"", "", 0},']
    return ["static const ember_step_info model_steps[] = {", *entries, "};", ""]


def _kernel_table(steps: tuple[Step, ...]) -> list[str]:
    """`ember_model_kernels`: what each kernel step calls, which
    `ember_set_step_kernel` (c/runtime.c) can change; a call through it costs what
    a direct call does (the kernels are in other objects either way)."""
    entries = [f"  {_packed(step)}," for step in steps] or ["  0,"]
    return ["ember_packed_kernel ember_model_kernels[] = {", *entries, "};", ""]


def _packed(step: Step) -> str:
    return step.symbol if isinstance(step, KernelStep) else "0"


def _declarations(steps: tuple[Step, ...]) -> list[str]:
    kernels = sorted({step.symbol for step in steps if isinstance(step, KernelStep)})
    topk = sorted({step.dtype for step in steps if isinstance(step, TopKStep)})
    checked = sorted(
        {check.dtype for step in steps if isinstance(step, KernelStep) for check in step.checks}
    )
    return [
        *(f"int32_t {symbol}(void* const* args, int32_t num_args);" for symbol in kernels),
        *(
            f"int32_t ember_topk_{dtype}(const {TOPK_DTYPES[dtype]}* data, "
            f"{TOPK_DTYPES[dtype]}* values, int64_t* indices, int64_t outer, int64_t extent, "
            "int64_t inner, int64_t k, int32_t largest);"
            for dtype in topk
        ),
        *(
            f"int32_t ember_check_indices_{dtype}(const {INDEX_CHECK_DTYPES[dtype]}* indices, "
            "int64_t count, int64_t extent, const char* node);"
            for dtype in checked
        ),
    ]


def _tensor_table(what: str, tensors: tuple[TensorSpec, ...]) -> list[str]:
    lines = []
    for index, tensor in enumerate(tensors):
        # A trailing 0 so that no array is empty (scalars have no dimensions).
        dims = ", ".join(str(d) for d in (*tensor.shape, 0))
        lines.append(f"static const int64_t {what}_shape_{index}[] = {{{dims}}};")
    entries = [
        f"  {{{c_string(t.name)}, {c_string(SAFETENSORS_DTYPES[t.dtype])}, {len(t.shape)}, "
        f"{what}_shape_{i}, {t.nbytes}u}},"
        for i, t in enumerate(tensors)
    ]
    # One dummy entry keeps the array non-empty; the counts say how many are real.
    entries = entries or ['  {"", "", 0, 0, 0u},']
    return [*lines, f"static const ember_tensor_spec model_{what}[] = {{", *entries, "};", ""]


def _step_lines(step: Step, index: int) -> list[str]:
    comment = "// " + re.sub(r"[^A-Za-z0-9_.:/ -]", "_", step.name)  # no \ or newline
    if isinstance(step, CopyStep):
        return [
            comment,
            f"memcpy({step.destination.c_pointer()}, {step.source.c_pointer()}, {step.nbytes}u);",
        ]
    if isinstance(step, TopKStep):
        c_type = TOPK_DTYPES[step.dtype]
        call = (
            f"ember_topk_{step.dtype}((const {c_type}*){step.data.c_pointer()}, "
            f"({c_type}*){step.values.c_pointer()}, (int64_t*){step.indices.c_pointer()}, "
            f"{step.outer}, {step.extent}, {step.inner}, {step.k}, {int(step.largest)})"
        )
        return [comment, f"if ({call} != 0) return -1;"]
    args = ", ".join(arg.c_pointer() for arg in step.args) or "0"
    checks = [
        f"if (ember_check_indices_{check.dtype}((const {INDEX_CHECK_DTYPES[check.dtype]}*)"
        f"{check.indices.c_pointer()}, {check.count}, {check.extent}, "
        f"{c_string(check.node)}) != 0) return -1;"
        for check in step.checks
    ]
    return [
        comment,
        *checks,
        "{",
        f"  void* const args[] = {{{args}}};",
        f"  if (ember_model_kernels[{index}](args, {len(step.args)}) != 0) {{",
        f'    ember_set_error("kernel %s rejected its arguments", {c_string(step.symbol)});',
        "    return -1;",
        "  }",
        "}",
    ]
