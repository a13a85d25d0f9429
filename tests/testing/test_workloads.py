"""The built-in workloads: structure, shapes, layouts, dtypes, weights, errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ember.errors import WorkloadError
from ember.graph import Graph, interpret, verify
from ember.graph.ir import Params, param_count
from ember.testing import get_workload, list_workloads

NAMES = [
    "resnet-18",
    "resnet-34",
    "resnet-50",
    "resnet-101",
    "resnet-152",
    "resnet3d-18",
    "resnet3d-34",
    "resnet3d-50",
    "mobilenet",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "squeezenet_v1.1",
    "inception_v3",
    "mlp",
]

# Trainable parameters (batch-norm moving statistics excluded) of the reference
# definitions of these networks: torchvision's resnet18..152, mobilenet_v2,
# mobilenet_v3_small, squeezenet1_1, inception_v3 (without the auxiliary head) and
# r3d_18 (whose Kinetics head has 400 classes instead of 1000: 33,371,472 + 600 * 513),
# Keras' MobileNet.
# Equal counts mean the same layers with the same kernel sizes and widths.
PUBLISHED_PARAMETERS = {
    "resnet-18": 11_689_512,
    "resnet-34": 21_797_672,
    "resnet-50": 25_557_032,
    "resnet-101": 44_549_160,
    "resnet-152": 60_192_808,
    "resnet3d-18": 33_371_472 + 600 * 513,
    "mobilenet": 4_231_976,
    "mobilenet_v2": 3_504_872,
    "mobilenet_v3_small": 2_542_856,
    "squeezenet_v1.1": 1_235_496,
    "inception_v3": 23_834_568,
    "mlp": 3 * 224 * 224 * 128 + 128 + 128 * 64 + 64 + 64 * 1000 + 1000,
}

# Reduced inputs (channels first) that keep the interpreter fast but still pass
# through every layer with a spatial size of at least 1. 66 makes squeezenet's
# ceil-mode pools round up; 75 is the smallest input inception_v3 accepts.
SMALL = {
    "resnet3d-18": (3, 8, 32, 32),
    "resnet3d-34": (3, 8, 32, 32),
    "resnet3d-50": (3, 8, 32, 32),
    "squeezenet_v1.1": (3, 66, 66),
    "inception_v3": (3, 75, 75),
    "mlp": (3, 16, 16),
}


def small_shape(name: str, channels_last: bool = False) -> tuple[int, ...]:
    channels, *spatial = SMALL.get(name, (3, 64, 64))
    return (*spatial, channels) if channels_last else (channels, *spatial)


def to_channels_last(array: np.ndarray) -> np.ndarray:
    return np.moveaxis(array, 1, -1)


def trainable_parameters(graph: Graph) -> int:
    return param_count(graph) - sum(v.type.size for v in graph.params if "moving" in v.name)


def run(graph: Graph, params: Params, data: np.ndarray) -> np.ndarray:
    return interpret(graph, params, {"data": data})[graph.outputs[0].name]


def test_list_workloads_names_every_network() -> None:
    assert list_workloads() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_default_input_and_output(name: str) -> None:
    graph, params = get_workload(name)
    verify(graph, params)
    (data,) = graph.inputs
    if name.startswith("resnet3d-"):
        image: tuple[int, ...] = (3, 16, 112, 112)
    else:
        image = (3, 299, 299) if name == "inception_v3" else (3, 224, 224)
    assert data.name == "data"
    assert data.shape == (1, *image)
    assert [v.type.shape for v in graph.outputs] == [(1, 1000)]
    assert graph.outputs[0].dtype == "float32"
    assert graph.nodes[-1].op == "softmax"
    if name in PUBLISHED_PARAMETERS:
        assert trainable_parameters(graph) == PUBLISHED_PARAMETERS[name]


@pytest.mark.parametrize("name", NAMES)
def test_channels_last_batch_two(name: str) -> None:
    graph, params = get_workload(
        name, batch_size=2, layout="NHWC", image_shape=small_shape(name, channels_last=True)
    )
    verify(graph, params)
    assert graph.inputs[0].shape == (2, *small_shape(name, channels_last=True))
    assert graph.outputs[0].shape == (2, 1000)
    layouts = {getattr(n.attrs, "layout", None) for n in graph.nodes} - {None}
    assert layouts == (set() if name == "mlp" else {"NDHWC" if "3d" in name else "NHWC"})


@pytest.mark.parametrize("name", ["resnet-18", "squeezenet_v1.1", "resnet3d-18"])
def test_channels_first_batch_two(name: str) -> None:
    graph, params = get_workload(name, batch_size=2, image_shape=small_shape(name))
    verify(graph, params)
    assert graph.inputs[0].shape == (2, *small_shape(name))
    assert graph.outputs[0].shape == (2, 1000)


def test_resnet3d_takes_2d_layout_names_and_its_own() -> None:
    for layout, expected in (("NCHW", "NCDHW"), ("NDHWC", "NDHWC"), ("NHWC", "NDHWC")):
        graph, _ = get_workload("resnet3d-18", layout=layout, image_shape=None)
        conv = next(n for n in graph.nodes if n.op == "conv")
        assert conv.attrs.layout == expected  # type: ignore[attr-defined]
    graph, _ = get_workload("resnet3d-18", layout="NDHWC")
    assert graph.inputs[0].shape == (1, 16, 112, 112, 3)


# Known layer counts of each architecture: convs (including shortcut projections),
# residual adds, concats.
STRUCTURE = {
    "resnet-18": {"conv": 20, "add": 8 + 1},
    "resnet-50": {"conv": 53, "add": 16 + 1},
    "resnet-152": {"conv": 155, "add": 50 + 1},
    "mobilenet": {"conv": 27, "concat": 0},
    "mobilenet_v2": {"conv": 52, "add": 10 + 1, "clip": 35},
    # 6 residual adds, 18 squeeze-and-excitation conv biases, 2 dense biases.
    "mobilenet_v3_small": {"conv": 52, "add": 6 + 18 + 2, "hard_sigmoid": 9, "hard_swish": 19},
    "squeezenet_v1.1": {"conv": 26, "concat": 8, "max_pool": 3},
    "inception_v3": {"conv": 94, "concat": 11, "avg_pool": 9, "max_pool": 4},
    "mlp": {"dense": 3, "relu": 2},
}


@pytest.mark.parametrize("name", sorted(STRUCTURE))
def test_layer_counts(name: str) -> None:
    # The "+ 1" adds are the classifier's bias; everything else is a block's join.
    graph, _ = get_workload(name, image_shape=small_shape(name))
    histogram = graph.op_histogram()
    for op, count in STRUCTURE[name].items():
        assert histogram.get(op, 0) == count, (op, histogram)


def test_inception_has_factorised_and_asymmetric_kernels() -> None:
    graph, _ = get_workload("inception_v3", image_shape=small_shape("inception_v3"))
    kernels = {n.inputs[1].shape[2:] for n in graph.nodes if n.op == "conv"}
    assert {(1, 7), (7, 1), (1, 3), (3, 1), (5, 5), (3, 3), (1, 1)} == kernels
    sizes = {n.outputs[0].shape[1] for n in graph.nodes if n.op == "concat"}
    assert sizes == {256, 288, 768, 1280, 2048}


def test_mobilenet_convs_are_depthwise_separable() -> None:
    graph, _ = get_workload("mobilenet", image_shape=(3, 64, 64))
    depthwise = [n for n in graph.nodes if n.op == "conv" and n.attrs.groups > 1]  # type: ignore[attr-defined]
    assert len(depthwise) == 13
    assert all(n.attrs.groups == n.inputs[0].shape[1] for n in depthwise)  # type: ignore[attr-defined]


def test_mobilenet_v3_small_has_torchvisions_gates_and_kernels() -> None:
    graph, _ = get_workload("mobilenet_v3_small", image_shape=(3, 64, 64))
    convs = [n for n in graph.nodes if n.op == "conv"]
    squeezes = [n.outputs[0].shape[1] for n in convs if n.name.endswith("_se_fc1")]
    # torchvision's _make_divisible(expanded // 4, 8) of each gated block.
    assert squeezes == [8, 24, 64, 64, 32, 40, 72, 144, 144]
    depthwise = [n for n in convs if n.attrs.groups > 1]  # type: ignore[attr-defined]
    assert [n.inputs[1].shape[2] for n in depthwise] == [3, 3, 3] + [5] * 8
    assert [n.attrs.strides[0] for n in depthwise] == [2, 2, 1, 2, 1, 1, 1, 1, 2, 1, 1]  # type: ignore[attr-defined]


# Networks that the layout test runs through the interpreter in both layouts.
INTERPRETED = [
    *("resnet-18", "mobilenet", "mobilenet_v2", "mobilenet_v3_small", "squeezenet_v1.1"),
    *("mlp", "resnet3d-18"),
]


@pytest.mark.parametrize("name", INTERPRETED)
def test_layouts_hold_the_same_weights_and_compute_the_same(name: str) -> None:
    first, first_params = get_workload(name, image_shape=small_shape(name))
    last, last_params = get_workload(name, layout="NHWC", image_shape=small_shape(name, True))
    assert list(first_params) == list(last_params)
    for key, array in first_params.items():
        other = last_params[key]
        if key == "fc1_weight":  # mlp: columns permuted to follow the NHWC flatten
            array, other = np.sort(array, axis=1), np.sort(other, axis=1)
        if array.ndim >= 3:  # conv weight OI<spatial> vs <spatial>IO, or (C, 1, 1) bias
            other = other.reshape(-1) if other.ndim == 1 else np.moveaxis(other, (-1, -2), (0, 1))
        np.testing.assert_array_equal(array.reshape(other.shape), other, err_msg=key)
    data = np.random.default_rng(1).standard_normal(first.inputs[0].shape, dtype=np.float32)
    expected = run(first, first_params, data)
    actual = run(last, last_params, to_channels_last(data))
    # Both references sum in float64 and round once per op, so only the order of the
    # float64 sums differs: far below float32 resolution, hence the tight bound.
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-7)


def test_deep_network_output_is_a_spread_distribution() -> None:
    # 152 layers: the weight scaling must keep activations from vanishing (a flat
    # softmax) or exploding (inf/nan, or a one-hot softmax).
    graph, params = get_workload("resnet-152", batch_size=2, image_shape=(3, 32, 32))
    data = np.random.default_rng(2).standard_normal(graph.inputs[0].shape, dtype=np.float32)
    out = run(graph, params, data)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    assert out.max() < 0.99
    assert out.max(axis=1).min() > 10 * out.min(axis=1).max()
    assert not np.allclose(out[0], out[1])


def test_weights_are_deterministic_and_independent_of_batch_and_input_size() -> None:
    _, once = get_workload("mobilenet_v2")
    _, again = get_workload("mobilenet_v2", batch_size=4, image_shape=(3, 96, 96))
    assert list(once) == list(again)
    for key in once:
        np.testing.assert_array_equal(once[key], again[key], err_msg=key)


def test_float16_workload() -> None:
    name, shape = "resnet-18", (3, 32, 32)
    half, half_params = get_workload(name, dtype="float16", image_shape=shape)
    verify(half, half_params)
    assert half.inputs[0].dtype == "float16" and half.outputs[0].dtype == "float16"
    assert {a.dtype for a in half_params.values()} == {np.dtype("float16")}
    full, full_params = get_workload(name, image_shape=shape)
    data = np.random.default_rng(3).standard_normal(full.inputs[0].shape, dtype=np.float32)
    out_half = run(half, half_params, data.astype(np.float16))
    out_full = run(full, full_params, data)
    assert np.isfinite(out_half).all()
    # float16 rounds to 11 significant bits (relative 5e-4) after every op, ~60 ops
    # here: logits of magnitude ~10 end up ~1e-2 off, which moves the softmax
    # probabilities by ~1-3% (observed worst: 2.7% on a probability of 6e-7).
    np.testing.assert_allclose(out_half.astype(np.float32), out_full, rtol=0.05, atol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "resnet-19"}, "unknown workload 'resnet-19'; the built-in workloads are"),
        ({"name": "alexnet"}, "squeezenet_v1.1, inception_v3, mlp"),
        ({"name": "resnet-18", "layout": "NCWH"}, "use one of NCHW, NHWC"),
        ({"name": "resnet-18", "layout": "NCDHW"}, "not supported by resnet-18"),
        ({"name": "resnet3d-18", "layout": "NWC"}, "use one of NCDHW, NDHWC, NCHW, NHWC"),
        ({"name": "mlp", "dtype": "int8"}, "dtype 'int8' is not supported"),
        ({"name": "mlp", "batch_size": 0}, "batch_size must be a positive integer"),
        ({"name": "mlp", "num_classes": -1}, "num_classes must be a positive integer, got -1"),
        ({"name": "mlp", "num_classes": 2.5}, "num_classes must be a positive integer, got 2.5"),
        ({"name": "resnet-18", "image_shape": (224, 224)}, "must be 3 positive integers"),
        ({"name": "squeezenet_v1.1", "image_shape": (3, 8, 8)}, "cannot take images of shape"),
        ({"name": "inception_v3", "image_shape": (3, 64, 64)}, "use a larger image_shape"),
    ],
)
def test_bad_requests_say_what_is_valid(kwargs: dict[str, object], message: str) -> None:
    name = kwargs.pop("name")
    with pytest.raises(WorkloadError, match=re.escape(message)):
        get_workload(name, **kwargs)  # type: ignore[arg-type]
