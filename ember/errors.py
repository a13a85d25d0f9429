"""Errors a user can cause. Each says what was wrong and what to do about it."""

from __future__ import annotations


class EmberError(Exception):
    """Base class of every error Ember raises for bad input or a bad environment."""


class ModelLoadError(EmberError):
    """The model file could not be read: missing, not ONNX, truncated or inconsistent."""


class UnsupportedOperatorError(EmberError):
    """The model uses operators that Ember cannot import."""


class ShapeError(EmberError):
    """Shapes or dtypes do not fit: a bad input shape override or an ill-typed graph."""


class GraphError(EmberError):
    """A graph is structurally invalid (failed `verify`)."""


class WorkloadError(EmberError):
    """An unknown built-in workload or unsupported workload options."""
