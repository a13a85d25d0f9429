"""ComputeDAG golden printouts (the seed's tasks, built from graphs through fuse and
group_to_dag), workload-key stability across processes, and FLOP counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from ember.graph.builder import GraphBuilder
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.passes import fuse
from ember.te import ComputeDAG
from ember.topi import group_to_dag


def _conv_task(
    data: tuple[int, ...],
    weight: tuple[int, ...],
    strides: int,
    padding: int,
    epilogue: list[tuple[str, tuple[int, ...]]],
) -> ComputeDAG:
    """The DAG of the one fused group of conv2d (NHWC, HWIO) + broadcast epilogue + relu."""
    b = GraphBuilder()
    x = b.input("data", data)
    w = b.param("weight", np.zeros(weight, "float32"))
    attrs = ConvAttrs((strides, strides), (padding,) * 4, (1, 1), 1, "NHWC", "HWIO")
    y = b.add("conv", [x, w], attrs)
    for op, shape in epilogue:
        y = b.add(op, [y, b.param(op, np.zeros(shape, "float32"))])
    graph, params = b.build([b.add("relu", [y])])
    (group,) = fuse(graph, params).groups
    dag, _ = group_to_dag(group)
    return dag


def test_conv_bias_relu_prints_as_the_seeds_task_0() -> None:
    dag = _conv_task((1, 7, 7, 1024), (1, 1, 1024, 1024), 1, 0, [("add", (1, 1, 1, 1024))])
    assert str(dag).splitlines() == [
        "placeholder = PLACEHOLDER [1, 7, 7, 1024]",
        "pad_temp(i0, i1, i2, i3) = placeholder[i0, i1, i2, i3]",
        "placeholder = PLACEHOLDER [1, 1, 1024, 1024]",
        "conv2d_nhwc(nn, yy, xx, ff) += "
        "(pad_temp[nn, (yy + ry), (xx + rx), rc]*placeholder[ry, rx, rc, ff])",
        "placeholder = PLACEHOLDER [1, 1, 1, 1024]",
        "T_add(ax0, ax1, ax2, ax3) = "
        "(conv2d_nhwc[ax0, ax1, ax2, ax3] + placeholder[ax0, 0, 0, ax3])",
        "T_relu(ax0, ax1, ax2, ax3) = max(T_add[ax0, ax1, ax2, ax3], 0f)",
    ]
    key = json.loads(dag.workload_key)
    assert key[1:] == [[1, 7, 7, 1024], [1, 1, 1024, 1024], [1, 1, 1, 1024], [1, 7, 7, 1024]]


def test_padded_strided_conv_prints_as_the_seeds_task_16() -> None:
    epilogue = [("multiply", (1, 112, 1, 1)), ("add", (1, 112, 1, 1))]
    dag = _conv_task((1, 224, 224, 3), (3, 3, 3, 32), 2, 1, epilogue)
    assert str(dag).splitlines() == [
        "placeholder = PLACEHOLDER [1, 224, 224, 3]",
        "pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i1 >= 1) && (i1 < 225)) && "
        "(i2 >= 1)) && (i2 < 225)), placeholder[i0, (i1 - 1), (i2 - 1), i3], 0f)",
        "placeholder = PLACEHOLDER [3, 3, 3, 32]",
        "conv2d_nhwc(nn, yy, xx, ff) += "
        "(pad_temp[nn, ((yy*2) + ry), ((xx*2) + rx), rc]*placeholder[ry, rx, rc, ff])",
        "placeholder = PLACEHOLDER [1, 112, 1, 1]",
        "T_multiply(ax0, ax1, ax2, ax3) = "
        "(conv2d_nhwc[ax0, ax1, ax2, ax3]*placeholder[ax0, ax1, 0, 0])",
        "placeholder = PLACEHOLDER [1, 112, 1, 1]",
        "T_add(ax0, ax1, ax2, ax3) = "
        "(T_multiply[ax0, ax1, ax2, ax3] + placeholder[ax0, ax1, 0, 0])",
        "T_relu(ax0, ax1, ax2, ax3) = max(T_add[ax0, ax1, ax2, ax3], 0f)",
    ]


_KEY_PROGRAM = """
from ember.graph.ir import NoAttrs
from ember.graph.ops.attrs import ConvAttrs
from ember.te import ComputeDAG, placeholder
from ember.topi import declare

data = placeholder((1, 14, 14, 256))
weight = placeholder((3, 3, 256, 512))
bias = placeholder((1, 1, 1, 512))
attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
(conv,) = declare("conv", [data, weight], attrs)
(added,) = declare("add", [conv, bias], NoAttrs())
(relu,) = declare("relu", [added], NoAttrs())
print(ComputeDAG([relu], [data, weight, bias]).workload_key)
"""


def _key_in_fresh_process(hash_seed: str) -> str:
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run(
        [sys.executable, "-c", _KEY_PROGRAM],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
        timeout=120,
    )
    return result.stdout.strip()


def test_workload_key_is_the_same_in_fresh_processes() -> None:
    first, second = _key_in_fresh_process("1"), _key_in_fresh_process("2")
    assert first == second
    namespace: dict[str, object] = {}
    exec(_KEY_PROGRAM.replace("print(", "key = ("), namespace)
    assert namespace["key"] == first
    assert json.loads(first)[1:] == [
        [1, 14, 14, 256],
        [3, 3, 256, 512],
        [1, 1, 1, 512],
        [1, 14, 14, 512],
    ]


def test_workload_key_differs_with_shapes_and_not_with_how_it_was_built() -> None:
    small = _conv_task((1, 8, 8, 16), (3, 3, 16, 16), 1, 1, [("add", (1, 1, 1, 16))])
    again = _conv_task((1, 8, 8, 16), (3, 3, 16, 16), 1, 1, [("add", (1, 1, 1, 16))])
    wider = _conv_task((1, 8, 8, 16), (3, 3, 16, 32), 1, 1, [("add", (1, 1, 1, 32))])
    strided = _conv_task((1, 8, 8, 16), (3, 3, 16, 16), 2, 1, [("add", (1, 1, 1, 16))])
    assert small.workload_key == again.workload_key
    assert len({small.workload_key, wider.workload_key, strided.workload_key}) == 3


def test_flop_count_of_conv_bias_relu() -> None:
    dag = _conv_task((1, 8, 8, 16), (3, 3, 16, 32), 1, 1, [("add", (1, 1, 1, 32))])
    outputs = 8 * 8 * 32
    multiply_adds = outputs * 3 * 3 * 16
    # Two per multiply-add; one per output for the bias and one for the relu; the
    # padding stage's index comparisons are not floating-point work.
    assert dag.flop_count == 2 * multiply_adds + 2 * outputs
