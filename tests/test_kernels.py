"""The code-generation core's main check: every op topi can declare, compiled through
the whole path (graph -> fuse -> group_to_dag -> default_schedule -> lower -> C ->
gcc and clang) and run on this host, equals the reference interpreter; so do small
networks, group by group.

Tolerance is fp32 rtol 1e-4 / atol 1e-5 everywhere. Kernels keep IEEE semantics (no
-ffast-math); the differences left are FMA contraction and summation order in
reductions, and libm's exp/log/tanh/erf against NumPy's (within a few ulp).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
from compilers import compiling_with, host_compilers

from ember.graph import GraphBuilder
from ember.graph.interpret import interpret
from ember.graph.ir import Attrs, Graph, NoAttrs, Params
from ember.graph.ops import all_ops
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    AxisAttrs,
    BatchNormAttrs,
    BlockAttrs,
    CastAttrs,
    ClipAttrs,
    ConvAttrs,
    ConvTransposeAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LayoutAttrs,
    PadAttrs,
    PoolAttrs,
    QConvAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    SeluAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)
from ember.graph.ops.nn import LrnAttrs
from ember.graph.ops.sparse import SparseDenseAttrs
from ember.graph.ops.winograd import WinogradInputAttrs, WinogradOutputAttrs
from ember.graph.passes import convert_layout, fold_batch_norm, fuse, simplify
from ember.graph.passes.pack_weights import pack_weights
from ember.kernel import build_groups
from ember.target import Target
from ember.testing import get_workload
from ember.topi import NOT_EXPRESSIBLE

RTOL = 1e-4
ATOL = 1e-5
TARGET = Target("llvm")


def rand(*shape: int, seed: int = 0, low: float | None = None, dtype: str = "float32"):
    """Standard normal floats (or uniform in [low, low + 2)), random bools, or ints."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        return rng.integers(-9, 10, size=shape).astype(dtype)
    values = rng.standard_normal(shape) if low is None else low + 2 * rng.random(shape)
    return values.astype(dtype)


@dataclass(frozen=True)
class Case:
    """One op on arrays: the first `data` arrays are graph inputs, the rest params.
    `epilogue` ("last" / "channel1") adds a bias over that axis and a relu."""

    op: str
    arrays: tuple[np.ndarray, ...]
    attrs: Attrs = field(default_factory=NoAttrs)
    data: int = 1
    epilogue: str = ""


def case(op: str, arrays: Sequence[np.ndarray], attrs: Attrs | None = None, **kw) -> Case:
    return Case(op, tuple(np.asarray(a) for a in arrays), attrs or NoAttrs(), **kw)


def case_id(value: Case) -> str:
    shapes = "-".join("x".join(map(str, a.shape)) for a in value.arrays[:2])
    return f"{value.op}-{shapes}{'-epi' if value.epilogue else ''}"


def _bytes(*shape: int, seed: int = 0, dtype: str = "int8") -> np.ndarray:
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


# -- the case table ------------------------------------------------------------------

X = rand(2, 3, 5, 7)
POSITIVE = rand(3, 17, low=0.2)
UNARY = [
    "abs",
    "ceil",
    "cos",
    "erf",
    "exp",
    "floor",
    "identity",
    "negative",
    "relu",
    "round",
    "sigmoid",
    "sign",
    "sin",
    "softplus",
    "softsign",
    "tanh",
    "hard_swish",
    "mish",
]
BINARY = "add subtract multiply maximum minimum equal greater greater_equal less less_equal"
COMPARE_SHAPES = [((2, 3, 5, 7), (7,)), ((4, 33), (4, 33)), ((3, 1, 5), (1, 4, 1))]

