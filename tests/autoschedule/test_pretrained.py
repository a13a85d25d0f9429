"""The pretrained cost model shipped with Ember: chosen by machine class, refused with
what to do where none is shipped, and (loaded as a warm start) it ranks the schedules
of a conv it never saw, before any measurement, far better than a fresh model."""

from __future__ import annotations

import dataclasses
import random

import pytest
from sketch_cases import HARDWARE, conv2d
from test_xgb_model import kendall_tau, modelled_cost

from ember.autoschedule import SearchTask, generate_sketches
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.pretrained import SHIPPED, machine_class, pretrained_model_file
from ember.autoschedule.xgb_model import CostModelError, XGBModel
from ember.target import Target

X86 = Target("llvm -mtriple=x86_64-linux-gnu")


def test_machine_classes_are_the_architecture_and_its_vector_width() -> None:
    assert machine_class(HARDWARE, X86) == "x86_64-avx512"
    assert machine_class(dataclasses.replace(HARDWARE, vector_bytes=32), X86) == "x86_64-avx2"
    assert machine_class(dataclasses.replace(HARDWARE, vector_bytes=16), X86) == "x86_64-sse"
    arm = Target("llvm -mtriple=aarch64-linux-gnu")
    assert machine_class(dataclasses.replace(HARDWARE, vector_bytes=16), arm) == "aarch64-128bit"


def test_every_shipped_model_is_installed_and_others_are_refused_with_what_to_do() -> None:
    for name in SHIPPED.values():
        path = pretrained_model_file(HARDWARE, X86)
        assert path.name == name and path.is_file()
    arm = Target("llvm -mtriple=aarch64-linux-gnu")
    with pytest.raises(CostModelError, match=r"no pretrained.*aarch64.*records train.*warm-start"):
        pretrained_model_file(dataclasses.replace(HARDWARE, vector_bytes=16), arm)


def test_the_shipped_model_ranks_a_conv_it_never_saw_before_any_measurement() -> None:
    """A 14x14, 96 -> 96 conv (no network Ember was trained on has it) and 64 random
    schedules of it, costed by the state alone (vector lanes x register tile: what
    makes these schedules fast on any SIMD machine, and independent of the machine's
    load). The shipped model, trained on timings, must order them much as that cost
    does; a fresh model orders them at random."""
    task = SearchTask.create(conv2d(size=14, channels=96, filters=96), X86, HARDWARE)
    states = sample_initial_population(task, generate_sketches(task), 64, random.Random(3))
    throughput = [1.0 / modelled_cost(state) for state in states]
    assert kendall_tau(throughput, throughput) > 0.3  # they differ
    warm, fresh = XGBModel(seed=0), XGBModel(seed=0)
    try:
        warm.set_base(pretrained_model_file(HARDWARE, X86))
        warm_tau = kendall_tau(warm.predict(task, states), throughput)
        fresh_tau = kendall_tau(fresh.predict(task, states), throughput)
    finally:
        warm.close()
        fresh.close()
    assert warm_tau > 0.3 and warm_tau > fresh_tau + 0.2, (warm_tau, fresh_tau)
