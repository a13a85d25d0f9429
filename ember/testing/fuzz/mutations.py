"""Mutations of a seed model (structure-aware edits of the ModelProto, and byte-level
edits of its serialized bytes), and the deterministic fuzz case built from them."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.parser
from onnx import TensorProto, helper, numpy_helper

from ember.testing.fuzz.seeds import SEED_GRAPHS, seed_model

INTS = (0, -1, 1, 2, 3, -2, 7, 2**31 - 1, 2**31, -(2**31), 2**62, -(2**63), 2**63 - 1)
FLOATS = (math.nan, math.inf, -math.inf, 1e30, -1e30, -0.0, 0.0, 1e-30, 1.0, -1.0)
STRINGS = (b"", b"NOTSET", b"SAME_UPPER", b"VALID", b"nearest", b"linear", b"cubic",
           b"reflect", b"edge", b"half_pixel", b"align_corners", b"\xff\xfe")  # fmt: skip
ATTRIBUTE_NAMES = ("axis", "axes", "keepdims", "perm", "transA", "transB", "alpha", "beta",
                   "mode", "pads", "strides", "kernel_shape", "dilations", "group", "auto_pad",
                   "to", "epsilon", "size", "largest", "sorted", "ceil_mode", "split")  # fmt: skip
ELEM_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
              TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.INT32,
              TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL, TensorProto.STRING,
              TensorProto.COMPLEX64, 0, 99)  # fmt: skip
DIMS = (0, 1, 2, 3, 7, 64, 1000, 2**31, 2**62, -1)
OPSETS = (0, 1, 6, 7, 9, 10, 11, 12, 13, 16, 18, 19, 21, 22, 23, 30, 2**40)
IR_VERSIONS = (0, 1, 3, 4, 7, 8, 10, 11, 99)
OP_TYPES = ("Abs", "Add", "ArgMax", "AveragePool", "BatchNormalization", "Cast", "Ceil",
            "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose",
            "DepthToSpace", "DequantizeLinear", "Div", "Equal", "Exp", "Expand", "Flatten",
            "Gather", "GatherElements", "Gemm", "GlobalAveragePool", "Identity",
            "InstanceNormalization", "LRN", "LayerNormalization", "MatMul", "MatMulInteger",
            "Max", "MaxPool", "Mod", "Mul", "Pad", "Pow", "QLinearConv", "QuantizeLinear",
            "Range", "ReduceMax", "ReduceMean", "ReduceProd", "ReduceSum", "Relu", "Reshape",
            "Resize", "Shape", "Slice", "Softmax", "Split", "Squeeze", "Sub", "Tile", "TopK",
            "Transpose", "Unsqueeze", "Where", "Xor", "If", "NoSuchOp", "")  # fmt: skip
Mutation = Callable[[onnx.ModelProto, random.Random], str | None]


def _defined_names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    return names + [name for node in graph.node for name in node.output if name]


def _random_attribute(name: str, rng: random.Random) -> onnx.AttributeProto:
    """An attribute `name` of a random type and value (lists maybe empty)."""
    types = onnx.AttributeProto
    attr = onnx.AttributeProto(name=name)
    attr.type = rng.choice((types.INT, types.FLOAT, types.STRING, types.INTS, types.FLOATS,
                            types.TENSOR))  # fmt: skip
    if attr.type == types.INT:
        attr.i = rng.choice(INTS)
    elif attr.type == types.FLOAT:
        attr.f = rng.choice(FLOATS)
    elif attr.type == types.STRING:
        attr.s = rng.choice(STRINGS)
    elif attr.type == types.INTS:
        attr.ints.extend(rng.choice(INTS) for _ in range(rng.randint(0, 4)))
    elif attr.type == types.FLOATS:
        attr.floats.extend(rng.choice(FLOATS) for _ in range(rng.randint(0, 3)))
    else:
        attr.t.CopyFrom(numpy_helper.from_array(np.asarray([rng.choice(INTS)], np.int64)))
    return attr


def set_attribute_value(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An attribute's value to an edge case: 0, -1, 2**62, NaN, inf, an odd string."""
    found = [(n, a) for n in model.graph.node for a in n.attribute]
    if not found:
        return None
    node, attr = rng.choice(found)
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rng.choice(INTS)
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(FLOATS)
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice(STRINGS)
    elif attr.type == onnx.AttributeProto.INTS:
        _edit_sequence(attr.ints, rng, INTS)
    elif attr.type == onnx.AttributeProto.FLOATS:
        _edit_sequence(attr.floats, rng, FLOATS)
    elif attr.type == onnx.AttributeProto.TENSOR:
        set_tensor_data(attr.t, rng)
    return f"{node.op_type}.{attr.name} = {helper.get_attribute_value(attr)!r}"


