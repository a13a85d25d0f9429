"""ember.build: whole graphs as one library, run through its C ABI with bare ctypes and
compared with the reference interpreter on the original graph (fp32 rtol 1e-4 /
atol 1e-5); the metadata; the build cache; and the errors a user can cause."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import safetensors.numpy
from library_abi import run_library
from onnx import TensorProto, helper

import ember
import ember.toolchain
from ember.backend import backend_for
from ember.build import plan_build
from ember.device import device_model
from ember.errors import BuildError, ToolchainError
from ember.graph import GraphBuilder
from ember.graph.interpret import interpret
from ember.graph.ir import Graph, Params
from ember.graph.ops.attrs import AxisAttrs, TopKAttrs
from ember.partition import Partition, partition
from ember.runtime.aot import KernelStep
from ember.testing import get_workload
from ember.testing.workloads.layers import LAYOUTS, NetBuilder

RTOL = 1e-4
ATOL = 1e-5


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs}


def check_against_interpreter(graph: Graph, params: Params, **build_options: object) -> None:
    library = ember.build(graph, "llvm", params=params, **build_options)
    feeds = random_inputs(graph)
    expected = interpret(graph, params, feeds)
    outputs = run_library(library, feeds)
    assert len(outputs) == len(graph.outputs)
    for value, actual in zip(graph.outputs, outputs, strict=True):
        np.testing.assert_allclose(actual, expected[value.name], rtol=RTOL, atol=ATOL)


def dense_graph() -> tuple[Graph, Params]:
    """dense + bias + relu (one group), then exp (another); both are outputs."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("tiny")
    x = b.input("x", (2, 8))
    w = b.param("w", rng.standard_normal((4, 8)).astype("float32"))
    bias = b.param("bias", rng.standard_normal(4).astype("float32"))
    hidden = b.add("relu", [b.add("add", [b.add("dense", [x, w]), bias])])
    return b.build([b.add("exp", [hidden]), hidden])


def test_a_tiny_graph_runs_like_the_interpreter() -> None:
    check_against_interpreter(*dense_graph())


def test_a_scalar_reduction_read_elementwise() -> None:
    """A reduction over every axis (a 0-d tensor) read by an elementwise stage: the
    default schedule has no tile to put the scalar in and must not look for one (an
    ONNX DynamicQuantizeLinear computes its scale so)."""
    from ember.graph.ops.attrs import ReduceAttrs

    b = GraphBuilder("scalar")
    x = b.input("x", (3, 5))
    top = b.add("reduce_max", [x], ReduceAttrs((0, 1), keepdims=False))
    scaled = b.add("divide", [top, b.constant(np.asarray(255.0, np.float32))])
    check_against_interpreter(*b.build([b.add("add", [scaled, b.constant(np.float32(1))])]))


@pytest.mark.parametrize(
    ("name", "image_shape"),
    [
        ("resnet-18", (3, 32, 32)),
        ("mobilenet", (3, 32, 32)),
        ("squeezenet_v1.1", (3, 64, 64)),
        ("mlp", (1, 28, 28)),
    ],
)
def test_networks_run_like_the_interpreter(name: str, image_shape: tuple[int, ...]) -> None:
    check_against_interpreter(*get_workload(name, image_shape=image_shape))


def test_outputs_that_no_kernel_writes() -> None:
    """An input, a param and an output listed twice come out as copies."""
    b = GraphBuilder("copies")
    x = b.input("x", (3, 5))
    table = b.param("table", np.arange(6, dtype="int64").reshape(2, 3))
    y = b.add("tanh", [x])
    check_against_interpreter(*b.build([y, x, table, y]))


def test_an_intermediate_read_by_many_groups() -> None:
    """A value read by later groups lives in the arena until its last reader."""
    b = GraphBuilder("diamond")
    x = b.input("x", (4, 16))
    a = b.add("exp", [b.add("reduce_sum", [x], _reduce_attrs())])
    left = b.add("tanh", [b.add("softmax", [b.add("multiply", [x, a])], _axis_attrs())])
    right = b.add("sigmoid", [b.add("reduce_max", [x], _reduce_attrs())])
    check_against_interpreter(*b.build([b.add("add", [left, b.add("multiply", [right, a])])]))


