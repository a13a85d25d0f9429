"""Default schedules: the structure they give each kind of DAG (register tile, vector
width from the target, inlining, parallel loops), and that they are plain replayable
steps. Numerical correctness of every op under them is tests/test_kernels.py."""

from __future__ import annotations

import json
import math

import numpy as np

from ember.graph import GraphBuilder
from ember.graph.ir import Attrs, Graph, NoAttrs, Params
from ember.graph.ops.attrs import AxisAttrs, ConvAttrs, TransposeAttrs
from ember.graph.passes import fuse
from ember.schedule import Annotation, Location, State, replay, step_from_json
from ember.schedule.default import default_schedule
from ember.schedule.state import SplitRelation
from ember.target import Target
from ember.te import ComputeDAG
from ember.topi import group_to_dag

AVX512 = Target("llvm -mcpu=skylake-avx512")
AVX2 = Target("llvm -mcpu=haswell")
NEON = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")


def conv_dag(
    shape: tuple[int, int, int, int], k: int, layout: str = "NHWC", epilogue: bool = True
) -> ComputeDAG:
    """A 3x3 padded conv (+ bias + relu) as the fused group's ComputeDAG."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", shape)
    channels = shape[3] if layout == "NHWC" else shape[1]
    kernel = (3, 3, channels, k) if layout == "NHWC" else (k, channels, 3, 3)
    w = b.param("w", rng.standard_normal(kernel).astype("float32"))
    kernel_layout = "HWIO" if layout == "NHWC" else "OIHW"
    y = b.add("conv", [x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, layout, kernel_layout))
    if epilogue:
        bias_shape = (k,) if layout == "NHWC" else (k, 1, 1)
        bias = b.param("bias", rng.standard_normal(bias_shape).astype("float32"))
        y = b.add("relu", [b.add("add", [y, bias])])
    return _only_group(*b.build([y]))


def op_dag(op: str, shape: tuple[int, ...], attrs: Attrs | None = None) -> ComputeDAG:
    b = GraphBuilder()
    x = b.input("x", shape)
    return _only_group(*b.build([b.add(op, [x], attrs or NoAttrs())]))


def _only_group(graph: Graph, params: Params) -> ComputeDAG:
    (group,) = fuse(graph, params).groups
    return group_to_dag(group)[0]


def annotated(state: State, stage: str) -> dict[str, tuple[int, Annotation]]:
    return {it.name: (it.extent, it.annotation) for it in state.stage(stage).iters}


def test_nhwc_conv_gets_the_worked_example_micro_kernel() -> None:
    state = default_schedule(conv_dag((1, 56, 56, 64), 64), AVX512)
    local = state.stage("conv2d_nhwc.local")
    output = state.stage("T_relu")
    assert local.scope == "local" and local.location is Location.ATTACHED
    assert state.stages[local.attach_stage] is output and local.attach_iter == output.iters[0].name
    # 7 output pixels x 4 vectors of 16 channels, reductions outside the tile.
    assert [(it.name, it.extent, it.annotation) for it in local.iters[-6:]] == [
        ("ry", 3, Annotation.NONE),
        ("rx", 3, Annotation.NONE),
        ("rc", 64, Annotation.NONE),
        ("xx", 56, Annotation.UNROLL),  # runs over the 7 pixels of the region
        ("ff.0", 4, Annotation.UNROLL),
        ("ff.1", 16, Annotation.VECTORIZE),
    ]
    assert [(it.extent, it.annotation) for it in output.iters] == [
        (448, Annotation.PARALLEL),
        (7, Annotation.UNROLL),
        (4, Annotation.UNROLL),
        (16, Annotation.VECTORIZE),
    ]
    # The epilogue and the copy out of the accumulators are inlined into the store;
    # the padding is materialised once.
    assert state.stage("T_add").location is Location.INLINED
    assert state.stage("conv2d_nhwc").location is Location.INLINED
    assert state.stage("pad_temp").location is Location.ROOT


def test_vector_width_and_tile_follow_the_target() -> None:
    dag = conv_dag((1, 14, 14, 64), 64)
    avx2 = annotated(default_schedule(dag, AVX2), "T_relu")
    neon = annotated(default_schedule(dag, NEON), "T_relu")
    assert avx2["ax3.2"] == (8, Annotation.VECTORIZE)
    assert neon["ax3.2"] == (4, Annotation.VECTORIZE)
    # AVX2 has 16 vector registers: 4 vectors x 2 rows of accumulators; NEON 32.
    assert avx2["ax2.1"] == (2, Annotation.UNROLL)
    assert neon["ax2.1"] == (7, Annotation.UNROLL)


def test_output_without_epilogue_is_its_own_tile() -> None:
    state = default_schedule(conv_dag((2, 8, 8, 32), 32, epilogue=False), AVX512)
    assert state.stage("conv2d_nhwc.local").location is Location.ATTACHED
    assert state.stage("conv2d_nhwc").location is Location.ROOT
    assert annotated(state, "conv2d_nhwc")["ff.2"] == (16, Annotation.VECTORIZE)


def test_odd_sizes_get_factors_that_divide() -> None:
    state = default_schedule(conv_dag((1, 13, 13, 5), 7), AVX512)
    for stage in state.stages:
        for relation in stage.relations:
            if isinstance(relation, SplitRelation) and stage.location is Location.ROOT:
                assert math.prod(relation.extents) == relation.parent_extent, stage.name
    # 7 channels: no vector width divides them, so nothing is vectorized.
    assert all(
        it.annotation is not Annotation.VECTORIZE
        for name in ("conv2d_nhwc.local", "T_relu")
        for it in state.stage(name).iters
    )


def test_nchw_conv_tiles_rows_by_width_vectors() -> None:
    state = default_schedule(conv_dag((1, 16, 12, 16), 8, "NCHW"), AVX512)
    # The padding tests W, the vector axis: it stays at root rather than putting a
    # lane-dependent select into the vector loop.
    assert state.stage("pad_temp").location is Location.ROOT
    output = annotated(state, "T_relu")
    assert output["ax3.1"] == (16, Annotation.VECTORIZE)  # W = 16: one vector
    assert output["ax2.1"] == (6, Annotation.UNROLL)  # rows of H


def test_injective_stage_is_vectorized_and_parallel_when_large() -> None:
    big = default_schedule(op_dag("transpose", (64, 32, 48), TransposeAttrs((1, 0, 2))), AVX512)
    (output,) = [s for s in big.stages if s.location is Location.ROOT and not s.is_placeholder]
    assert [(it.extent, it.annotation) for it in output.iters] == [
        (64 * 32 * 3, Annotation.PARALLEL),
        (16, Annotation.VECTORIZE),
    ]
    small = default_schedule(op_dag("relu", (3, 5)), AVX512)
    assert all(it.annotation is Annotation.NONE for s in small.stages for it in s.iters)


def test_softmax_reductions_stay_at_root() -> None:
    state = default_schedule(op_dag("softmax", (8, 1000), AxisAttrs(1)), AVX512)
    reductions = [s for s in state.stages if not s.is_placeholder and s.compute_op.reduce_axes]
    assert len(reductions) == 2
    assert all(s.location is Location.ROOT for s in reductions)
    (output,) = [s for s in state.stages if s.tensor is state.dag.outputs[0]]
    assert output.iters[-1].annotation is Annotation.VECTORIZE


def test_default_schedules_are_deterministic_replayable_steps() -> None:
    kinds: set[str] = set()
    for dag in (conv_dag((1, 9, 9, 16), 32), op_dag("softmax", (4, 33), AxisAttrs(1))):
        state = default_schedule(dag, AVX512)
        records = json.dumps([step.to_json() for step in state.steps])  # type: ignore[attr-defined]
        assert records == json.dumps(
            [step.to_json() for step in default_schedule(dag, AVX512).steps]  # type: ignore[attr-defined]
        )
        steps = [step_from_json(data) for data in json.loads(records)]
        # Replay makes new cache tensors, so compare what the stages print.
        assert str(replay(dag, steps)) == str(state)
        kinds |= {step.kind for step in steps}
    assert {"SP", "RE", "FU", "AN", "CA", "CI", "CW"} <= kinds
