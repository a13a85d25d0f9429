"""Task extraction (`extract_tasks`, `ember tasks`) and the hardware parameters of a
search task."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from ember.autoschedule import HardwareParams, SearchTask, extract_tasks
from ember.autoschedule.task import format_task, is_simple
from ember.cli import main
from ember.device import device_model
from ember.errors import EmberError, TargetError
from ember.graph.passes import fuse
from ember.partition import optimize
from ember.target import Target
from ember.testing import get_workload
from ember.topi import group_to_dag

IMAGE = (3, 32, 32)


@pytest.fixture(scope="module")
def resnet18() -> tuple[list[SearchTask], list[int]]:
    graph, params = get_workload("resnet-18", image_shape=IMAGE)
    return extract_tasks(graph, params, "llvm")


def _groups(name: str) -> list[str]:
    """Workload key of every fused group the build compiles, in order."""
    graph, params = get_workload(name, image_shape=IMAGE)
    optimized, arrays = optimize(graph, params, Target("llvm"))
    return [group_to_dag(group)[0].workload_key for group in fuse(optimized, arrays).groups]


def test_resnet18_tasks_and_weights(resnet18: tuple[list[SearchTask], list[int]]) -> None:
    tasks, weights = resnet18
    keys = _groups("resnet-18")
    # 25 groups: 20 convs (16 3x3 in the blocks, the stem, 3 1x1 shortcuts), max pool,
    # global pool, dense (reading the pool's output through the reshape between them),
    # softmax, and the input transpose.
    assert len(keys) == 25
    assert len(tasks) == 19
    assert sum(weights) == 24
    assert len({task.workload_key for task in tasks}) == len(tasks)
    for task, weight in zip(tasks, weights, strict=True):
        assert weight == keys.count(task.workload_key)
        assert task.flop_count == task.compute_dag.flop_count > 0
        assert task.target == Target("llvm")
        assert task.workload_key == task.compute_dag.workload_key


def test_identical_convs_share_a_task(resnet18: tuple[list[SearchTask], list[int]]) -> None:
    tasks, weights = resnet18
    shared = [(t, w) for t, w in zip(tasks, weights, strict=True) if w > 1]
    # Each stage's second block repeats its 3x3 conv with the residual add; in the
    # first stage (no downsampling) the blocks' first convs match too.
    assert len(shared) == 5
    assert all("conv" in task.desc for task, _ in shared)
    assert any(task.desc.startswith("conv_pack_add_add_relu") for task, _ in shared)


def test_weight_inputs_are_the_groups_params(
    resnet18: tuple[list[SearchTask], list[int]],
) -> None:
    tasks, _ = resnet18
    for task in tasks:
        # Convs and denses read data, their (packed) weights, their bias; a residual
        # add reads another group's output: an activation, not a weight. (The
        # classifier's dense reads the pool's output through a reshape.)
        expected = {1, 2} if task.desc.startswith(("conv", "dense", "reshape_dense")) else set()
        assert task.weight_inputs == expected, task.desc
    residual = [task for task in tasks if len(task.compute_dag.inputs) == 4]
    assert residual and all(3 not in task.weight_inputs for task in residual)
    graph, params = get_workload("mlp", batch_size=1)
    mlp, _ = extract_tasks(graph, params, "llvm")
    weights = [tuple(task.compute_dag.inputs[i].shape) for task in mlp for i in task.weight_inputs]
    bias = {(n,) for n in (128, 64, 1000)}
    assert len(weights) == 6 and bias <= set(weights)


def test_weight_inputs_are_not_part_of_the_identity(
    resnet18: tuple[list[SearchTask], list[int]],
) -> None:
    task = resnet18[0][0]
    bare = SearchTask.create(task.compute_dag, task.target, task.hardware_params)
    assert bare.weight_inputs == frozenset() and bare == task and hash(bare) == hash(task)
    assert bare.workload_key == task.workload_key
    with pytest.raises(EmberError, match=r"weight_inputs \[3\] must be positions in the DAG's 3"):
        SearchTask.create(task.compute_dag, task.target, weight_inputs=[3])


def test_simple_tasks_only_when_asked(resnet18: tuple[list[SearchTask], list[int]]) -> None:
    graph, params = get_workload("resnet-18", image_shape=IMAGE)
    tasks, weights = extract_tasks(graph, params, "llvm", include_simple_tasks=True)
    assert len(tasks) == len(resnet18[0]) + 1
    assert sum(weights) == 25
    simple = [task for task in tasks if is_simple(task.compute_dag)]
    assert {task.desc for task in simple} == {"transpose"}  # the reshape is read through
    assert not any(is_simple(task.compute_dag) for task in resnet18[0])


def test_format_task_follows_the_seed(resnet18: tuple[list[SearchTask], list[int]]) -> None:
    tasks, weights = resnet18
    text = format_task(0, tasks[0], weights[0])
    lines = text.splitlines()
    header = re.fullmatch(r"========== Task 0 \(workload key: (.*)\) ==========", lines[0])
    assert header is not None
    key = json.loads(header.group(1))
    assert re.fullmatch(r"[0-9a-f]{32}", key[0])
    lanes = device_model(tasks[0].target).lanes("float32")  # stem weight packed by lanes
    assert key[1:] == [[1, 32, 32, 3], [64 // lanes, 7, 7, 3, lanes], [1, 1, 64], [1, 16, 16, 64]]
    assert lines[1] == "placeholder = PLACEHOLDER [1, 32, 32, 3]"
    assert any(line.startswith("conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[") for line in lines)
    assert lines[-2] == "T_relu(ax0, ax1, ax2, ax3) = max(T_add[ax0, ax1, ax2, ax3], 0f)"
    assert lines[-1] == f"# conv_pack_add_relu: {tasks[0].flop_count} FLOPs, weight 1"


def test_hardware_params_from_a_target_string() -> None:
    target = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon -num-cores=6")
    params = HardwareParams.for_target(target)
    assert params.num_cores == 6
    assert params.vector_bytes == 16
    assert params.cache_line_bytes == 64
    assert params.l1_cache_bytes > 0
    avx512 = HardwareParams.for_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512")
    assert avx512.vector_bytes == 64


def test_hardware_params_overrides() -> None:
    params = HardwareParams.for_target("llvm", num_cores=3, l2_cache_bytes=1 << 20)
    assert (params.num_cores, params.l2_cache_bytes) == (3, 1 << 20)
    assert params.vector_bytes == device_model(Target("llvm")).vector_bytes
    with pytest.raises(TargetError, match="unknown hardware parameters"):
        HardwareParams.for_target("llvm", cores=3)
    with pytest.raises(TargetError, match="num_cores=0"):
        HardwareParams.for_target("llvm", num_cores=0)
    graph, params_in = get_workload("mlp", batch_size=1)
    tasks, _ = extract_tasks(graph, params_in, "llvm", hardware_params=params)
    assert all(task.hardware_params == params for task in tasks)
    assert dataclasses.replace(tasks[0], hardware_params=params) == tasks[0]


def test_cli_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tasks", "resnet-18", "--target", "llvm", "--input-shapes", "data:[1,3,32,32]"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^========== Task \d+ \(workload key: \[", out, re.M)) == 19
    assert "conv2d_nhwc(nn, yy, xx, ff) += " in out
    assert re.search(r"^# conv_pack_add_add_relu\w*: \d+ FLOPs, weight 2$", out, re.M)
    assert out.rstrip().endswith("19 tasks from 24 groups for target 'llvm', 75.20M FLOPs in all")
    assert main([*argv, "--include-simple-tasks"]) == 0
    assert "20 tasks from 25 groups" in capsys.readouterr().out


def test_cli_tasks_bad_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "resnet-18", "--target", "vulkan"]) == 2
    assert "unknown target kind 'vulkan'" in capsys.readouterr().err