def _reduce_attrs():
    from ember.graph.ops.attrs import ReduceAttrs

    return ReduceAttrs(axes=(1,), keepdims=True)


def _axis_attrs():
    from ember.graph.ops.attrs import AxisAttrs

    return AxisAttrs(axis=1)


# -- topk: a hand-written C helper -------------------------------------------------------


def topk_graph(shape: tuple[int, ...], dtype: str, attrs: TopKAttrs, both: bool) -> Graph:
    b = GraphBuilder("topk")
    x = b.input("x", shape, dtype)
    values, indices = b.add_multi("topk", [b.add("abs", [x]) if dtype == "float32" else x], attrs)
    graph, _ = b.build([values, indices] if both else [values])
    return graph


@pytest.mark.parametrize(
    ("shape", "dtype", "attrs", "both"),
    [
        ((2, 50), "float32", TopKAttrs(k=5, axis=1), True),
        ((3, 7, 4), "float32", TopKAttrs(k=7, axis=1, largest=False), True),
        ((6, 3), "int32", TopKAttrs(k=2, axis=0), False),  # indices: arena scratch
    ],
)
def test_topk_runs_in_c_like_the_interpreter(
    shape: tuple[int, ...], dtype: str, attrs: TopKAttrs, both: bool
) -> None:
    graph = topk_graph(shape, dtype, attrs, both)
    rng = np.random.default_rng(3)
    # Few distinct values, so ties are common and their order is checked; and a NaN.
    data = rng.integers(-3, 4, size=shape).astype(dtype)
    if dtype == "float32":
        data.flat[5] = np.nan
    library = ember.build(graph, "llvm")
    expected = interpret(graph, {}, {"x": data})
    for value, actual in zip(graph.outputs, run_library(library, {"x": data}), strict=True):
        np.testing.assert_array_equal(actual, expected[value.name])
    kernels = [group["kernel"] for group in library.metadata["groups"]]
    assert f"ember_topk_{dtype}" in kernels


def test_topk_of_an_unsupported_dtype_is_refused_naming_the_node() -> None:
    graph = topk_graph((4, 4), "bool", TopKAttrs(k=2, axis=1), True)
    with pytest.raises(BuildError, match=r"node 'topk' \(topk on bool\) has no C implementation"):
        ember.build(graph, "llvm")


# -- metadata -----------------------------------------------------------------------


