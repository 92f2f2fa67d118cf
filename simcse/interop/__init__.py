"""Exports to other ecosystems: sentence-transformers and plain HF folders, ONNX."""