CASES: list[Case] = [case(op, [rand(3, 17)]) for op in UNARY]
CASES += [case(op, [rand(2, 5, 7, 16)]) for op in ("relu", "exp", "sigmoid")]
CASES += [
    case("log", [POSITIVE]),
    case("sqrt", [POSITIVE]),
    case("reciprocal", [POSITIVE]),
    case("logical_not", [rand(5, 9, dtype="bool")]),
    case("cast", [rand(4, 9)], CastAttrs("int32")),
    case("cast", [rand(4, 9, dtype="int32")], CastAttrs("float32")),
    case("clip", [rand(6, 11)], ClipAttrs(-0.5, 0.7)),
    case("elu", [rand(6, 11)], AlphaAttrs(0.8)),
    case("leaky_relu", [rand(6, 11)], AlphaAttrs(0.1)),
    case("gelu", [rand(6, 11)], GeluAttrs("none")),
    case("gelu", [rand(6, 11)], GeluAttrs("tanh")),
    case("hard_sigmoid", [rand(6, 11)], HardSigmoidAttrs(0.2, 0.5)),
    case("selu", [rand(6, 11)], SeluAttrs(1.67, 1.05)),
]
for op in BINARY.split():
    CASES += [case(op, [rand(*a), rand(*b, seed=1)], data=2) for a, b in COMPARE_SHAPES]
CASES += [
    case("divide", [rand(3, 19), rand(3, 19, seed=1, low=0.5)], data=2),
    case("power", [rand(3, 19, low=0.1), rand(19, seed=1)]),
    case("floor_mod", [rand(3, 19), rand(3, 19, seed=1, low=0.5)], data=2),
    case("mod", [rand(3, 19, dtype="int32"), np.full((3, 19), 4, "int32")], data=2),
    case("prelu", [rand(2, 4, 3, 5), rand(4, 1, 1, seed=1)]),
    case("where", [rand(3, 16, dtype="bool"), rand(3, 16, seed=1), rand(16, seed=2)], data=3),
    case("broadcast_to", [rand(3, 1, 5)], ShapeAttrs((2, 3, 4, 5))),
    case(
        "batch_norm",
        [X, rand(3, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4, low=0.5)],
        BatchNormAttrs(1e-5, 1),
    ),
]
CASES += [case(op, [rand(7, 9, dtype="bool"), rand(9, dtype="bool")], data=2) for op in (
    "logical_and", "logical_or", "logical_xor")]  # fmt: skip
# Injective ops.
CASES += [
    case("reshape", [X], ReshapeAttrs((6, 35))),
    case("transpose", [X], TransposeAttrs((0, 2, 3, 1))),
    case("transpose", [rand(33, 17)], TransposeAttrs((1, 0))),
    case("concat", [X, rand(2, 1, 5, 7, seed=1), rand(2, 4, 5, 7, seed=2)], AxisAttrs(1), data=3),
    case("split", [X], SplitAttrs(3, (2, 5))),
    case("slice", [X], SliceAttrs((0, 1, 4, 0), (2, 3, -1, 7), (1, 1, -2, 2))),
    case("gather", [X, np.array([[2, -1], [0, 0]], "int64")], AxisAttrs(2)),
    case("gather_elements", [rand(3, 4), np.array([[0, 2, -1], [1, 1, 0]], "int64")], AxisAttrs(1)),
    case("pad", [X], PadAttrs((0, 1, 2, 0, 0, 2, 1, 3), "constant", 1.5)),
    case("pad", [X], PadAttrs((0, 2, 3, 1, 1, 0, 2, 4), "reflect")),
    case("pad", [X], PadAttrs((1, 0, 4, 1, 0, 3, 2, 2), "edge")),
    case("tile", [rand(2, 1, 3)], TileAttrs((2, 3, 1))),
    case("depth_to_space", [rand(2, 8, 3, 2)], BlockAttrs(2, "DCR", "NCHW")),
    case("depth_to_space", [rand(2, 3, 2, 8)], BlockAttrs(2, "CRD", "NHWC")),
    case("space_to_depth", [rand(2, 3, 4, 6)], BlockAttrs(2, "DCR", "NCHW")),
    case("space_to_depth", [rand(2, 4, 6, 3)], BlockAttrs(2, "CRD", "NHWC")),
    case("resize", [rand(1, 2, 4, 5)], ResizeAttrs((1, 2, 7, 9), (1, 1, 7 / 4, 9 / 5), "nearest")),
    case("resize", [rand(1, 2, 4, 5)], ResizeAttrs((1, 2, 8, 10), (1, 1, 2, 2), "linear")),
    case("resize", [rand(1, 4, 4, 3)], ResizeAttrs((1, 7, 9, 3), (1, 7 / 4, 9 / 4, 1), "cubic")),
]
# Reductions.
CASES += [
    case(op, [rand(2, 5, 6, 7, low=0.1)], ReduceAttrs(axes, keep))
    for op in [
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "reduce_l1",
        "reduce_l2",
        "reduce_log_sum_exp",
        "reduce_sum_square",
    ]
    for axes, keep in (((1,), True), ((2, 3), False))
]
CASES += [
    case("reduce_sum", [rand(37)], ReduceAttrs((0,), False)),
    case("reduce_mean", [rand(3, 40)], ReduceAttrs((1,), True)),
    case("argmax", [X], ArgReduceAttrs(1, True)),
    case("argmin", [X], ArgReduceAttrs(3, False)),
    case("softmax", [rand(3, 37)], AxisAttrs(1)),
    case("softmax", [X], AxisAttrs(1)),
    case("log_softmax", [rand(4, 21)], AxisAttrs(1)),
    case(
        "layer_norm", [rand(3, 5, 24), rand(24, seed=1), rand(24, seed=2)], LayerNormAttrs(2, 1e-5)
    ),
    case("instance_norm", [X, rand(3, seed=1), rand(3, seed=2)], InstanceNormAttrs(1e-5, "NCHW")),
    case("lrn", [rand(1, 7, 5, 6)], LrnAttrs(3, 1e-3, 0.75, 1.0)),
]


