"""The backend joint: one path from a State to a compiled kernel, chosen from the
Target. The C backend and the portable C backend compute the same numbers; a backend
plugged in through `register_backend` is what `ember.build` and `ember.kernel` use for
a target that names it, and the tuning builder's helpers build with the target's
backend (portable-c here: they import `ember.backend` afresh, so a backend registered
at run time in this process is not theirs)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.autoschedule import LocalBuilder, LocalRunner, MeasureInput, SearchTask
from ember.autoschedule.records import ErrorKind
from ember.backend import (
    Output,
    backend_for,
    compile_kernel,
    register_backend,
    registered_backends,
    unregister_backend,
)
from ember.backend.base import LoopPass
from ember.backend.c import CBackend
from ember.errors import TargetError, ToolchainError
from ember.graph import GraphBuilder, interpret
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.passes import fuse
from ember.kernel import build_groups
from ember.loop.ir import For, ForKind, PrimFunc, walk_stmts
from ember.schedule.default import default_schedule
from ember.target import Target
from ember.te import ComputeDAG
from ember.te.evaluate import evaluate_dag
from ember.topi import group_to_dag

HOST = Target("llvm")
PORTABLE = Target("llvm -backend=portable-c")


def conv_relu(channels: int = 20, outputs: int = 36) -> tuple[ember.graph.Graph, dict]:
    """A 3x3 conv + ReLU with channel counts that leave vector tails."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (1, 10, 10, channels))
    w = b.param("w", rng.standard_normal((3, 3, channels, outputs)).astype("float32"))
    y = b.add("conv", [x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"))
    return b.build([b.add("relu", [y])])


def conv_dag() -> ComputeDAG:
    (group,) = fuse(*conv_relu()).groups
    return group_to_dag(group)[0]


def random_inputs(dag: ComputeDAG) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in dag.inputs]


def run(dag: ComputeDAG, target: Target, name: str) -> tuple[np.ndarray, str]:
    compiled = compile_kernel(default_schedule(dag, target), target, name)
    inputs = random_inputs(dag)
    (out,) = (np.empty(t.shape, t.dtype) for t in dag.outputs)
    compiled.load()(*inputs, out)
    return out, compiled.source


def test_both_c_backends_match_the_reference() -> None:
    dag = conv_dag()
    (expected,) = evaluate_dag(dag, random_inputs(dag))
    vector, vector_source = run(dag, HOST, "conv_vector")
    scalar, portable_source = run(dag, PORTABLE, "conv_scalar")
    # fp32 sums of 180 products in the same order; FMA contraction may differ.
    np.testing.assert_allclose(vector, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scalar, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scalar, vector, rtol=1e-5, atol=1e-6)
    assert "vector_size" in vector_source
    for extension in ("vector_size", "__attribute__", "__builtin", "#pragma GCC"):
        assert extension not in portable_source
    assert "#pragma omp parallel for" in portable_source


def test_portable_c_is_standard_c11(tmp_path: Path) -> None:
    compiler = shutil.which("gcc")
    if compiler is None:
        pytest.skip("gcc is not installed: cannot check the C11 conformance of the source")
    _, source = run(conv_dag(), PORTABLE, "conv_c11")
    path = tmp_path / "kernel.c"
    path.write_text(source)
    checked = subprocess.run(
        [compiler, "-std=c11", "-pedantic-errors", "-Wno-unknown-pragmas", "-fsyntax-only", path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_outputs_of_the_joint() -> None:
    state = default_schedule(conv_dag(), HOST)
    obj = compile_kernel(state, HOST, "conv_object", output=Output.OBJECT)
    assert obj.path.suffix == ".o" and obj.packed_symbol == "conv_object_packed"
    with pytest.raises(ToolchainError, match="object file"):
        obj.load()
    generated = obj.kernel
    assert generated.backend == "c"
    assert not any(  # the passes ran: nothing left for the renderer to vectorize
        isinstance(s, For) and s.kind is ForKind.VECTORIZED for s in walk_stmts(generated.func.body)
    )
    assert [b.name for b in generated.outputs] == [generated.args[-1].name]


def test_targets_choose_their_backend() -> None:
    assert backend_for(HOST).name == "c" and backend_for(PORTABLE).name == "portable-c"
    assert {"c", "portable-c"} <= set(registered_backends())
    with pytest.raises(TargetError, match=r"unknown backend 'nope'.*registered backends are"):
        backend_for("llvm -backend=nope")
    with pytest.raises(ToolchainError, match="cannot be built yet"):
        backend_for("cuda -arch=sm_90")
    graph, params = conv_relu()
    with pytest.raises(TargetError, match="unknown backend"):
        ember.build(graph, "llvm -backend=nope", params=params)


class TracingBackend(CBackend):
    """The C backend with one more pass and a header line: a second backend through
    the same joint. Counts the kernels it rendered."""

    name = "tracing-c"

    def __init__(self) -> None:
        self.rendered: list[str] = []

    def passes(self, target: Target) -> Sequence[LoopPass]:
        return (*super().passes(target), LoopPass("trace", self._trace))

    def _trace(self, func: PrimFunc) -> PrimFunc:
        self.rendered.append(func.name)
        return func

    def render(self, func: PrimFunc) -> str:
        return f"// traced by {self.name}\n" + super().render(func)


@pytest.fixture
def tracing() -> Iterator[TracingBackend]:
    backend = TracingBackend()
    register_backend(backend)
    yield backend
    unregister_backend(backend.name)


def test_a_plugged_in_backend_builds_networks_and_groups(tracing: TracingBackend) -> None:
    target = Target("llvm -backend=tracing-c")
    graph, params = conv_relu()
    library = ember.build(graph, target, params=params)
    assert tracing.rendered and all(
        k.c_source.startswith("// traced by tracing-c") for k in library.sources.kernels
    )
    x = np.random.default_rng(2).standard_normal(graph.inputs[0].shape).astype("float32")
    module = library.load()
    module.set_input(0, x)
    module.run()
    (expected,) = interpret(graph, params, {graph.inputs[0].name: x}).values()
    np.testing.assert_allclose(module.get_output(0), expected, rtol=1e-4, atol=1e-5)

    tracing.rendered.clear()
    (compiled,) = build_groups(fuse(graph, params).groups, target)
    assert tracing.rendered == [compiled.func.name]
    assert compiled.kernel.source is not None and "traced by" in compiled.kernel.source


def test_the_tuning_builder_compiles_through_the_targets_backend() -> None:
    """Candidates for a portable-c target build (in helper processes) with the
    portable backend, run and compute the right answer."""
    dag = conv_dag()
    task = SearchTask.create(dag, PORTABLE)
    measure_input = MeasureInput(task, default_schedule(dag, PORTABLE))
    with LocalBuilder(n_parallel=1) as builder, LocalRunner(number=1, repeat=1) as runner:
        (built,) = builder.build([measure_input])
        assert built.error is ErrorKind.NONE, built.message
        verdict = runner.check(measure_input, built)
        assert verdict.error is ErrorKind.NONE, verdict.message
