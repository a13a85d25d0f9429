"""Built-in workloads with seeded random weights, ONNX export, conformance runner."""