def test_metadata_describes_the_original_graph() -> None:
    graph, params = get_workload("resnet-18", image_shape=(3, 32, 32))
    library = ember.build(graph, "llvm", params=params)
    meta = library.metadata
    assert meta["target"] == "llvm" and meta["format_version"] == 1
    assert meta["ember_version"] == ember.__version__
    # Inputs keep their NCHW layout; the NHWC transposes are inside the library.
    assert meta["inputs"] == [{"name": "data", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert meta["outputs"][0]["shape"] == [1, 1000]
    # The params after the passes (batch norms folded, weights HWIO), in ABI order.
    assert [entry["name"] for entry in meta["params"]] == list(library.params)
    for entry in meta["params"]:
        array = library.params[entry["name"]]
        assert list(array.shape) == entry["shape"] and str(array.dtype) == entry["dtype"]
    # Weights packed for the target's vectors (pack_weights): the classifier's 1000
    # outputs in 125 blocks of 8 (one row: no padding to 16), K = 512 inside; every
    # conv's output channels in blocks of the vector lanes, [O/b, H, W, I, b].
    packed = {entry["name"]: entry for entry in meta["params"] if "layout" in entry}
    assert packed.pop("fc_weight_NK8n") == {
        "name": "fc_weight_NK8n",
        "shape": [125, 512, 8],
        "dtype": "float32",
        "layout": "NK8n",
    }
    lanes = device_model(ember.Target("llvm")).lanes("float32")
    assert len(packed) == 20  # the stem, 16 3x3 convs, 3 1x1 shortcut convs
    for entry in packed.values():
        assert entry["layout"] == f"OHWI{lanes}o" and entry["shape"][-1] == lanes
    plan = meta["memory_plan"]
    assert 0 < plan["arena_bytes"] < plan["total_bytes"]
    groups = meta["groups"]
    assert len(groups) == meta["graph"]["fused_groups"]
    keys = {group["workload_key"] for group in groups}
    assert meta["graph"]["kernels"] == len(keys) < len(groups)  # shared kernels
    assert meta["graph"]["nodes"] == len(graph.nodes)
    assert meta["graph"]["total_flops"] > 2 * meta["graph"]["total_macs"] > 0


def test_unsafe_param_names_are_renamed() -> None:
    b = GraphBuilder("names")
    x = b.input("x", (2, 3))
    weight = b.param('wé"ight', np.full((2, 3), 2.5, "float32"))
    graph, params = b.build([b.add("multiply", [x, weight])])
    library = ember.build(graph, "llvm", params=params)
    (name,) = library.params
    assert name == "w__ight" and library.metadata["params"][0]["name"] == name


def test_a_second_build_compiles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, params = get_workload("mobilenet", image_shape=(3, 32, 32))
    first = ember.build(graph, "llvm", params=params)

    def no_compiler(*args: object) -> None:
        raise AssertionError("the second build ran the compiler")

    monkeypatch.setattr(ember.toolchain, "_run", no_compiler)
    second = ember.build(graph, "llvm", params=params)
    assert second.so_path == first.so_path


def test_progress_bar_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    graph, params = dense_graph()
    ember.build(graph, params=params, progress=True)
    assert "building tiny" in capsys.readouterr().err
    ember.build(graph, params=params, progress=False)
    assert capsys.readouterr().err == ""


AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
ARMV7L = "llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a72 -mattr=+neon"

# Runs a library from C: params from a safetensors file, one input, one output.
DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct ember_instance ember_instance;
ember_instance* ember_create_from_file(const char* params_path);
int32_t ember_run(ember_instance* instance, const void* const* inputs, void* const* outputs);
const char* ember_last_error(void);
static void* slurp(const char* path, long n) {
  void* data = malloc(n);
  FILE* f = fopen(path, "rb");
  if (!f || fread(data, 1, n, f) != (size_t)n) exit(3);
  fclose(f);
  return data;
}
int main(int argc, char** argv) {
  ember_instance* instance = ember_create_from_file(argv[1]);
  if (!instance) { fprintf(stderr, "%s\n", ember_last_error()); return 1; }
  const void* inputs[] = {slurp(argv[2], atol(argv[3]))};
  void* outputs[] = {malloc(atol(argv[5]))};
  if (ember_run(instance, inputs, outputs) != 0) {
    fprintf(stderr, "%s\n", ember_last_error());
    return 2;
  }
  FILE* f = fopen(argv[4], "wb");
  fwrite(outputs[0], 1, atol(argv[5]), f);
  fclose(f);
  return 0;
}
"""


@dataclass(frozen=True)
class CrossBoard:
    """A cross target and what runs its code here: the compiler's prefix, the ELF
    machine number, qemu-user's name and the libc sysroot it loads from."""

    target: str
    prefix: str
    machine: int
    qemu: str

    @property
    def sysroot(self) -> Path:
        return Path(f"/usr/{self.prefix}")


CROSS_BOARDS = [
    pytest.param(CrossBoard(AARCH64, "aarch64-linux-gnu", 183, "qemu-aarch64"), id="aarch64"),
    # A Raspberry Pi with a 32-bit OS: `uname -m` says armv7l; NEON through -mfpu.
    pytest.param(CrossBoard(ARMV7L, "arm-linux-gnueabihf", 40, "qemu-arm"), id="armv7l"),
]


@pytest.mark.parametrize("board", CROSS_BOARDS)
@pytest.mark.parametrize("network", ["mobilenet", "resnet-18"])
def test_cross_build_runs_under_qemu(tmp_path: Path, board: CrossBoard, network: str) -> None:
    graph, params = get_workload(network, image_shape=(3, 32, 32))
    try:
        library = ember.build(graph, board.target, params=params)
    except ToolchainError as error:
        pytest.skip(f"no {board.prefix} cross compiler: {error}")
    header = library.so_path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == board.machine
    assert library.metadata["target"] == str(ember.Target(board.target))
    if shutil.which(board.qemu) is None or not board.sysroot.is_dir():
        pytest.skip(f"{board.qemu} or the {board.prefix} sysroot is not installed")
    (tmp_path / "driver.c").write_text(DRIVER)
    driver = tmp_path / "driver"
    cc = [f"{board.prefix}-gcc", str(tmp_path / "driver.c"), str(library.so_path)]
    subprocess.run([*cc, "-o", str(driver)], check=True)
    safetensors.numpy.save_file(library.params, str(tmp_path / "mod.params"))
    data = random_inputs(graph)["data"]
    data.tofile(tmp_path / "input.bin")
    out_bytes = graph.outputs[0].type.nbytes
    args = ["mod.params", "input.bin", str(data.nbytes), "output.bin", str(out_bytes)]
    qemu = [board.qemu, "-L", str(board.sysroot), str(driver), *args]
    subprocess.run(qemu, cwd=tmp_path, check=True, timeout=300)
    actual = np.fromfile(tmp_path / "output.bin", "float32").reshape(graph.outputs[0].shape)
    expected = interpret(graph, params, {"data": data})[graph.outputs[0].name]
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


# -- errors -------------------------------------------------------------------------


def test_missing_params_are_named() -> None:
    graph, _ = dense_graph()
    with pytest.raises(BuildError, match=r"needs params w, bias that were not given"):
        ember.build(graph, "llvm")


def test_params_of_another_graph_are_refused() -> None:
    graph, params = dense_graph()
    with pytest.raises(BuildError, match=r"param 'w' is float32\[8, 4\], the graph expects"):
        ember.build(graph, "llvm", params={**params, "w": params["w"].T.copy()})


def test_gpu_targets_are_refused() -> None:
    graph, params = dense_graph()
    with pytest.raises(BuildError, match="supports CPU targets"):
        ember.build(graph, "cuda -arch=sm_90", params=params)


def test_load_runs_the_library_in_place() -> None:
    graph, params = dense_graph()
    module = ember.build(graph, params=params).load()
    feeds = random_inputs(graph)
    module.set_input("x", feeds["x"])
    module.run()
    expected = interpret(graph, params, feeds)[graph.outputs[0].name]
    np.testing.assert_allclose(module.get_output(0), expected, rtol=RTOL, atol=ATOL)


def test_the_library_keeps_the_sources_it_compiled() -> None:
    graph, params = dense_graph()
    library = ember.build(graph, params=params)
    sources = library.sources
    assert "int32_t ember_model_run(" in sources.entry_point
    kernels = {group["kernel"] for group in library.metadata["groups"]}  # type: ignore[attr-defined]
    assert {kernel.name for kernel in sources.kernels} == kernels
    for kernel in sources.kernels:
        assert f"{kernel.name}_packed" in kernel.c_source
        assert kernel.loop_ir.startswith(f"func {kernel.name}(")
    files = sources.files()
    assert set(files) == {"entry.c"} | {f"{k}.{ext}" for k in kernels for ext in ("c", "loop")}


# -- concatenations in place -------------------------------------------------------


def branches_concatenated(
    *, axis: int = 3, extra_reader: bool = False, with_input: bool = False, as_output: bool = False
) -> tuple[Graph, Params]:
    """An Inception-style block in NHWC: a 1x1 conv, a 3x3 conv and a max pool of one
    input, concatenated along `axis`, then a 1x1 conv (unless the concatenation is the
    output). `extra_reader`: the 1x1 branch is an output too; `with_input`: the block's
    input is concatenated as well."""
    net = NetBuilder("block", LAYOUTS["NHWC"], "float32")
    x = net.graph.input("data", (1, 9, 9, 8))
    a = net.relu(net.conv(x, 8, 1, name="a"), name="a_relu")
    b = net.relu(net.conv(x, 8, 3, padding=1, name="b", bias=True), name="b_relu")
    pool = net.max_pool(x, 3, 1, padding=1, name="pool")
    parts = [a, b, pool, *([x] if with_input else [])]
    y = net.graph.add("concat", parts, AxisAttrs(axis), name="y")
    outputs = [y if as_output else net.conv(y, 8, 1, name="head"), *([a] if extra_reader else [])]
    return net.graph.build(outputs)


def concatenation_steps(graph: Graph, params: Params) -> tuple[list[KernelStep], Partition]:
    target = ember.Target("llvm")
    parts = partition(graph, params, target)
    plan = plan_build(parts, target, backend_for(target))
    # Lifetimes count the steps that run: a concatenation in place is none of them.
    assert all(a.tensor.last < len(plan.program.steps) for a in plan.memory.allocations)
    return [step for step in plan.program.steps if isinstance(step, KernelStep)], parts


@pytest.mark.parametrize("axis", [3, 1], ids=["channels", "rows"])
@pytest.mark.parametrize("as_output", [False, True], ids=["inside", "output"])
def test_branches_write_their_slices_of_the_concatenation(axis: int, as_output: bool) -> None:
    graph, params = branches_concatenated(axis=axis, as_output=as_output)
    steps, parts = concatenation_steps(graph, params)
    # No step copies: the three branch kernels write into one buffer, the concatenation.
    ((concat, views),) = parts.in_place.items()
    assert {step.name for step in steps} == {g.name for g in parts.fused.groups} - {concat}
    producers = [g.name for g in parts.fused.groups if {v.name for v in g.outputs} & set(views)]
    written = {step.args[-1] for step in steps if step.name in producers}
    assert len(producers) == 3 and len(written) == 1, written
    if not as_output:
        (head,) = [step for step in steps if step.name not in producers]
        assert head.args[0] in written
    x = np.random.default_rng(0).standard_normal((1, 9, 9, 8)).astype("float32")
    module = ember.build(graph, "llvm", params=params).load()
    module.set_input("data", x)
    module.run()
    expected = interpret(graph, params, {"data": x})[graph.outputs[0].name]
    np.testing.assert_allclose(module.get_output(0), expected, rtol=RTOL, atol=ATOL)
    # A kernel of the producers' tasks compiled alone writes whole outputs, not their
    # slices: the metadata says so, and no step of theirs is offered for swapping.
    writers = [g for g in module.info.groups if g.output_views]
    assert {g.name for g in writers} == set(producers)
    for group in writers:
        assert group.workload_key and module.kernel_steps(group.workload_key) == []


@pytest.mark.parametrize(
    "kwargs", [{"extra_reader": True}, {"with_input": True}], ids=["read-twice", "graph-input"]
)
def test_a_concatenation_copies_when_a_part_is_needed_on_its_own(kwargs: dict[str, bool]) -> None:
    graph, params = branches_concatenated(**kwargs)
    steps, parts = concatenation_steps(graph, params)
    assert not parts.in_place and any(step.symbol.startswith("concat") for step in steps)
    x = np.random.default_rng(0).standard_normal((1, 9, 9, 8)).astype("float32")
    module = ember.build(graph, "llvm", params=params).load()
    module.set_input("data", x)
    module.run()
    expected = interpret(graph, params, {"data": x})
    for index, value in enumerate(graph.outputs):
        np.testing.assert_allclose(
            module.get_output(index), expected[value.name], rtol=RTOL, atol=ATOL
        )


@pytest.mark.parametrize("onnx_op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_a_reduction_over_every_axis_to_a_scalar_builds(onnx_op: str) -> None:
    """keepdims=0 over all axes gives a 0-d output (issue 18: ReduceMean's raised
    IndexError in the default schedule)."""
    from onnx import TensorProto, helper

    from ember.frontend import from_onnx

    graph_proto = helper.make_graph(
        [helper.make_node(onnx_op, ["x"], ["y"], keepdims=0)], "scalar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    graph, params = from_onnx(helper.make_model(graph_proto, opset_imports=[
        helper.make_opsetid("", 13)]))  # fmt: skip
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (got,) = ember.build(graph, "llvm", params).load()(x=x).values()
    (want,) = interpret(graph, params, {"x": x}).values()
    assert got.shape == ()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_tensor_no_machine_can_allocate_is_refused() -> None:
    """[4, 2**62] float32: its element count wrapped to 0 in int64 and the build
    succeeded (issue 18); sizes are Python ints now and the build refuses it."""
    builder = GraphBuilder("huge")
    x = builder.input("x", (4, 2**62))
    graph, params = builder.build([builder.add("relu", [x])])
    assert graph.inputs[0].type.size == 2**64
    with pytest.raises(BuildError, match="more than any machine can allocate"):
        ember.build(graph, "llvm", params)


def onnx_model(nodes: list, inputs: list, outputs: list[str], opset: int = 17) -> onnx.ModelProto:
    """A model made with onnx.helper, its outputs' types left to inference."""
    untyped = [helper.make_value_info(name, helper.TypeProto()) for name in outputs]
    graph_proto = helper.make_graph(nodes, "model", inputs, untyped)
    return helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", opset)])


def onnx_graph(nodes: list, inputs: list, outputs: list[str], opset: int = 17) -> tuple:
    """(graph, params) of `onnx_model(...)`."""
    from ember.frontend import from_onnx

    return from_onnx(onnx_model(nodes, inputs, outputs, opset))


def check_compiled(graph: Graph, params: Params) -> None:
    """The compiled module computes what the interpreter computes."""
    feeds = random_inputs(graph)
    got = ember.build(graph, "llvm", params).load()(**feeds)
    want = interpret(graph, params, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL, err_msg=name)


def test_a_long_chain_of_activations_builds() -> None:
    """400 elementwise nodes in a row nested one expression past Python's recursion limit
    (issue 18: RecursionError); a group now inlines at most MAX_INLINED_SIZE nodes."""
    nodes = [
        helper.make_node("Relu" if i % 2 else "Sigmoid", [f"t{i}"], [f"t{i + 1}"])
        for i in range(400)
    ]
    graph, params = onnx_graph(
        nodes, [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4, 8])], ["t400"]
    )
    check_compiled(graph, params)


