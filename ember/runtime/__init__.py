"""Running compiled networks: the artifact format and the Python runtime module.

lib = ember.build(graph, target, params=params)
lib.export_library("net.tar")
module = ember.runtime.load("net.tar")
module.set_input("data", x); module.run(); y = module.get_output(0)
"""

from ember.runtime.abi import TensorSpec
from ember.runtime.artifact import FORMAT_VERSION, export_library, load, read_metadata
from ember.runtime.module import BenchmarkResult, Module, ModuleInfo

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
