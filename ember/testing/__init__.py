"""Built-in workloads with seeded random weights, ONNX export, conformance runner."""

# Imported for their side effect: they fill `to_onnx.EXPORTERS`, one entry per op.
from ember.testing import onnx_exporters, onnx_exporters_nn, onnx_exporters_winograd  # noqa: F401

# The function `to_onnx` shares its name with the module `ember.testing.to_onnx`.
# Importing it after the module has loaded makes the package attribute the function
# (a submodule sets its parent's attribute only when first loaded, just above).
from ember.testing.to_onnx import to_onnx
from ember.testing.workloads import get_workload, list_workloads

__all__ = ["get_workload", "list_workloads", "to_onnx"]
