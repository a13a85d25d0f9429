"""Default schedules: the structure they give each kind of DAG (register tile, vector
width from the target, inlining, parallel loops), and that they are plain replayable
steps. Numerical correctness of every op under them is tests/test_kernels.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ember.backend import build_kernel
from ember.graph import GraphBuilder
from ember.graph.ir import Attrs, Graph, NoAttrs, Params
from ember.graph.ops.attrs import (
    AxisAttrs,
    ConvAttrs,
    LayerNormAttrs,
    PoolAttrs,
    TransposeAttrs,
)
from ember.graph.passes import fuse
from ember.loop.ir import Allocate, For, ForKind, walk_stmts
from ember.schedule import Annotation, Location, State, lower, replay, step_from_json
from ember.schedule.default import default_schedule
from ember.schedule.state import SplitRelation
from ember.target import Target
from ember.te import ComputeDAG
from ember.te.evaluate import evaluate_dag
from ember.te.expr import Const
from ember.topi import group_to_dag

# Two cores, as the expected parallel loops were worked out for: without -num-cores the
# schedules take the count of the machine running the tests.
# With the triple named, each is that CPU whatever the host is: the CPU table's caches,
# not this machine's (`ember.device.describes_this_machine`).
AVX512 = Target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=2")
AVX2 = Target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -num-cores=2")
NEON = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon -num-cores=2")


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
    # 14 output pixels x 2 vectors of 16 channels (28 accumulators, and registers
    # left for both weight vectors and the broadcast input, where the worked
    # example's 7 x 4 spills one), reductions outside the tile.
    assert [(it.name, it.extent, it.annotation) for it in local.iters[-6:]] == [
        ("ry", 3, Annotation.NONE),
        ("rx", 3, Annotation.NONE),
        ("rc", 64, Annotation.NONE),
        ("xx", 56, Annotation.UNROLL),  # runs over the 14 pixels of the region
        ("ff.0", 4, Annotation.UNROLL),  # runs over the 2 vectors of the region
        ("ff.1", 16, Annotation.VECTORIZE),
    ]
    assert [(it.extent, it.annotation) for it in output.iters] == [
        (448, Annotation.PARALLEL),
        (14, Annotation.UNROLL),
        (2, Annotation.UNROLL),
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
    # AVX2 has 16 vector registers: 4 vectors x 2 rows of accumulators. NEON has 32,
    # but its FMAs take the inputs from registers too, one a row: 7 rows x 2 vectors
    # (14 accumulators, 2 weight vectors, 7 inputs) rather than 14 x 2, which spills.
    assert avx2["ax2.1"] == (2, Annotation.UNROLL) and avx2["ax3.1"] == (4, Annotation.UNROLL)
    assert neon["ax2.1"] == (7, Annotation.UNROLL) and neon["ax3.1"] == (2, Annotation.UNROLL)


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
    assert output["ax2.1"] == (12, Annotation.UNROLL)  # rows of H


def depthwise_dag(shape: tuple[int, int, int, int]) -> ComputeDAG:
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", shape)
    channels = shape[3]
    w = b.param("w", rng.standard_normal((3, 3, 1, channels)).astype("float32"))
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), channels, "NHWC", "HWIO")
    return _only_group(*b.build([b.add("conv", [x, w], attrs)]))


def test_padding_read_as_vectors_is_inlined() -> None:
    """A depthwise conv and a pool read their padded input as vectors of channels,
    one load per multiply-add: the padding is inlined (codegen turns its select into
    a branchless guarded load) rather than materialised in a pass of its own. A conv
    broadcasts one input element against a vector of weights: it keeps the pass."""
    depthwise = default_schedule(depthwise_dag((1, 28, 28, 64)), AVX512)
    assert depthwise.stage("PaddedInput").location is Location.INLINED
    attrs = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), layout="NHWC")
    pool = default_schedule(op_dag("max_pool", (1, 28, 28, 64), attrs), AVX512)
    assert pool.stage("pad_temp").location is Location.INLINED
    conv = default_schedule(conv_dag((1, 28, 28, 64), 64), AVX512)
    assert conv.stage("pad_temp").location is Location.ROOT


def test_tile_rows_avoid_l1_set_aliasing() -> None:
    """Input pixels of 1024 channels lie 4 KiB apart: 14 rows would put 14 lines
    into one 8-way L1 set on every reduction step. The tile takes 7 rows x 4 vectors;
    with 256 channels (1 KiB apart) 14 x 2 is fine."""
    rng = np.random.default_rng(0)

    def pointwise(channels: int) -> ComputeDAG:
        b = GraphBuilder()
        x = b.input("x", (1, 14, 14, channels))
        w = b.param("w", rng.standard_normal((1, 1, channels, 256)).astype("float32"))
        attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
        return _only_group(*b.build([b.add("conv", [x, w], attrs)]))

    wide = annotated(default_schedule(pointwise(1024), AVX512), "conv2d_nhwc")
    assert wide["xx.1"] == (7, Annotation.UNROLL) and wide["ff.1"] == (4, Annotation.UNROLL)
    narrow = annotated(default_schedule(pointwise(256), AVX512), "conv2d_nhwc")
    assert narrow["xx.1"] == (14, Annotation.UNROLL) and narrow["ff.1"] == (2, Annotation.UNROLL)


def test_a_tiles_weight_panel_stays_in_l2() -> None:
    """ResNet's 7x7 3x3 conv over 512 channels reduces over 4608 values: a vector of 16
    channels reads 295 KiB of weights, so within Skylake-X's 1 MiB L2 the tile takes
    2 vectors (7 x 2), not 4 (7 x 4, 1.2 MiB); a 1x1 conv over 512 keeps 7 x 4."""
    rng = np.random.default_rng(0)

    def conv(kernel: int) -> ComputeDAG:
        b = GraphBuilder()
        x = b.input("x", (1, 7, 7, 512))
        w = b.param("w", rng.standard_normal((kernel, kernel, 512, 512)).astype("float32"))
        pad = kernel // 2
        attrs = ConvAttrs((1, 1), (pad,) * 4, (1, 1), 1, "NHWC", "HWIO")
        return _only_group(*b.build([b.add("conv", [x, w], attrs)]))

    three = annotated(default_schedule(conv(3), AVX512), "conv2d_nhwc")
    assert three["xx.1"] == (7, Annotation.UNROLL) and three["ff.1"] == (2, Annotation.UNROLL)
    one = annotated(default_schedule(conv(1), AVX512), "conv2d_nhwc")
    assert one["xx.1"] == (7, Annotation.UNROLL) and one["ff.1"] == (4, Annotation.UNROLL)


def test_channel_tiles_go_outside_when_weights_outweigh_the_input() -> None:
    """1x1 conv 14x14x1024 -> 512: 2 MiB of weights, 0.8 MiB of input. On two cores
    the channel tiles are the outer part of the parallel loop (each core streams half
    the weights); on one core, and for a conv whose input is the larger (56x56x64),
    the spatial tiles are."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (1, 14, 14, 1024))
    w = b.param("w", rng.standard_normal((1, 1, 1024, 512)).astype("float32"))
    attrs = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
    dag = _only_group(*b.build([b.add("conv", [x, w], attrs)]))
    two = default_schedule(dag, AVX512)
    assert two.stage("conv2d_nhwc").iters[0].name == "ff.0@nn@yy@xx.0"
    one_core = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=1"
    one = default_schedule(dag, Target(one_core))
    assert one.stage("conv2d_nhwc").iters[0].name == "nn@yy@xx.0@ff.0"
    input_heavy = default_schedule(conv_dag((1, 56, 56, 64), 64), AVX512)
    assert input_heavy.stage("T_relu").iters[0].name == "ax0@ax1@ax2.0@ax3.0"