def conv_case(layout: str, n: int, hw: tuple[int, int], c: int, k: int, kernel: tuple[int, int],
              strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1, epilogue=True,
              seed=0) -> Case:  # fmt: skip
    h, w = hw
    if layout == "NHWC":
        data, weight = rand(n, h, w, c, seed=seed), rand(*kernel, c // groups, k, seed=seed + 1)
        attrs = ConvAttrs(strides, pads, dilations, groups, "NHWC", "HWIO")
    else:
        data, weight = rand(n, c, h, w, seed=seed), rand(k, c // groups, *kernel, seed=seed + 1)
        attrs = ConvAttrs(strides, pads, dilations, groups, "NCHW", "OIHW")
    side = ("last" if layout == "NHWC" else "channel1") if epilogue else ""
    return case("conv", [data, weight], attrs, epilogue=side)


for layout in ("NHWC", "NCHW"):
    CASES += [
        conv_case(layout, 1, (14, 14), 16, 32, (3, 3), pads=(1, 1, 1, 1)),
        conv_case(layout, 2, (9, 13), 5, 24, (3, 3), strides=(2, 2), pads=(1, 0, 2, 1)),
        conv_case(layout, 1, (11, 11), 8, 16, (1, 1), epilogue=False),
        conv_case(layout, 1, (17, 15), 3, 7, (7, 7), strides=(2, 2), pads=(3, 3, 3, 3)),
        conv_case(
            layout, 1, (10, 12), 12, 18, (3, 3), pads=(2, 2, 2, 2), dilations=(2, 2), groups=3
        ),
        conv_case(layout, 2, (15, 15), 32, 32, (3, 3), pads=(1, 1, 1, 1), groups=32),
        conv_case(layout, 1, (8, 8), 24, 24, (3, 3), strides=(2, 2), pads=(0, 0, 1, 1), groups=24),
        # Grouped, vectorized over output channels: 32 (then 4) channels per group, so
        # a vector's input channel group is the same in every lane (a broadcast).
        conv_case(layout, 1, (6, 14), 64, 64, (3, 3), pads=(1, 1, 1, 1), groups=2),
        conv_case(layout, 1, (7, 8), 32, 64, (1, 1), groups=16),
        # 100 channels: padded to whole vectors of 8 or 16 and sliced back (NHWC).
        conv_case(layout, 1, (7, 9), 16, 100, (3, 3), pads=(1, 1, 1, 1)),
    ]
    pool = PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False, layout)
    pool_ceil = PoolAttrs((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True, True, layout)
    image = rand(2, 9, 11, 12) if layout == "NHWC" else rand(2, 12, 9, 11)
    CASES += [
        case("max_pool", [image], pool),
        case("avg_pool", [image], pool),
        case("avg_pool", [image], pool_ceil),
        case("max_pool", [image], pool_ceil, epilogue="last" if layout == "NHWC" else "channel1"),
        case("global_avg_pool", [image], LayoutAttrs(layout)),
        case("global_max_pool", [image], LayoutAttrs(layout)),
    ]
CASES += [
    case(
        "conv",
        [rand(1, 3, 6, 8, 8), rand(4, 3, 3, 3, 3, seed=1)],
        ConvAttrs((1, 2, 2), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, "NCDHW", "OIDHW"),
    ),
    case(
        "conv",
        [rand(1, 6, 8, 8, 3), rand(3, 3, 3, 3, 8, seed=1)],
        ConvAttrs((1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, "NDHWC", "DHWIO"),
        epilogue="last",
    ),
    case(
        "conv_transpose",
        [rand(1, 4, 5, 5), rand(4, 3, 3, 3, seed=1)],
        ConvTransposeAttrs((2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, "NCHW"),
    ),
    case("dense", [rand(3, 40), rand(24, 40, seed=1)], epilogue="last"),
    case("dense", [rand(1, 64), rand(19, 64, seed=1)]),
    case("dense", [rand(16, 33), rand(48, 33, seed=1)], epilogue="last"),
    case("matmul", [rand(5, 40), rand(40, 32, seed=1)], epilogue="last"),
    case("matmul", [rand(2, 7, 9), rand(2, 9, 13, seed=1)], data=2),
    case("matmul", [rand(2, 1, 3, 5), rand(3, 5, 2, seed=1)], data=2),
    # Register tiles of rows x vectors (ember/schedule/default_dense.py): a tail of
    # rows, a single row with 5 vectors of 8, batch axes, a vector input, narrow blocks.
    case("dense_pack", [rand(17, 40), rand(4, 40, 16, seed=1)], epilogue="last"),
    case("dense_pack", [rand(1, 64), rand(5, 64, 8, seed=1)], epilogue="last"),
    case("dense_pack", [rand(2, 5, 24), rand(3, 24, 16, seed=1)]),
    case("dense_pack", [rand(24), rand(2, 24, 16, seed=1)]),
    case("dense_pack", [rand(9, 12), rand(3, 12, 4, seed=1)]),
    case("matmul", [rand(3, 10, 12), rand(3, 12, 64, seed=1)], data=2, epilogue="last"),
    # conv_pack: blocks of 16 (a tile of two vectors reads two blocks), of 8, strided.
    case(
        "conv_pack",
        [rand(1, 9, 9, 24), rand(2, 3, 3, 24, 16, seed=1)],
        ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO"),
        epilogue="last",
    ),
    case(
        "conv_pack",
        [rand(2, 10, 11, 5), rand(3, 3, 3, 5, 8, seed=1)],
        ConvAttrs((2, 2), (1, 0, 1, 1), (1, 1), 1, "NHWC", "HWIO"),
    ),
    case(
        "conv_pack",
        [rand(1, 7, 7, 64), rand(4, 1, 1, 64, 16, seed=1)],
        ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO"),
        epilogue="last",
    ),
    case("matmul", [rand(24), rand(2, 24, 32, seed=1)], data=2),
    # Winograd transforms: whole tiles (the tile-major schedules) with an epilogue,
    # outputs that are not (the generic one), channels no vector divides, tiles of 4.
    case("winograd_input", [rand(1, 8, 8, 32)], WinogradInputAttrs(2, (1, 1, 1, 1))),
    case("winograd_input", [rand(2, 7, 5, 3)], WinogradInputAttrs(2, (1, 1, 1, 1))),
    case("winograd_input", [rand(1, 9, 8, 8)], WinogradInputAttrs(4, (2, 0, 1, 2))),
    case("winograd_output", [rand(16, 16, 32)], WinogradOutputAttrs(2, 8, 8), epilogue="last"),
    case("winograd_output", [rand(16, 2 * 12, 3)], WinogradOutputAttrs(2, 7, 5)),
    case("winograd_output", [rand(36, 4, 16)], WinogradOutputAttrs(4, 8, 8), epilogue="last"),
    # Integer convs: NCHW; packed with input channels padded to 8 and a 16-lane tile of
    # dot-product steps; int8 data made unsigned; depthwise.
    case(
        "qconv",
        [_bytes(1, 6, 7, 9, dtype="uint8"), _bytes(8, 6, 3, 3, seed=1)],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, data_zero_point=77),
    ),
    case(
        "qconv_pack",
        [
            _bytes(1, 9, 9, 6, dtype="uint8"),
            _bytes(2, 3, 3, 2, 16, 4, seed=1),
            np.arange(32, dtype=np.int32) * 37 - 500,
        ],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=131),
    ),
    case(
        "qconv_pack",
        [_bytes(2, 10, 11, 16), _bytes(1, 3, 3, 4, 16, 4, seed=1), np.zeros(16, np.int32)],
        QConvAttrs((2, 2), (1, 0, 1, 1), (1, 1), 1, "NHWC", "HWIO", data_zero_point=-4),
    ),
    case(
        "qconv",
        [_bytes(1, 8, 8, 32, dtype="uint8"), _bytes(3, 3, 1, 32, seed=1)],
        QConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 32, "NHWC", "HWIO", data_zero_point=5),
    ),
]


def _sparse_case() -> Case:
    rng = np.random.default_rng(5)
    blocks = rng.random((4, 3)) < 0.5
    blocks[0, 0] = True
    indptr = np.concatenate([[0], np.cumsum(blocks.sum(axis=1))]).astype("int32")
    indices = np.nonzero(blocks)[1].astype("int32")
    data = rand(len(indices), 2, 4, seed=6)
    attrs = SparseDenseAttrs((8, 12), (2, 4))
    return case("sparse_dense", [rand(3, 12), data, indices, indptr], attrs)


CASES.append(_sparse_case())


# -- running -------------------------------------------------------------------------


def case_graph(c: Case) -> tuple[Graph, Params, dict[str, np.ndarray]]:
    """A one-op graph for `c` (plus its bias + relu epilogue) and its input feeds."""
    b = GraphBuilder(c.op)
    operands, feeds = [], {}
    for k, array in enumerate(c.arrays):
        if k < c.data:
            operands.append(b.input(f"in{k}", array.shape, str(array.dtype)))
            feeds[f"in{k}"] = array
        else:
            operands.append(b.param(f"p{k}", array))
    outputs = list(b.add_multi(c.op, operands, c.attrs))
    if c.epilogue:
        shape = outputs[0].shape
        axis = len(shape) - 1 if c.epilogue == "last" else 1
        bias = b.param("bias", rand(shape[axis], *([1] * (len(shape) - 1 - axis)), seed=9))
        outputs = [b.add("relu", [b.add("add", [outputs[0], bias])])]
    graph, params = b.build(outputs)
    return graph, params, feeds


def check_groups(graph: Graph, params: Params, feeds: dict[str, np.ndarray]) -> int:
    """Compile every fused group of `graph` and compare each with the interpreter on
    the reference values of its inputs; returns the number of groups."""
    fused = fuse(graph, params)
    compiled = build_groups(fused.groups, TARGET)
    env: dict[str, np.ndarray] = {**params, **feeds}
    for kernel in compiled:
        group = kernel.group
        data = {value.name: env[value.name] for value in group.data_inputs}
        want = interpret(group.as_graph(), fused.group_params(group), data)
        got = kernel.run(env)
        for name, expected in want.items():
            message = f"group {group.name}, output {name}\n{kernel.state}"
            assert got[name].dtype == expected.dtype, message
            if expected.dtype.kind == "f":
                np.testing.assert_allclose(got[name], expected, RTOL, ATOL, err_msg=message)
            else:
                np.testing.assert_array_equal(got[name], expected, err_msg=message)
        env.update(want)
    return len(compiled)


def test_every_declarable_op_has_a_kernel_case() -> None:
    declarable = set(all_ops()) - set(NOT_EXPRESSIBLE)
    missing = sorted(declarable - {c.op for c in CASES})
    assert not missing, f"ops without an end-to-end kernel case: {missing}"


@pytest.mark.parametrize("compiler", host_compilers())
@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_op_kernel_matches_the_interpreter(c: Case, compiler: str) -> None:
    """Under each host compiler (tests/compilers.py): GCC's and clang's flags and
    pragmas differ (contraction, the loop vectorizer), and both build Ember's kernels."""
    with compiling_with(compiler):
        assert check_groups(*case_graph(c)) >= 1


def _explicit_pad_then_conv() -> tuple[Graph, Params, dict[str, np.ndarray]]:
    b = GraphBuilder()
    x = b.input("data", (2, 7, 6, 5))
    padded = b.add("pad", [x], PadAttrs((0, 1, 2, 0, 0, 0, 1, 0), "constant", 0.0))
    weight = b.param("weight", rand(3, 3, 5, 8, seed=1))
    conv = b.add(
        "conv", [padded, weight], ConvAttrs((1, 1), (1, 0, 0, 1), (1, 1), 1, "NHWC", "HWIO")
    )
    residual = b.param("residual", rand(2, 7, 8, 8, seed=2))
    out = b.add("relu", [b.add("add", [conv, residual])])
    graph, params = b.build([out])
    return graph, params, {"data": rand(2, 7, 6, 5)}


def test_pad_prologue_and_residual_epilogue() -> None:
    assert check_groups(*_explicit_pad_then_conv()) == 1


def test_packed_weights_compile_to_the_unpacked_results() -> None:
    """pack_weights, then every group compiled and run in turn on the compiled results
    of the ones before: the outputs equal the interpreter's on the unpacked graph."""
    b = GraphBuilder("layers")
    x = b.input("x", (5, 48))
    hidden = b.add("dense", [x, b.param("w1", rand(64, 48, seed=1))])
    hidden = b.add("relu", [b.add("add", [hidden, b.param("b1", rand(64, seed=2))])])
    logits = b.add("dense", [hidden, b.param("w2", rand(10, 64, seed=3))])  # padded to 16
    y = b.add("matmul", [logits, b.param("w3", rand(10, 40, seed=4))])  # blocks of 8
    graph, params = b.build([y])
    packed, packed_params = pack_weights(graph, params, TARGET)
    assert [n.op for n in packed.nodes].count("dense_pack") == 3
    env: dict[str, np.ndarray] = {**packed_params, "x": rand(5, 48, seed=5)}
    for kernel in build_groups(fuse(packed, packed_params).groups, TARGET):
        env.update(kernel.run(env))
    want = interpret(graph, params, {"x": env["x"]})
    np.testing.assert_allclose(env[y.name], want[y.name], RTOL, ATOL)


@pytest.mark.parametrize(
    ("name", "layout"), [("resnet-18", "NHWC"), ("mobilenet", "NHWC"), ("resnet-18", "NCHW")]
)
def test_network_kernels_match_the_interpreter(name: str, layout: str) -> None:
    graph, params = get_workload(name, image_shape=(3, 32, 32))
    graph, params = fold_batch_norm(graph, params)
    if layout == "NHWC":
        graph, params = convert_layout(graph, params, "NHWC")
    graph, params = simplify(graph, params)
    if layout == "NHWC":  # as ember.build does: the classifier's weight packed
        graph, params = pack_weights(graph, params, TARGET)
    feeds = {value.name: rand(*value.shape, seed=3) for value in graph.inputs}
    assert check_groups(graph, params, feeds) > 5


# Full-size networks: every fused group compiled and compared with the interpreter on
# the reference values of its inputs (the slow tier, `make test-all`).
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("resnet-50", "NHWC"),
        ("mobilenet_v2", "NHWC"),
        ("inception_v3", "NHWC"),
        ("resnet-50", "NCHW"),
    ],
)
def test_full_size_network_kernels_match_the_interpreter(name: str, layout: str) -> None:
    graph, params = get_workload(name)
    graph, params = fold_batch_norm(graph, params)
    if layout == "NHWC":
        graph, params = convert_layout(graph, params, "NHWC")
    graph, params = simplify(graph, params)
    if layout == "NHWC":  # as ember.build does: the classifier's weight packed
        graph, params = pack_weights(graph, params, TARGET)
    feeds = {value.name: rand(*value.shape, seed=3) for value in graph.inputs}
    assert check_groups(graph, params, feeds) > 20
