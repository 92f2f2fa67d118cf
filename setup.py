from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="simcse",
    version="0.1.0",
    description="SimCSE: simple contrastive learning of sentence embeddings (re-implementation with tests and tools)",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8") if Path(__file__).with_name("README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="MIT",
    # the checkout's configs/ folder ships inside the package as simcse/configs (``simcse train --config NAME``)
    packages=find_packages(include=["simcse", "simcse.*"]) + ["simcse.configs", "simcse.configs.ablations",
                                                          "simcse.configs.experiments"],
    package_dir={"simcse.configs": "configs"},
    package_data={"simcse.serving": ["static/*.html", "static/*.css", "static/*.js"], "simcse.configs": ["*.json"],
                  "simcse.configs.ablations": ["*.json"], "simcse.configs.experiments": ["*.json"]},
    python_requires=">=3.10",
    # Lower bounds are versions the whole test suite passes with (scripts/check_min_versions.sh installs
    # exactly these in a fresh venv and runs it); lower versions are not claimed to work.
    install_requires=[
        "torch>=2.13.0",
        "transformers>=5.24.0,<6",
        "accelerate>=1.15.0",
        "datasets>=5.2.0",
        "huggingface_hub>=2.4.0",
        "tokenizers>=0.23.3",
        "numpy>=2.4.6",
        "scipy>=1.17.1",
        "scikit-learn>=1.9.1",
        "tqdm>=4.70.1",
        "safetensors>=0.8.0",
    ],
    extras_require={
        "faiss": ["faiss-cpu>=1.7.4"],
        "plots": ["matplotlib>=3.7"],
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.1"],
        "mteb": ["mteb>=2.0,<3"],
        "serve": ["fastapi>=0.110", "uvicorn>=0.29"],
        "llm": ["peft>=0.13"],
        "slurm": ["submitit>=1.5"],
        "dev": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "sentence-transformers>=3", "matplotlib>=3.7", "faiss-cpu>=1.7.4",
                "onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.1", "mteb>=2.0,<3",
                "fastapi>=0.110", "uvicorn>=0.29", "httpx>=0.27", "playwright>=1.40", "peft>=0.13", "submitit>=1.5"],
    },
    entry_points={"console_scripts": ["simcse=simcse.cli:main", "simcse-train=simcse.training.train:main"]},
)