def test_padding_of_few_channels_keeps_its_inner_loops() -> None:
    """ResNet's first conv pads 3 channels: no vector divides them, and fusing every
    axis would rebuild four indices by division per element. Only the outer axes are
    fused (enough chunks for the cores), the rest stay loops."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (1, 112, 112, 3))
    w = b.param("w", rng.standard_normal((7, 7, 3, 64)).astype("float32"))
    attrs = ConvAttrs((2, 2), (3, 3, 3, 3), (1, 1), 1, "NHWC", "HWIO")
    state = default_schedule(_only_group(*b.build([b.add("conv", [x, w], attrs)])), AVX512)
    pad = state.stage("pad_temp")
    assert [(it.extent, it.annotation) for it in pad.iters] == [
        (118, Annotation.PARALLEL),
        (118, Annotation.NONE),
        (3, Annotation.NONE),
    ]


def test_grouped_conv_vectorizes_within_its_groups() -> None:
    """A grouped conv reads input channel (k // per_group) * c_per_group + rc: the same
    in every lane of an aligned vector when the vector fits in a group (16 lanes for
    32 channels a group, 4 lanes for 4)."""
    rng = np.random.default_rng(0)

    def grouped(groups: int) -> dict[str, tuple[int, Annotation]]:
        b = GraphBuilder()
        x = b.input("x", (1, 14, 14, 64))
        w = b.param("w", rng.standard_normal((3, 3, 64 // groups, 64)).astype("float32"))
        attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), groups, "NHWC", "HWIO")
        dag = _only_group(*b.build([b.add("conv", [x, w], attrs)]))
        return annotated(default_schedule(dag, AVX512), "group_conv2d_nhwc")

    assert grouped(2)["ff.2"] == (16, Annotation.VECTORIZE)
    assert grouped(16)["ff.2"] == (4, Annotation.VECTORIZE)


def test_injective_stage_is_vectorized_and_parallel_when_large() -> None:
    big = default_schedule(op_dag("transpose", (64, 32, 48), TransposeAttrs((1, 0, 2))), AVX512)
    (output,) = [s for s in big.stages if s.location is Location.ROOT and not s.is_placeholder]
    # The outer axis alone gives each core enough chunks: it is the parallel loop,
    # the axes inside it stay plain loops (no division per vector to rebuild them).
    assert [(it.extent, it.annotation) for it in output.iters] == [
        (32, Annotation.PARALLEL),
        (64, Annotation.NONE),
        (3, Annotation.NONE),
        (16, Annotation.VECTORIZE),
    ]
    small = default_schedule(op_dag("relu", (3, 5)), AVX512)
    assert all(it.annotation is Annotation.NONE for s in small.stages for it in s.iters)


def test_a_transpose_moving_the_innermost_axis_copies_in_tiles() -> None:
    """Kᵀ of attention (heads 12, tokens 37, width 96): the output's innermost axis
    (the tokens) reads rows of the input, the width axis reads along them. The tokens
    split into tiles of one vector's width, outside the width loop, elements left
    scalar; heads and tiles make the parallel loop. Built, the copy is the transpose,
    tail tile included."""
    dag = op_dag("transpose", (12, 37, 96), TransposeAttrs((0, 2, 1)))
    state = default_schedule(dag, AVX512)
    (output,) = [s for s in state.stages if s.location is Location.ROOT and not s.is_placeholder]
    assert [(it.name, it.extent, it.annotation) for it in output.iters] == [
        ("ax0@ax2.0", 36, Annotation.PARALLEL),
        ("ax1", 96, Annotation.NONE),
        ("ax2.1", 16, Annotation.NONE),
    ]
    x = np.random.default_rng(2).standard_normal((12, 37, 96)).astype("float32")
    result = np.full((12, 96, 37), np.nan, "float32")
    build_kernel(lower(state), "llvm -mcpu=x86-64-v2")(x, result)
    np.testing.assert_array_equal(result, x.transpose(0, 2, 1))


def test_softmax_reduces_rows_in_vectors_and_computes_exp_once_per_row() -> None:
    # Rows of 1000 = 62 vectors of 16 and a partial one (vectorize versions the loop).
    state = default_schedule(op_dag("softmax", (8, 1000), AxisAttrs(1)), AVX512)
    output = state.stage("T_softmax_norm")
    for name in ("T_softmax_maxelem", "T_softmax_expsum"):
        partial, final = state.stage(f"{name}.rf"), state.stage(name)
        assert state.stages[final.attach_stage] is output
        assert partial.location is Location.ATTACHED
        assert state.stages[partial.attach_stage] is final
        assert [(it.name, it.extent, it.annotation) for it in partial.iters][-2:] == [
            ("k.0", 63, Annotation.NONE),
            ("k.1", 16, Annotation.VECTORIZE),
        ]
    # exp is read by the sum and the division: computed once per row, not once per
    # reader, at the row loop, where the row (4 KB) stays in L1 for the division.
    exp = state.stage("T_softmax_exp")
    assert exp.location is Location.ATTACHED and state.stages[exp.attach_stage] is output
    assert (exp.iters[-1].extent, exp.iters[-1].annotation) == (8, Annotation.VECTORIZE)
    # The division's vectors divide the row: 125 of 8.
    assert (output.iters[-1].extent, output.iters[-1].annotation) == (8, Annotation.VECTORIZE)
    # One parallel loop over the rows, the row's buffers inside it.
    func = lower(state, "softmax")
    loops = [s for s in walk_stmts(func.body) if isinstance(s, For)]
    assert loops[0].extent == Const(8, "int64")
    assert all(loop.kind is not ForKind.PARALLEL for loop in loops[1:])
    allocations = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    assert sorted(b.size for b in allocations) == [1, 1, 16, 16, 1000]


def test_softmax_over_rows_longer_than_l1_runs_a_pass_per_stage() -> None:
    # A row of 16384 floats (64 KiB), twice over, does not fit in L1: exp is computed
    # once over all rows, and each stage is its own pass.
    state = default_schedule(op_dag("softmax", (4, 16384), AxisAttrs(1)), AVX512)
    for name in ("T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax_norm"):
        assert state.stage(name).location is Location.ROOT


def test_layer_norm_moments_are_computed_per_row() -> None:
    b = GraphBuilder()
    x = b.input("x", (64, 768))
    scale, bias = (b.constant(np.ones(768, np.float32)) for _ in range(2))
    y = b.add("layer_norm", [x, scale, bias], LayerNormAttrs(1, 1e-5))
    state = default_schedule(_only_group(*b.build([y])), AVX512)
    roots = [s for s in state.stages if s.location is Location.ROOT and not s.is_placeholder]
    assert [s.name for s in roots] == ["T_layer_norm"]
    output = roots[0]
    for name in ("T_layer_norm_sum", "T_layer_norm_sqsum"):
        assert state.stages[state.stage(name).attach_stage] is output
        assert state.stages[state.stage(f"{name}.rf").attach_stage] is state.stage(name)
    # One parallel loop over the 64 rows; each moment and its vector of partial
    # results are computed per row.
    func = lower(state, "layer_norm")
    loops = [s for s in walk_stmts(func.body) if isinstance(s, For)]
    assert loops[0].extent == Const(64, "int64") and loops[0].kind is ForKind.PARALLEL
    assert all(loop.kind is not ForKind.PARALLEL for loop in loops[1:])
    allocations = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    assert sorted(b.size for b in allocations) == [1, 1, 16, 16]


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


def test_awkward_extents_still_get_enough_accumulators() -> None:
    """SqueezeNet's classifier on AVX2 (16 registers): 13 output pixels by 125 vectors
    of 8 channels (125 has no divisor from 2 to 4). Under the 4-register margin the
    best tile was 1 x 1, a single FMA chain; 13 x 1 fits with a register to spare. A
    tile already at 8 or more, or one that would need every register, stays as it was
    (MobileNetV3-small's 14-pixel layers keep 7 x 1)."""
    from ember.schedule.default import MIN_ACCUMULATORS, _register_tile

    assert _register_tile(13, 14, 125, 16) == (13, 1)
    assert _register_tile(14, 14, 5, 16) == (7, 1)  # 14 x 1 would fill all 16
    rows, vectors = _register_tile(56, 14, 8, 16)
    assert rows * vectors >= MIN_ACCUMULATORS
    assert _register_tile(13, 14, 125, 32) == (13, 1)  # AVX-512 had it under the margin


def test_tiles_without_broadcast_operands_balance_rows_and_vectors() -> None:
    """AVX2's FMAs cannot read a broadcast from memory: each tile row costs a load, as
    each weight vector does. Among tiles of 8 accumulators over 56 pixels x 8 vectors
    (ResNet-50's first stage), AVX-512 takes the most rows, AVX2 the fewest loads."""
    from ember.schedule.default import _register_tile

    assert _register_tile(56, 14, 8, 32) == (14, 2)  # 28 accumulators on AVX-512
    assert _register_tile(56, 14, 8, 16) == (8, 1)
    assert _register_tile(56, 14, 8, 16, broadcast_operands=False) == (4, 2)
    state = default_schedule(conv_dag((1, 56, 56, 64), 64), AVX2)
    tile = [(it.extent, it.annotation) for it in state.stage("T_relu").iters[1:]]
    assert tile == [(4, Annotation.UNROLL), (2, Annotation.UNROLL), (8, Annotation.VECTORIZE)]


def test_rows_no_divisor_serves_get_a_tail() -> None:
    """17 output pixels (Inception's 17x17 stage) on AVX2: no divisor gives 8 FMA
    chains (1 x 4), so the tile takes 4 rows with a tail (17 = 4 x 4 + 1) by 2
    vectors. On AVX-512 (32 registers, broadcast operands) the tile with a tail is the
    one with the most accumulators that fit (with its weight vectors and the
    broadcast), discounted by the rows the tail wastes: 9 x 3 over 17 pixels of 12
    vectors (27 accumulators, 18 rows for 17), 13 x 1 over 73 pixels of 5 vectors (no
    vector divisor), 7 x 2 kept over 7 pixels of 2 vectors."""
    from ember.schedule.default import _register_tile

    assert _register_tile(17, 14, 24, 16, broadcast_operands=False) == (4, 2)
    assert _register_tile(7, 14, 64, 16, broadcast_operands=False) == (4, 2)
    assert _register_tile(14, 14, 5, 16, broadcast_operands=False) == (7, 1)  # one vector
    assert _register_tile(17, 14, 12, 32) == (9, 3)
    assert _register_tile(73, 14, 5, 32) == (13, 1)
    assert _register_tile(7, 14, 2, 32) == (7, 2)


@pytest.mark.parametrize(
    ("target", "channels", "tile"), [(AVX2, 32, (4, 2, 8)), (AVX512, 48, (9, 3, 16))]
)
def test_tiles_with_a_row_tail_compute_the_conv(
    target: Target, channels: int, tile: tuple[int, int, int]
) -> None:
    """The tail's rows are guarded, and the kernel computes the conv (built for SSE:
    GCC's vector types run AVX-512 code on any x86)."""
    dag = conv_dag((1, 17, 17, 16), channels)
    state = default_schedule(dag, target)
    iters = [(it.extent, it.annotation) for it in state.stage("T_relu").iters[1:]]
    unroll, vectorize = Annotation.UNROLL, Annotation.VECTORIZE
    assert iters == [(tile[0], unroll), (tile[1], unroll), (tile[2], vectorize)]
    inputs = [
        np.random.default_rng(1).standard_normal(t.shape).astype("float32") for t in dag.inputs
    ]
    (expected,) = evaluate_dag(dag, inputs)
    output = np.full(expected.shape, np.nan, "float32")
    build_kernel(lower(state), "llvm -mcpu=x86-64-v2")(*inputs, output)
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4)
