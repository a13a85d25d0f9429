"""Ember: an auto-tuning deep-learning compiler for CPUs and GPUs."""

from ember import frontend, graph, testing
from ember.errors import EmberError
from ember.target import Target

__version__ = "0.1.0"

__all__ = ["EmberError", "Target", "__version__", "frontend", "graph", "testing"]
