"""Sketch generation: which sketches each kind of DAG gets, and that every sketch is a
legal state of placeholder factors built from the task's DAG."""

from __future__ import annotations

import pytest
from sketch_cases import DAGS, task_of

from ember.autoschedule.sketch import generate_sketches
from ember.schedule import Location, SplitStep, replay

CACHE_WRITE_EPILOGUE = ("multi_level_tiling", "fuse_consumer", "cache_write")

EXPECTED_RULES = {
    # Padding a conv broadcasts stays at root first (the default schedule's choice),
    # inlined second; the bias and ReLU are inlined into the output the tile stores.
    "conv2d_3x3": [
        ("inline", "keep_padding_at_root", *CACHE_WRITE_EPILOGUE),
        ("inline", *CACHE_WRITE_EPILOGUE),
    ],
    "conv2d_1x1": [("inline", *CACHE_WRITE_EPILOGUE)],
    # A conv that is itself the output: with and without cache_write, per padding.
    "conv2d_packed": [
        ("inline", "keep_padding_at_root", *CACHE_WRITE_EPILOGUE),
        ("inline", *CACHE_WRITE_EPILOGUE),
    ],
    "conv2d_strided": [
        ("keep_padding_at_root", "multi_level_tiling", "cache_write"),
        ("keep_padding_at_root", "multi_level_tiling"),
        ("inline", "multi_level_tiling", "cache_write"),
        ("inline", "multi_level_tiling"),
    ],
    # Padding read as vectors of channels is inlined first.
    "depthwise": [
        ("inline", "multi_level_tiling", "cache_write"),
        ("inline", "multi_level_tiling"),
        ("keep_padding_at_root", "multi_level_tiling", "cache_write"),
        ("keep_padding_at_root", "multi_level_tiling"),
    ],
    "dense": [CACHE_WRITE_EPILOGUE],
    "batch_matmul": [("multi_level_tiling", "cache_write"), ("multi_level_tiling",)],
    # One row on two cores: the row reductions also get an rfactor sketch.
    "softmax": [("inline",), ("inline", "rfactor")],
    # A pool reads every element once: no tiling, it stays at root.
    "max_pool": [("inline",)],
}


@pytest.mark.parametrize("name", sorted(DAGS))
def test_sketches_of_each_dag_kind(name: str) -> None:
    sketches = generate_sketches(task_of(name))
    assert [s.rules for s in sketches] == EXPECTED_RULES[name]


@pytest.mark.parametrize("name", sorted(DAGS))
def test_sketches_are_deterministic_states_of_placeholder_splits(name: str) -> None:
    task = task_of(name)
    sketches = generate_sketches(task)
    again = generate_sketches(task)
    for sketch, other in zip(sketches, again, strict=True):
        assert sketch.state.steps == other.state.steps
        assert sketch.state.dag is task.compute_dag
        for step in sketch.state.steps:
            if isinstance(step, SplitStep):
                assert set(step.factors) == {1}
        rebuilt = replay(task.compute_dag, sketch.state.steps)  # type: ignore[arg-type]
        assert str(rebuilt) == str(sketch.state)


def test_conv_sketch_has_the_default_schedules_structure() -> None:
    sketch = generate_sketches(task_of("conv2d_3x3"))[0]
    state = sketch.state
    local = state.stage("conv2d_nhwc.local")
    relu = state.stage_index("relu")
    assert local.location is Location.ATTACHED and local.attach_stage == relu
    assert local.scope == "local"
    assert local.attach_iter == "f.1"  # the output's last S1 loop
    assert state.stage("pad_temp").location is Location.ROOT
    assert state.stage("conv2d_nhwc").location is Location.INLINED
    # Output: S0 S1 S2 per axis, then the lanes; accumulator: R0 S2' R1 S3 lanes.
    assert [it.name for it in state.stages[relu].iters][-5:] == ["n.2", "y.2", "x.2", "f.2", "f.3"]
    names = [it.name for it in local.iters]
    assert names[:3] == ["ry.0", "rx.0", "rc.0"]
    assert names[-5:] == ["n.1", "y.1", "x.1", "f.1", "f.2"]


def test_rfactor_sketch_makes_partial_reductions() -> None:
    state = generate_sketches(task_of("softmax"))[1].state
    names = [s.name for s in state.stages]
    assert "T_max.rf" in names and "T_sum.rf" in names
    partial = state.stage("T_max.rf")
    assert [it.name for it in partial.iters] == ["i", "k1.1.0", "k1.0", "k1.1.1"]