def test_a_chain_of_diamonds_builds_without_blowing_up() -> None:
    """30 swish blocks (x * sigmoid(x)) in a row: inlined whole, each block doubles the
    expression (2**30 reads of the input; 16 blocks took 52 s to build, 30 never ended).
    Groups stop at MAX_INLINED_SIZE, so none holds the whole chain."""
    from ember.graph.passes.fuse import MAX_INLINED_SIZE, fuse

    nodes = []
    for i in range(30):
        nodes.append(helper.make_node("Sigmoid", [f"t{i}"], [f"s{i}"]))
        nodes.append(helper.make_node("Mul", [f"t{i}", f"s{i}"], [f"t{i + 1}"]))
    graph, params = onnx_graph(
        nodes, [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4, 8])], ["t30"]
    )
    groups = fuse(graph, params).groups
    assert 1 < len(groups) <= 60 // 5  # each group takes a few blocks (2**5 < 64 reads)
    assert all(len(group.nodes) < MAX_INLINED_SIZE for group in groups)
    check_compiled(graph, params)


def test_a_concat_of_many_inputs_builds() -> None:
    """Concat of 400 inputs was a chain of 400 nested selects (issue 18: RecursionError);
    it is a balanced tree of selects now."""
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 3]) for i in range(400)]
    concat = helper.make_node("Concat", [f"x{i}" for i in range(400)], ["y"], axis=0)
    graph, params = onnx_graph([concat], inputs, ["y"])
    check_compiled(graph, params)