def _edit_sequence(values: Any, rng: random.Random, choices: Sequence[object]) -> None:
    """Set, add or drop one element, or empty the list (a repeated protobuf field)."""
    action = rng.choice(("set", "append", "drop", "clear"))
    if action == "set" and values:
        values[rng.randrange(len(values))] = rng.choice(choices)
    elif action == "drop" and values:
        del values[rng.randrange(len(values))]
    elif action == "clear":
        del values[:]
    else:
        values.append(rng.choice(choices))


def change_attribute_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An attribute of another type under the same name (ints for an int, ...)."""
    found = [(n, i) for n in model.graph.node for i in range(len(n.attribute))]
    if not found:
        return None
    node, index = rng.choice(found)
    replacement = _random_attribute(node.attribute[index].name, rng)
    node.attribute[index].CopyFrom(replacement)
    kind = onnx.AttributeProto.AttributeType.Name(replacement.type)
    value = helper.get_attribute_value(replacement)
    return f"{node.op_type}.{replacement.name} retyped to {kind} {value!r}"


def add_or_drop_attribute(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An attribute the node may not take, or one it needs gone."""
    if not model.graph.node:
        return None
    node = rng.choice(model.graph.node)
    if node.attribute and rng.random() < 0.5:
        dropped = node.attribute.pop(rng.randrange(len(node.attribute)))
        return f"{node.op_type}.{dropped.name} dropped"
    name = rng.choice(ATTRIBUTE_NAMES)
    if any(attr.name == name for attr in node.attribute) and rng.random() < 0.5:
        return None
    node.attribute.append(_random_attribute(name, rng))  # maybe twice: a duplicate
    return f"{node.op_type}.{name} added"


