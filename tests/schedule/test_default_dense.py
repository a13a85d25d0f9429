"""Default schedules of matrix products (ember/schedule/default_dense.py): the register
tile of rows x vectors x lanes, N tiles outside M tiles, the epilogue at the store, the
fallback to the generic recipe, and replayable steps. Numbers: tests/test_kernels.py."""

from __future__ import annotations

import json

import numpy as np

from ember.backend import build_kernel
from ember.graph import GraphBuilder
from ember.graph.passes import fuse
from ember.graph.passes.pack_weights import pack_weights
from ember.schedule import Annotation, Location, lower, replay, step_from_json
from ember.schedule.default import default_schedule
from ember.target import Target
from ember.te import ComputeDAG
from ember.topi import group_to_dag

# Two cores, as the expected parallel loops were worked out for: without -num-cores the
# schedules take the count of the machine running the tests.
# With the triple named, each is that CPU whatever the host is: the CPU table's caches,
# not this machine's (`ember.device.describes_this_machine`).
AVX512 = Target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=2")
AVX2 = Target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -num-cores=2")
NEON = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon -num-cores=2")

UNROLL, VECTORIZE, PARALLEL = Annotation.UNROLL, Annotation.VECTORIZE, Annotation.PARALLEL


def dense_dag(rows: int, k: int, n: int, target: Target, epilogue: bool = True) -> ComputeDAG:
    """dense (+ bias + relu) with its weight packed for `target`, as one group's DAG."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype("float32")

    b = GraphBuilder()
    y = b.add("dense", [b.input("x", (rows, k)), b.param("w", normal(n, k))])
    if epilogue:
        y = b.add("relu", [b.add("add", [y, b.param("bias", normal(n))])])
    graph, params = pack_weights(*b.build([y]), target)
    (group,) = fuse(graph, params).groups
    return group_to_dag(group)[0]


def matmul_dag(a: tuple[int, ...], b_shape: tuple[int, ...]) -> ComputeDAG:
    b = GraphBuilder()
    y = b.add("matmul", [b.input("a", a), b.input("b", b_shape)])
    (group,) = fuse(*b.build([y])).groups
    return group_to_dag(group)[0]


def iters(state, stage: str) -> list[tuple[int, Annotation]]:
    return [(it.extent, it.annotation) for it in state.stage(stage).iters]


def test_dense_gets_rows_times_vectors_of_accumulators() -> None:
    state = default_schedule(dense_dag(512, 512, 512, AVX512), AVX512)
    local = state.stage("T_dense_pack.local")
    output = state.stage("T_relu")
    assert local.location is Location.ATTACHED and state.stages[local.attach_stage] is output
    assert state.stage("T_dense_pack").location is Location.INLINED  # epilogue at the store
    # 6 rows x 4 vectors of 16: 24 accumulators beside 4 weight vectors and the input.
    assert [(it.name, it.annotation) for it in local.iters] == [
        ("k", Annotation.NONE),
        ("i", UNROLL),  # runs over the 6 rows of the region
        ("j.0", UNROLL),  # and its 4 vectors
        ("j.1", VECTORIZE),
    ]
    # 8 column tiles outside 86 row tiles (a weight panel stays in cache), in parallel.
    assert output.iters[0].name == "ax1.0@ax0.0"
    assert iters(state, "T_relu") == [(8 * 86, PARALLEL), (6, UNROLL), (4, UNROLL), (16, VECTORIZE)]


def test_vector_width_and_tile_follow_the_target() -> None:
    avx2 = default_schedule(dense_dag(64, 32, 64, AVX2), AVX2)
    assert iters(avx2, "T_relu")[1:] == [(6, UNROLL), (2, UNROLL), (8, VECTORIZE)]
    neon = default_schedule(dense_dag(64, 32, 64, NEON), NEON)
    assert iters(neon, "T_relu")[1:] == [(6, UNROLL), (4, UNROLL), (4, VECTORIZE)]


def test_a_single_row_takes_more_vectors() -> None:
    # ResNet-50's classifier: 1000 classes in 125 blocks of 8, 5 accumulation chains.
    state = default_schedule(dense_dag(1, 2048, 1000, AVX512), AVX512)
    assert iters(state, "T_relu") == [(25, PARALLEL), (5, UNROLL), (8, VECTORIZE)]


def test_batch_matmul_vectorizes_the_columns_of_its_right_operand() -> None:
    state = default_schedule(matmul_dag((12, 128, 64), (12, 64, 128)), AVX512)
    output = state.stage("T_batch_matmul_NN")
    assert output.iters[0].name == "b0@j.0@i.0"
    assert iters(state, "T_batch_matmul_NN") == [
        (12 * 2 * 22, PARALLEL),
        (6, UNROLL),
        (4, UNROLL),
        (16, VECTORIZE),
    ]


def test_columns_no_vector_divides_take_the_generic_recipe() -> None:
    state = default_schedule(matmul_dag((7, 9), (9, 13)), AVX512)
    assert [it.name for it in state.stage("T_matmul_NN.local").iters][-2:] == ["i", "j"]
    assert all(it.annotation is not VECTORIZE for it in state.stage("T_matmul_NN").iters)


def test_padded_columns_keep_the_register_tile_and_store_the_tail_lanes() -> None:
    # Q.K^T over 37 tokens: the product runs over 48 padded columns in tiles of 2
    # vectors of 8; the last tile stores 5 of its 16 columns (a predicated store), and
    # the accumulators stay in registers.
    dag = matmul_dag((2, 37, 16), (2, 16, 37))
    state = default_schedule(dag, AVX2)
    assert state.stage("T_matmul_pad").location is Location.ROOT
    assert iters(state, "T_batch_matmul_NN")[1:] == [(6, UNROLL), (2, UNROLL), (8, VECTORIZE)]
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(t.shape).astype("float32") for t in dag.inputs)
    kernel = build_kernel(lower(state), "llvm")
    out = np.full((2, 37, 37), np.nan, "float32")  # an element never written shows
    kernel(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    source = kernel.source or ""
    assert "_local[" not in source  # the accumulators are variables
    assert source.count("const float32x8 tail") == 12  # 6 rows x 2 vectors


def test_dense_schedules_are_replayable_steps() -> None:
    for dag in (dense_dag(17, 40, 48, AVX512), matmul_dag((3, 10, 12), (3, 12, 64))):
        state = default_schedule(dag, AVX512)
        records = json.dumps([step.to_json() for step in state.steps])  # type: ignore[attr-defined]
        steps = [step_from_json(data) for data in json.loads(records)]
        assert str(replay(dag, steps)) == str(state)