def _empty_case(op: str, shapes: list[list[int]], **attrs: object) -> tuple:
    inputs = [
        helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape)
        for i, shape in enumerate(shapes)
    ]
    node = helper.make_node(op, [f"x{i}" for i in range(len(shapes))], ["y"], **attrs)
    return onnx_model([node], inputs, ["y"])


EMPTY_CASES = {
    "concat of empties": _empty_case("Concat", [[0, 3], [0, 3]], axis=0),
    "concat with an empty piece": _empty_case("Concat", [[2, 0], [2, 3], [2, 0]], axis=1),
    "matmul over k = 0": _empty_case("MatMul", [[2, 0], [0, 3]]),
    "matmul of no rows": _empty_case("MatMul", [[0, 4], [4, 3]]),
    "batched matmul of no batches": _empty_case("MatMul", [[0, 2, 4], [4, 3]]),
    "lrn over no channels": _empty_case("LRN", [[1, 0, 4, 4]], size=3),
    "max pool of no batches": _empty_case("MaxPool", [[0, 2, 4, 4]], kernel_shape=[2, 2]),
    "max over an empty axis": _empty_case("ReduceMax", [[2, 0]], keepdims=1),
    "sum of nothing": _empty_case("ReduceSum", [[0, 4]], keepdims=0),
    "mean of nothing": _empty_case("ReduceMean", [[2, 0, 4]], axes=[1], keepdims=0),
    "softmax of no rows": _empty_case("Softmax", [[0, 4]]),
}


