"""Running compiled networks: the artifact format and the Python runtime module.

lib = ember.build(graph, target, params=params)
lib.export_library("net.tar")
module = ember.runtime.load("net.tar")
module.set_input("data", x); module.run(); y = module.get_output(0)


Names import on first use, so `ember.runtime.abi` (standard library only) can be
imported without NumPy, as a device-side server does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.lazy import lazy_exports

if TYPE_CHECKING:  # what __getattr__ imports, spelled out for type checkers
    from ember.runtime.abi import TensorSpec
    from ember.runtime.artifact import FORMAT_VERSION, export_library, load, read_metadata
    from ember.runtime.module import BenchmarkResult, Module, ModuleInfo

_NAMES = {
    "TensorSpec": "ember.runtime.abi",
    "FORMAT_VERSION": "ember.runtime.artifact",
    "export_library": "ember.runtime.artifact",
    "load": "ember.runtime.artifact",
    "read_metadata": "ember.runtime.artifact",
    "BenchmarkResult": "ember.runtime.module",
    "Module": "ember.runtime.module",
    "ModuleInfo": "ember.runtime.module",
}

__all__ = [
    "FORMAT_VERSION",
    "BenchmarkResult",
    "Module",
    "ModuleInfo",
    "TensorSpec",
    "export_library",
    "load",
    "read_metadata",
]


__getattr__ = lazy_exports(__name__, _NAMES)
