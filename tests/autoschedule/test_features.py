"""Program features: stable names and shapes, values checked by hand on a 4x8 matmul
with a known schedule, zeros for a state that does not lower."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from quantized_models import conv_chain, quantized
from sketch_cases import DAGS, task_of

from ember import te
from ember.autoschedule import extract_tasks, generate_sketches
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.features import (
    FEATURE_NAMES,
    NUM_BUFFER_SLOTS,
    extract_features,
    extract_features_batch,
)
from ember.frontend import from_onnx
from ember.schedule import (
    Annotation,
    AnnotationStep,
    Location,
    ReorderStep,
    SplitStep,
    State,
)
from ember.schedule.default import default_schedule


def log2p(x: float) -> float:
    return math.log2(1 + x)


def test_names_are_unique_and_fixed() -> None:
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) == 154
    assert FEATURE_NAMES[0] == "float_add_sub"
    assert FEATURE_NAMES[-1] == f"buf{NUM_BUFFER_SLOTS - 1}_lines_per_reuse"


@pytest.mark.parametrize("name", sorted(DAGS))
def test_every_sketch_kind_gives_finite_rows(name: str) -> None:
    task = task_of(name)
    states = sample_initial_population(task, generate_sketches(task), 6, random.Random(0))
    for rows in extract_features_batch(states):
        assert rows.dtype == np.float32
        assert rows.ndim == 2 and rows.shape[1] == len(FEATURE_NAMES)
        assert np.isfinite(rows).all()
        assert rows.any()  # lowered: not the all-zero row of a failure


def matmul_state() -> State:
    """C[i, j] = sum_k A[i, k] * B[k, j] (4x16 by 16x8); j split 2 x 4, loops
    i, j.0, k, j.1 with j.1 vectorized."""
    a = te.placeholder((4, 16), name="A")
    b = te.placeholder((16, 8), name="B")
    k = te.reduce_axis(16, "k")
    c = te.compute((4, 8), lambda i, j: te.reduce_sum(a[i, k] * b[k, j], k), name="C")
    state = State.initial(te.ComputeDAG([c]))
    stage = state.stage_index("C")  # iters: i, j, k
    state = SplitStep(stage, 1, (4,)).apply(state)  # i, j.0, j.1, k
    state = ReorderStep(stage, (0, 1, 3, 2)).apply(state)  # i, j.0, k, j.1
    return AnnotationStep(stage, 3, Annotation.VECTORIZE).apply(state)


def named(row: np.ndarray) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, row.tolist(), strict=True))


def test_matmul_values_by_hand() -> None:
    init, update = (named(row) for row in extract_features(matmul_state()))
    # Init: C[i, j.0*4 + j.1] = 0 under i, j.0, j.1 (the k loop is not around it).
    assert init["is_init"] == 1 and init["is_update"] == 0
    assert init["outer_prod"] == pytest.approx(log2p(32))
    # Update: loops i(4), j.0(2), k(16), j.1(4, vectorized): 512 executions.
    assert update["is_update"] == 1 and update["is_init"] == 0
    assert update["num_loops"] == pytest.approx(log2p(4))
    assert update["outer_prod"] == pytest.approx(log2p(512))
    assert update["float_fma"] == pytest.approx(log2p(512))
    assert update["float_add_sub"] == 0 and update["float_mul"] == 0
    assert update["vec_num"] == pytest.approx(log2p(1))
    assert update["vec_len"] == pytest.approx(log2p(4))
    assert update["vec_is_innermost"] == 1 and update["vec_legal"] == 1
    assert update["reduce_loops"] == pytest.approx(log2p(1))  # k
    assert update["reduce_prod"] == pytest.approx(log2p(16))
    assert update["par_num"] == 0 and update["unroll_num"] == 0
    # Buffers by bytes accessed: C (read and written: 2 x 512 x 4 B), then A and B.
    c, *rest = (buffer_slot(update, slot) for slot in range(3))
    by_unique = {round(2 ** s["unique_bytes"] - 1): s for s in rest}
    a, b = by_unique[4 * 16 * 4], by_unique[16 * 8 * 4]
    assert c["is_read"] == c["is_write"] == 1
    assert c["bytes"] == pytest.approx(log2p(2 * 512 * 4))
    assert c["unique_bytes"] == pytest.approx(log2p(4 * 8 * 4))
    assert c["stride_is_1"] == 1 and c["vec_contiguous"] == 1
    # C does not move with k: reused across k, 4 iterations (j.1) apart.
    assert c["reuse_loop_carried"] == 1
    assert c["reuse_count"] == pytest.approx(log2p(16))
    assert c["reuse_distance_iters"] == pytest.approx(log2p(4))
    # A[i, k] does not move with j.1 (stride 0, broadcast), reused across it.
    assert a["stride_is_0"] == 1 and a["vec_contiguous"] == 0
    assert a["reuse_count"] == pytest.approx(log2p(4))
    # B[k, j.0*4 + j.1]: contiguous in the vector loop, every element read 4 times (i).
    assert b["stride_is_1"] == 1 and b["vec_contiguous"] == 1
    assert b["reuse_loop_carried"] == 1 and b["reuse_count"] == pytest.approx(log2p(4))
    assert b["unique_lines"] == pytest.approx(log2p(16 * 1))  # 16 rows of 32 B
    assert buffer_slot(update, 3)["bytes"] == 0  # empty slots are zero


def buffer_slot(row: dict[str, float], slot: int) -> dict[str, float]:
    prefix = f"buf{slot}_"
    return {name[len(prefix) :]: v for name, v in row.items() if name.startswith(prefix)}


def test_state_that_fails_to_lower_gives_one_zero_row() -> None:
    task = task_of("dense")
    state = State.initial(task.compute_dag)
    index = state.stage_index("T_dense")
    # Attached at an iterator its consumer does not have: lowering never emits the
    # stage, and T_add reads a tensor nobody computes.
    broken = replace(state.stages[index], location=Location.ATTACHED, attach_stage=index + 2)
    broken = replace(broken, attach_iter="missing")
    rows = extract_features(state.with_stage(index, broken))
    assert rows.shape == (1, len(FEATURE_NAMES))
    assert not rows.any()


def test_quantized_products_are_counted_as_byte_multiplies() -> None:
    """A quantized conv's task counts its uint8 x int8 products (`byte_mul`, what the
    dot-product instructions compute), not as index arithmetic; a float conv has none."""
    model, shape = conv_chain()
    graph, params = from_onnx(quantized(model, shape))
    tasks, _ = extract_tasks(graph, params, "llvm")
    column = FEATURE_NAMES.index("byte_mul")
    for task in tasks:
        rows = extract_features(default_schedule(task.compute_dag, task.target))
        quantized_conv = "qconv" in task.desc
        assert (rows[:, column].max() > 0) == quantized_conv, task.desc
    assert any("qconv" in task.desc for task in tasks)