@pytest.mark.parametrize("case", EMPTY_CASES)
def test_empty_tensors_compute_what_onnx_runtime_does(case: str) -> None:
    """A dimension of 0 is legal ONNX (issue 18: KeyError / ValueError in te/dag.py and
    the default schedules). Empty tensors fold to constants, a concat drops its empty
    pieces, and a product over K = 0 is zeros, as in ONNX Runtime."""
    from ember.frontend import from_onnx
    from ember.testing.oracle import run_onnxruntime

    model = EMPTY_CASES[case]
    graph, params = from_onnx(model)
    check_compiled(graph, params)
    feeds = random_inputs(graph)
    ours = interpret(graph, params, feeds)
    theirs = run_onnxruntime(model, feeds)
    np.testing.assert_array_equal(ours["y"], theirs["y"])


def test_run_time_indices_out_of_range_fail_the_run() -> None:
    """Indices computed at run time are checked before the gather's kernel reads through
    them (issue 18: the compiled module read a wrapped row where the interpreter raised):
    in range (negative ones count from the end) the module equals the interpreter, out
    of range the run fails naming the node and the index."""
    from ember.errors import ShapeError
    from ember.runtime.module import ExecutionError

    nodes = [
        helper.make_node("Cast", ["j"], ["i"], to=TensorProto.INT64),
        helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="pick"),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("j", TensorProto.INT32, [2]),
    ]
    graph, params = onnx_graph(nodes, inputs, ["y"])
    module = ember.build(graph, "llvm", params).load()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    for ok in ([1, -2], [0, -1]):
        j = np.array(ok, np.int32)
        want = interpret(graph, params, {"x": x, "j": j})["y"]
        np.testing.assert_array_equal(module(x=x, j=j)["y"], want)
    for bad in ([1, 2], [-3, 0]):
        j = np.array(bad, np.int32)
        with pytest.raises(ShapeError, match="out of range"):
            interpret(graph, params, {"x": x, "j": j})
        message = f"gather node 'pick': index {max(bad, key=abs)} .* out of range .* size 2"
        with pytest.raises(ExecutionError, match=message):
            module(x=x, j=j)