def edit_node_inputs(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node input dropped, duplicated, swapped, blanked or read from another value."""
    nodes = [node for node in model.graph.node if node.input]
    if not nodes:
        return None
    node = rng.choice(nodes)
    i = rng.randrange(len(node.input))
    action = rng.choice(("drop", "duplicate", "swap", "blank", "rewire"))
    if action == "drop":
        del node.input[i]
    elif action == "duplicate":
        node.input.insert(i, node.input[i])
    elif action == "swap":
        j = rng.randrange(len(node.input))
        node.input[i], node.input[j] = node.input[j], node.input[i]
    elif action == "blank":
        node.input[i] = ""
    else:
        node.input[i] = rng.choice([*_defined_names(model.graph), "undefined"])
    return f"{node.op_type} input {i}: {action}"


def edit_node_outputs(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node output dropped, added, or renamed to a name already defined."""
    node = rng.choice(model.graph.node) if model.graph.node else None
    if node is None:
        return None
    action = rng.choice(("drop", "add", "rename"))
    if action == "drop" and node.output:
        node.output.pop()
    elif action == "add":
        node.output.append(f"extra_{len(node.output)}")
    elif node.output:
        node.output[rng.randrange(len(node.output))] = rng.choice(_defined_names(model.graph))
    else:
        return None
    return f"{node.op_type} outputs: {action}"


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def change_input_shape(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An input dimension to 0, 1, large, negative or symbolic; a dimension added or
    removed; or the shape (rank) left unknown."""
    inputs = [v for v in _graph_inputs(model) if v.type.HasField("tensor_type")]
    if not inputs:
        return None
    value = rng.choice(inputs)
    shape = value.type.tensor_type.shape
    action = rng.choice(("set", "set", "symbolic", "add", "remove", "unknown"))
    if action == "unknown":
        value.type.tensor_type.ClearField("shape")
    elif action == "add" or not shape.dim:
        shape.dim.insert(rng.randint(0, len(shape.dim)), onnx.TensorShapeProto.Dimension())
        shape.dim[0].dim_value = rng.choice((1, 2))
    elif action == "remove":
        del shape.dim[rng.randrange(len(shape.dim))]
    elif action == "symbolic":
        shape.dim[rng.randrange(len(shape.dim))].dim_param = rng.choice(("N", "batch", ""))
    else:
        shape.dim[rng.randrange(len(shape.dim))].dim_value = rng.choice(DIMS)
    return f"input {value.name!r} shape: {action} -> {_shape_text(value)}"


def _shape_text(value: onnx.ValueInfoProto) -> str:
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return "unknown rank"
    return str([d.dim_param or d.dim_value for d in tensor_type.shape.dim])


def change_elem_type(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A graph input's, output's or value_info's element type to another (or invalid)."""
    graph = model.graph
    values = [v for v in [*_graph_inputs(model), *graph.output, *graph.value_info]]
    values = [v for v in values if v.type.HasField("tensor_type")]
    if not values:
        return None
    value = rng.choice(values)
    value.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    return f"{value.name!r} elem_type -> {_type_name(value.type.tensor_type.elem_type)}"


def _type_name(elem_type: int) -> str:
    names = TensorProto.DataType
    return names.Name(elem_type) if elem_type in names.values() else f"#{elem_type}"


def set_tensor_data(tensor: onnx.TensorProto, rng: random.Random) -> str:
    """A tensor's values to edge cases (NaN, inf, huge, negative) or zero."""
    try:
        array = numpy_helper.to_array(tensor).copy()
    except Exception:  # an already broken tensor: leave it
        return "data unreadable"
    if array.size:
        flat = array.reshape(-1)
        if array.dtype.kind == "f":
            flat[rng.randrange(flat.size)] = rng.choice(FLOATS)
        elif array.dtype.kind in "iu":
            info = np.iinfo(array.dtype)
            flat[rng.randrange(flat.size)] = rng.choice((0, -1, 1, info.max, info.min, 3, 100))
        else:
            flat[:] = 0
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    return f"data {array.reshape(-1)[:8].tolist()}"


def edit_initializer(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """An initializer's dims, data, data type, or data moved to a missing external file."""
    if not model.graph.initializer:
        return None
    tensor = rng.choice(model.graph.initializer)
    action = rng.choice(("dims", "data", "data", "dtype", "external"))
    if action == "dims":
        _edit_sequence(tensor.dims, rng, (0, 1, 2, 3, 2**31))
        what = f"dims {list(tensor.dims)}"
    elif action == "data":
        what = set_tensor_data(tensor, rng)
    elif action == "dtype":
        tensor.data_type = rng.choice(ELEM_TYPES)
        what = f"data_type {_type_name(tensor.data_type)}"
    else:
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        tensor.external_data.add(key="location", value="missing.bin")
        what = "external data"
    return f"initializer {tensor.name!r}: {what}"


def freeze_or_free_input(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A graph input turned into an initializer of random data (constant folding), or an
    initializer into a graph input (a shape or an axis no longer constant)."""
    graph = model.graph
    if graph.initializer and rng.random() < 0.5:
        tensor = graph.initializer.pop(rng.randrange(len(graph.initializer)))
        graph.input.append(
            helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
        )
        return f"initializer {tensor.name!r} made a graph input"
    inputs = [v for v in _graph_inputs(model) if v.type.tensor_type.elem_type == TensorProto.FLOAT]
    if not inputs:
        return None
    value = rng.choice(inputs)
    dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
    if min(dims, default=0) < 0 or math.prod(dims) > 4096:
        return None
    data = np.random.default_rng(rng.randrange(2**32)).standard_normal(dims).astype(np.float32)
    graph.input.remove(value)
    graph.initializer.append(numpy_helper.from_array(data, value.name))
    return f"input {value.name!r} made an initializer"


def change_opsets(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """The default opset's version changed, a second opset import added, or none left."""
    action = rng.choice(("version", "version", "add", "clear"))
    if action == "version" and model.opset_import:
        model.opset_import[0].version = rng.choice(OPSETS)
        return f"opset {model.opset_import[0].version}"
    if action == "clear":
        del model.opset_import[:]
        return "no opset imports"
    domain = rng.choice(("", "ai.onnx", "com.microsoft", "ai.onnx.ml"))
    model.opset_import.append(helper.make_opsetid(domain, rng.choice(OPSETS)))
    return f"second opset import {domain!r}"


def change_ir_version(model: onnx.ModelProto, rng: random.Random) -> str | None:
    model.ir_version = rng.choice(IR_VERSIONS)
    return f"ir_version {model.ir_version}"


def rename_op(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node's op type to another (inputs and attributes kept), or into another domain."""
    if not model.graph.node:
        return None
    node = rng.choice(model.graph.node)
    old = node.op_type
    if rng.random() < 0.15:
        node.domain = rng.choice(("com.microsoft", "ai.onnx", "custom"))
        return f"{old} moved to domain {node.domain!r}"
    node.op_type = rng.choice(OP_TYPES)
    return f"{old} -> {node.op_type}"


def edit_nodes(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """A node deleted, duplicated, or swapped with another (out of topological order)."""
    nodes = list(model.graph.node)
    if not nodes:
        return None
    i = rng.randrange(len(nodes))
    action = rng.choice(("delete", "duplicate", "swap"))
    op = nodes[i].op_type
    if action == "delete":
        del nodes[i]
    elif action == "duplicate":
        nodes.insert(i, nodes[i])
    else:
        j = rng.randrange(len(nodes))
        nodes[i], nodes[j] = nodes[j], nodes[i]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes, strict=True):
        copy.CopyFrom(node)
    del model.graph.node[:]
    model.graph.node.extend(copies)
    return f"{op} node {action}"


def edit_graph_outputs(model: onnx.ModelProto, rng: random.Random) -> str | None:
    """Graph outputs swapped, duplicated, dropped, or pointed at another value."""
    outputs = model.graph.output
    action = rng.choice(("swap", "duplicate", "drop", "retarget"))
    if not outputs:
        return None
    if action == "swap" and len(outputs) > 1:
        first, second = onnx.ValueInfoProto(), onnx.ValueInfoProto()
        first.CopyFrom(outputs[0])
        second.CopyFrom(outputs[-1])
        outputs[0].CopyFrom(second)
        outputs[-1].CopyFrom(first)
    elif action == "duplicate":
        outputs.add().CopyFrom(rng.choice(outputs))
    elif action == "drop":
        del outputs[rng.randrange(len(outputs))]
    else:
        # The declared type is kept: it may not be the new value's.
        rng.choice(outputs).name = rng.choice(_defined_names(model.graph))
    return f"graph outputs: {action}"


# One structural mutation per line; `make_case` picks among them uniformly.
MUTATIONS: tuple[Mutation, ...] = (
    set_attribute_value,  # Conv.pads = [0, 2**62]
    set_attribute_value,  # (twice: attributes drive most converters' logic)
    change_attribute_type,  # Softmax.axis = "linear"
    add_or_drop_attribute,  # Gemm without transB; Relu with perm
    edit_node_inputs,  # Add(x) ; Conv(x, x, b) ; Where(c, y, x)
    edit_node_outputs,  # Split -> one output ; Relu -> (y, extra_1)
    change_input_shape,  # x: [1, 0, 8, 8] ; ["N", 3, 8, 8] ; unknown rank
    change_elem_type,  # x: float16 ; y: string
    edit_initializer,  # w: dims [4, 3, 3] with 108 values ; shape tensor [2**62]
    freeze_or_free_input,  # x constant: folded ; Reshape's shape a runtime input
    change_opsets,  # opset 9 ; two default-domain imports
    change_ir_version,  # ir_version 3: initializers must be inputs
    rename_op,  # Conv -> MatMul with Conv's attributes
    edit_nodes,  # delete Flatten ; Relu before Conv
    edit_graph_outputs,  # output = an input ; an output twice
)


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A byte-level edit: bits flipped, bytes inserted, deleted, repeated or the end cut."""
    buffer = bytearray(data)
    at = rng.randrange(len(buffer)) if buffer else 0
    action = rng.choice(("flip", "insert", "delete", "truncate", "repeat", "overwrite"))
    if action == "flip":
        for _ in range(rng.randint(1, 8)):
            buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
    elif action == "insert":
        buffer[at:at] = rng.randbytes(rng.randint(1, 16))
    elif action == "delete":
        del buffer[at : at + rng.randint(1, 16)]
    elif action == "truncate":
        del buffer[at:]
    elif action == "repeat":
        buffer[at:at] = buffer[at : at + rng.randint(1, 64)]
    else:
        buffer[at] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01))
    return bytes(buffer), f"bytes: {action} at {at}"


@dataclass(frozen=True, slots=True)
class Case:
    """One fuzz case: a mutated model and how to check it (deterministic per index)."""

    index: int
    seed_name: str
    model: bytes
    mutations: tuple[str, ...]
    fix_shapes: bool = True  # give from_onnx `shapes=` for symbolic input dims
    build: bool = True  # also build and run the compiled module
    feed_seed: int = 0


def make_case(seed: int, index: int, build_fraction: float = 1.0) -> Case:
    """Case `index` of fuzz run `seed`: a seed model with 1 to 3 mutations."""
    rng = random.Random(f"ember-fuzz/{seed}/{index}")
    name = rng.choice(sorted(SEED_GRAPHS))
    original = seed_model(name).SerializeToString()
    model, mutations = seed_model(name), []
    # Mostly one mutation: each more makes a model Ember rightly refuses likelier.
    for _ in range(rng.choices((1, 2, 3), weights=(6, 3, 1))[0]):
        for _attempt in range(10):  # a mutation may not apply (no attributes to set)
            mutation = rng.choice(MUTATIONS)
            try:
                description = mutation(model, rng)
            except Exception as error:  # the fuzzer's bug: the tests look for these
                description = f"{mutation.__name__} raised {type(error).__name__}: {error}"
            if description is not None:
                mutations.append(description)
                break
    try:
        data = model.SerializeToString()
    except Exception as error:  # a value protobuf refuses: fall back on byte mutations
        data, mutations = original, [f"unserializable ({type(error).__name__}): dropped"]
    if rng.random() < 0.1 or data == original:
        data, description = mutate_bytes(data, rng)
        mutations.append(description)
    return Case(
        index=index,
        seed_name=name,
        model=data,
        mutations=tuple(mutations),
        fix_shapes=rng.random() < 0.85,
        build=rng.random() < build_fraction,
        feed_seed=rng.randrange(2**31),
    )
