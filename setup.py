from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="simcse",
    version="0.1.0",
    description="SimCSE: simple contrastive learning of sentence embeddings (re-implementation with tests and tools)",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8") if Path(__file__).with_name("README.md").exists() else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["simcse", "simcse.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.1",
        "transformers>=5.0,<6",
        "accelerate>=1.0",
        "datasets>=3.0",
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "tqdm>=4.60",
        "safetensors>=0.4",
    ],
    extras_require={
        "faiss": ["faiss-cpu>=1.7.4"],
        "plots": ["matplotlib>=3.7"],
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.1"],
        "mteb": ["mteb>=2.0,<3"],
        "dev": ["pytest>=7", "hypothesis>=6", "sentence-transformers>=3", "matplotlib>=3.7", "faiss-cpu>=1.7.4",
                "onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.1", "mteb>=2.0,<3"],
    },
    entry_points={"console_scripts": ["simcse=simcse.cli:main", "simcse-train=simcse.train:main"]},
)