def test_an_average_pool_over_a_huge_axis_builds() -> None:
    """Counting each window's taps in Python (to find a constant divisor) never ended
    for an axis of 2**31 (issue 18, the fuzzer); beyond 2**16 windows the divisor is
    computed per window."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph, params = onnx_graph(
        [node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2**31, 2])], ["y"]
    )
    library = ember.build(graph, "llvm", params)
    assert library.so_path.exists()


def test_an_output_listed_twice_is_computed_twice() -> None:
    """Issue 18 (the fuzzer): the same graph output twice raised GraphError ("defined
    twice") at import."""
    model = onnx_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        ["y", "y"],
    )
    from ember.frontend import from_onnx
    from ember.testing.oracle import run_onnxruntime

    graph, params = from_onnx(model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    module = ember.build(graph, "llvm", params).load()
    module.set_input("x", x)
    module.run()
    (want,) = run_onnxruntime(model, {"x": x}).values()  # one name, one entry
    for index in range(2):
        np.testing.assert_array_equal(module.get_output(index), want)


def test_batch_norm_statistics_fed_at_run_time_build() -> None:
    """Issue 18 (the fuzzer): a variance fed as a graph input failed the build with
    GraphError from fold_batch_norm; the batch norm stays a kernel."""
    constants = [
        helper.make_tensor(name, TensorProto.FLOAT, [3], [0.5, 1.0, 2.0])
        for name in ("scale", "bias", "mean")
    ]
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
        helper.make_tensor_value_info("var", TensorProto.FLOAT, [3]),
    ]
    from ember.frontend import from_onnx

    model = onnx_model([node], inputs, ["y"])
    model.graph.initializer.extend(constants)
    graph, params = from_onnx(model)
    feeds = {
        "x": np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32),
        "var": np.array([1.0, 0.5, 2.0], np.float32),
    }
    got = ember.build(graph, "llvm", params).load()(**feeds)["y"]
    np.testing.assert_allclose(got, interpret(graph, params, feeds)["y"], rtol=RTOL, atol=ATOL)
