"""Ember: an auto-tuning deep-learning compiler for CPUs and GPUs.

    import ember
    graph, params = ember.frontend.from_onnx("model.onnx")
    lib = ember.build(graph, ember.Target("llvm"), params=params)
    module = ember.runtime.load("net.tar")

Importing `ember` imports nothing else: each name below is imported on its first use,
so a program that only loads and runs artifacts (`import ember.runtime`) never pays
for the compiler, and the modules a device-side server needs run on a bare Python.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ imports, spelled out for type checkers
    from ember import autoschedule, frontend, graph, runtime, testing
    from ember.build import Library, build
    from ember.errors import EmberError
    from ember.target import Target

__version__ = "0.1.0"

_SUBPACKAGES = ("autoschedule", "frontend", "graph", "runtime", "testing")
# Public name -> the module that defines it.
_NAMES = {
    "EmberError": "ember.errors",
    "Library": "ember.build",
    "Target": "ember.target",
    "build": "ember.build",
}

__all__ = [
    "EmberError",
    "Library",
    "Target",
    "__version__",
    "autoschedule",
    "build",
    "frontend",
    "graph",
    "runtime",
    "testing",
]


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The `ember` module: its attribute `build` is the function, also after the
    module `ember.build` is imported (which sets the package attribute of its name)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "build" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
