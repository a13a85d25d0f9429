"""Integer convolution declarations (qconv, qconv_pack) against the graph references:
layouts, groups (depthwise), strides, dilations, zero-point padding, uint8 and int8
data, input channels that are not whole groups of four."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import run_check

from ember.graph.ops.attrs import QConvAttrs


def _bytes(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


CASES = [
    pytest.param(
        "qconv",
        [_bytes((1, 5, 6, 7), "uint8", 1), _bytes((8, 5, 3, 3), "int8", 2)],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, data_zero_point=200),
        id="nchw",
    ),
    pytest.param(
        "qconv",
        [_bytes((2, 7, 6, 4), "int8", 1), _bytes((3, 2, 4, 8), "int8", 2)],
        QConvAttrs((2, 1), (0, 1, 1, 0), (1, 2), 1, "NHWC", "HWIO", data_zero_point=-9),
        id="nhwc-int8-strided",
    ),
    pytest.param(
        "qconv",
        [_bytes((1, 6, 6, 8), "uint8", 1), _bytes((3, 3, 1, 8), "int8", 2)],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 8, "NHWC", "HWIO", data_zero_point=128),
        id="depthwise",
    ),
    pytest.param(
        "qconv_pack",
        [
            _bytes((1, 6, 7, 6), "uint8", 1),
            _bytes((2, 3, 3, 2, 8, 4), "int8", 2),
            _bytes((16,), "int8", 3).astype(np.int32) * 100,
        ],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=17),
        id="pack-channels-6",
    ),
    pytest.param(
        "qconv_pack",
        [
            _bytes((2, 9, 3), "int8", 1),
            _bytes((1, 3, 1, 4, 4), "int8", 2),
            np.arange(4, dtype=np.int32),
        ],
        QConvAttrs((2,), (1, 0), (2,), 1, "NWC", "WIO", data_zero_point=-5),
        id="pack-1d-int8",
    ),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)
