"""The dot-product step of quantized convs (`ember.codegen.c`, `dot_product`): a small
quantized network compiled for each x86 flavour computes exactly what the reference
interpreter does, and its code holds the instruction the flavour has: `vpdpbusd` on
zmm registers (AVX-512 VNNI), on ymm (AVX-VNNI), `vpmaddwd` pair sums with AVX2 alone.
A flavour this CPU lacks is compiled and disassembled but not run, with a skip that
says so. (AArch64's `sdot`: tests/rpc/test_arm_board.py, on an emulated board.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from quantized_models import conv_chain, mixed_network, quantized

import ember
from ember.frontend import from_onnx
from ember.graph import interpret

# target, the CPU flags it needs to run, the register dpbusd works on (None: no dpbusd)
FLAVOURS = {
    "avx512_vnni": ("llvm -mcpu=icelake-server", {"avx512f", "avx512_vnni"}, "zmm"),
    "avx_vnni": ("llvm -mcpu=alderlake", {"avx2", "avx_vnni"}, "ymm"),
    "avx2": ("llvm -mcpu=haswell", {"avx2", "fma"}, None),
}


def _host_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return set()
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _disassembly(library: ember.Library) -> str:
    return subprocess.run(
        ["objdump", "-d", str(library.so_path)], capture_output=True, text=True, check=True
    ).stdout


def _dpbusd_registers(library: ember.Library) -> set[str]:
    text = _disassembly(library)
    return {f"{match[1]}mm" for match in re.finditer(r"vpdpbusd\S*\s+%(\w)mm", text)}


@pytest.mark.parametrize("activations", ["uint8", "int8"])
@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_quantized_convs_use_the_flavours_dot_product(flavour: str, activations: str) -> None:
    target, needs, register = FLAVOURS[flavour]
    model, shape = conv_chain(channels=3 if activations == "uint8" else 8)
    graph, params = from_onnx(quantized(model, shape, activations))
    library = ember.build(graph, target, params)
    kernels = "\n".join(kernel.c_source for kernel in library.sources.kernels)
    assert kernels.count("ember_dot4_u8i8_") >= 3  # one per conv's reduction step
    registers = _dpbusd_registers(library)
    assert registers == ({register} if register else set())
    if register is None:  # AVX2: int16 pair sums, exact (vpmaddubsw's would saturate)
        assert "vpmaddwd" in _disassembly(library)
    missing = needs - _host_flags()
    if missing:
        pytest.skip(f"compiled and disassembled; not run: this CPU lacks {sorted(missing)}")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (expected,) = interpret(graph, params, {"x": x}).values()
    (out,) = library.load()(x=x).values()
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_depthwise_and_product_layers_compile_exactly(activations: str) -> None:
    """The depthwise conv (an unpacked grouped qconv) and the products (1x1 qconvs) of a
    quantized network, compiled for this machine, equal the interpreter."""
    model, shape = mixed_network()
    graph, params = from_onnx(quantized(model, shape, activations))
    library = ember.build(graph, "llvm", params)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (expected,) = interpret(graph, params, {"x": x}).values()
    (out,) = library.load()(x=x).values()
    np.testing.assert_array_equal(out, expected)


def test_byte_vectors_widen_without_lane_by_lane_code() -> None:
    """A depthwise int8 conv widens its bytes with one instruction per vector
    (`vpmovzxbd` / `vpmovsxbd`): GCC 12 expanded `__builtin_convertvector` of byte
    vectors lane by lane (`vpextrb`) inside kernels, 9x slower (codegen's widen_helper)."""
    for activations, instruction in (("uint8", "vpmovzxbd"), ("int8", "vpmovsxbd")):
        model, shape = mixed_network()
        graph, params = from_onnx(quantized(model, shape, activations))
        text = _disassembly(ember.build(graph, FLAVOURS["avx512_vnni"][0], params))
        assert instruction in text
        assert "vpextrb" not in text
