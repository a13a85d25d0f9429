"""Ember: an auto-tuning deep-learning compiler for CPUs and GPUs."""

from ember import frontend, graph, testing
from ember.build import Library, build
from ember.errors import EmberError
from ember.target import Target

__version__ = "0.1.0"

__all__ = [
    "EmberError",
    "Library",
    "Target",
    "__version__",
    "build",
    "frontend",
    "graph",
    "testing",
]
