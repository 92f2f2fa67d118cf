"""ONNX export (fp32, int8) of a :class:`SimCSEModel` and an onnxruntime encoder for CPU inference.

The exported graph is the whole model: token ids in, the pooled sentence embedding out (the pooler and,
when used at inference, the ``cls`` MLP are inside it, and so are the dense head and the unit-length step of a
model read from a sentence-transformers folder with ``Dense`` / ``Normalize`` modules), so nothing but the
tokenizer runs in Python::

    folder/
        onnx/simcse.onnx            # fp32, inputs: the tokenizer's (input_ids, attention_mask[, token_type_ids])
                                    # [, prompt_length (batch,): a model that leaves prompts out of its mean]
        onnx/simcse_int8.onnx       # optional: dynamic int8 quantisation of the fp32 graph
        onnx/simcse_onnx.json       # pooler, hidden size, input names, files written
        tokenizer files, simcse_config.json

The file names differ from sentence-transformers' ``onnx/model.onnx`` (a graph with token outputs), so
both can live in one model folder. Export uses torch's ONNX exporter (``torch.onnx.export``), then
onnxruntime's transformer graph optimiser (fused attention / LayerNorm / GELU kernels) for BERT-like
encoders, and ``onnxruntime.quantization.quantize_dynamic`` for int8 (weights int8 per channel, activations
quantised on the fly).

Decoder LLMs export the same way: the graph holds the attention the model was saved with (bidirectional or
causal, the config's ``is_causal``) and its pooler (``last_token`` included); the prompts and the EOS token are
applied to the text by :class:`ONNXEncoder` as by :meth:`simcse.SimCSEModel.encode` (the folder's prompts, its
tokenizer, :func:`simcse.models.decoder.append_eos` when the export records ``append_eos``).

Needs ``pip install simcse[onnx]`` (onnx, onnxruntime, onnxscript).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from simcse.files.storage import make_temp_folder, ordinary_permissions, signals_end_the_write
from simcse.models.folder import model_fingerprint
from simcse.models.truncation import TRAINED_DIMS_KEY

ONNX_SUBDIR = "onnx"
ONNX_FP32_NAME = "simcse.onnx"
ONNX_INT8_NAME = "simcse_int8.onnx"
ONNX_META_NAME = "simcse_onnx.json"
QUANTIZE_CHOICES = ("int8",)
OUTPUT_NAME = "sentence_embedding"
PROMPT_LENGTH = "prompt_length"  # (batch,) int64 graph input of a model with include_prompt False
# model_type values onnxruntime's transformer optimiser fuses with its BERT rules (attention, LayerNorm, GELU)
_ORT_BERT_LIKE = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert",
                  "electra": "bert", "mpnet": "bert"}


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"ONNX export/inference needs {module!r}: pip install 'simcse[onnx]' "
                          f"(onnx, onnxruntime, onnxscript); {e}") from None


class _Graph(torch.nn.Module):
    """Positional-argument wrapper of a SimCSEModel for the exporter: (input tensors) -> (N, D), made unit length
    when the model encodes unit vectors (``pipeline_normalize``: a sentence-transformers ``Normalize`` module)."""

    def __init__(self, model, input_names: list[str]):
        super().__init__()
        self.model, self.input_names = model, input_names
        self.normalize = bool(getattr(model, "pipeline_normalize", False))

    def forward(self, *inputs):
        batch = dict(zip(self.input_names, inputs))
        out = self.model(**batch)
        return torch.nn.functional.normalize(out, dim=-1) if self.normalize else out


def _export_fp32(model, path: Path, input_names: list[str], opset: int) -> None:
    """torch -> ONNX of ``model`` in eval mode with dynamic batch and sequence axes."""
    tok = model.tokenizer
    sample = tok(["a short sentence", "a somewhat longer sentence for the example"], padding=True,
                 return_tensors="pt")
    sample[PROMPT_LENGTH] = torch.tensor([1, 2])  # only traced when the model leaves prompts out of its mean
    args = tuple(sample[k].to(torch.int64) for k in input_names)
    axes = {k: {0: "batch"} if k == PROMPT_LENGTH else {0: "batch", 1: "sequence"} for k in input_names}
    axes[OUTPUT_NAME] = {0: "batch"}
    was_training, was_unpadded = model.training, getattr(model, "unpadded", False)
    model.eval()
    if was_unpadded:
        model.set_unpadded(False)  # the padding-free path has data-dependent shapes
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's deprecation/tracer chatter
            torch.onnx.export(_Graph(model, input_names).cpu().float(), args, str(path), input_names=input_names,
                              output_names=[OUTPUT_NAME], dynamic_axes=axes, opset_version=opset, dynamo=False)
    finally:
        model.train(was_training)
        if was_unpadded:
            model.set_unpadded(True)


def _optimize(path: Path, model) -> bool:
    """Fuse attention/LayerNorm/GELU with onnxruntime's transformer optimiser, in place; False if skipped."""
    cfg = model.encoder.config
    ort_type = _ORT_BERT_LIKE.get(getattr(cfg, "model_type", ""))
    if ort_type is None:
        return False
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(path), model_type=ort_type, num_heads=cfg.num_attention_heads,
                         hidden_size=cfg.hidden_size, opt_level=1, use_gpu=False)
    opt.save_model_to_file(str(path))
    return True


def quantize_int8(fp32_path: str | os.PathLike, int8_path: str | os.PathLike) -> None:
    """Dynamic int8 quantisation (onnxruntime): MatMul/Gemm weights as signed int8 per output channel,
    activations quantised per batch at run time. Reads ``fp32_path``, writes ``int8_path``."""
    q = _require("onnxruntime.quantization")
    onnx = _require("onnx")
    # fused (com.microsoft) nodes defeat ONNX shape inference: their outputs are float32
    q.quantize_dynamic(str(fp32_path), str(int8_path), weight_type=q.QuantType.QInt8, per_channel=True,
                       op_types_to_quantize=["MatMul", "Gemm"],
                       extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def export_onnx(model, output_dir: str | os.PathLike, quantize: str | None = None, optimize: bool = True,
                opset: int = 17) -> Path:
    """Write ``model`` as an ONNX model folder (see the module docstring); return the folder.

    Args:
        model: a :class:`simcse.SimCSEModel` or a folder it loads from.
        output_dir: created if needed; may be the model's own folder: then only ``onnx/`` is written and the
            model's files (``simcse_config.json``, tokenizer, weights) stay as they are, so exporting never changes
            the source model (the graph's pooler is recorded in ``onnx/simcse_onnx.json``).
        quantize: None (fp32 only) or ``"int8"`` (also ``onnx/simcse_int8.onnx``).
        optimize: run onnxruntime's transformer fusions for BERT-like encoders (same numbers, faster).
        opset: ONNX opset.

    Raises:
        ValueError: an unknown ``quantize``; a model without tokenizer; a prompt-template model (``prompt_mask``:
            the template is inserted into the ids by Python code the graph would not hold); ``output_dir`` holds
            another model.
        ImportError: onnx/onnxruntime are missing.
    """
    from simcse.interop.export import _as_model, source_folder

    if quantize is not None and quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize must be None or one of {list(QUANTIZE_CHOICES)}, got {quantize!r}")
    _require("onnx")
    _require("onnxruntime")
    model = _as_model(model)
    if model.tokenizer is None:
        raise ValueError("the model has no tokenizer; ONNX export needs one to name and trace its inputs")
    if getattr(model, "prompt", None) is not None:
        raise ValueError(f"pooler {model.pooler_type!r} (a prompt template) cannot be exported to ONNX: the template is "
                         "inserted into the token ids by Python code the graph would not hold; encode with simcse.SimCSE")
    input_names = [k for k in model.tokenizer.model_input_names if k in ("input_ids", "attention_mask", "token_type_ids")]
    if not getattr(model, "include_prompt", True):  # the prompt's token count is an input: the graph leaves them out of its mean
        input_names.append(PROMPT_LENGTH)
    out = Path(output_dir)
    holds_model = (out / "config.json").is_file()  # e.g. the model's own folder: never changed (only onnx/ added)
    if holds_model and source_folder(model) != out.resolve():
        raise ValueError(f"{str(out)!r} holds another model (config.json) than the one exported; its tokenizer would "
                         "not be this model's: give a new folder or the model's own folder")
    out.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_folder(out, ".onnx-tmp-")
    try:
        with signals_end_the_write():  # a SIGTERM removes the temporary folder too
            fp32 = tmp / ONNX_FP32_NAME
            _export_fp32(model, fp32, input_names, opset)
            optimized = optimize and _optimize(fp32, model)
            files = [ONNX_FP32_NAME]
            if quantize == "int8":
                quantize_int8(fp32, tmp / ONNX_INT8_NAME)
                files.append(ONNX_INT8_NAME)
            meta = {"format_version": 1, "pooler_type": model.pooler_type, "mlp_only_train": model.mlp_only_train,
                    "hidden_size": model.hidden_size, "max_input_tokens": model.max_input_tokens,
                    "input_names": input_names, "output_name": OUTPUT_NAME, "files": files,
                    "ort_optimized": bool(optimized), "opset": opset,
                    "model_fingerprint": model_fingerprint(model),  # fp32 = torch to 1e-6: the same vectors
                    "append_eos": bool(getattr(model, "append_eos", False)),
                    "normalize": bool(getattr(model, "pipeline_normalize", False)),  # inside the graph
                    "include_prompt": bool(getattr(model, "include_prompt", True))}
            if getattr(model, TRAINED_DIMS_KEY, None):  # the sizes it was trained at (SimCSE(..., truncate_dim=))
                meta[TRAINED_DIMS_KEY] = [int(d) for d in getattr(model, TRAINED_DIMS_KEY)]
            (tmp / ONNX_META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
            if not holds_model:  # a model's folder keeps its own files: the export only adds onnx/
                model.tokenizer.save_pretrained(out)
                (out / "simcse_config.json").write_text(json.dumps(model.simcse_config(), indent=2) + "\n")
            dest = out / ONNX_SUBDIR
            dest.mkdir(exist_ok=True)
            ordinary_permissions(tmp)  # the files get the mode an ordinary write gives
            for f in sorted(tmp.iterdir()):
                os.replace(f, dest / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class ONNXEncoder:
    """Sentence encoder running an exported graph with onnxruntime on CPU; the ``backend="onnx"`` model of
    :class:`simcse.SimCSE` (it has the attributes and :meth:`encode` that the tool uses).

    Args:
        path: a folder written by :func:`export_onnx`.
        file_name: ``"simcse.onnx"`` (fp32, default) or ``"simcse_int8.onnx"``; a path relative to
            ``path/onnx`` or to ``path``. When the folder holds only the int8 file it is the default.
        num_threads: onnxruntime intra-op threads (default: ``torch.get_num_threads()``).

    Raises:
        FileNotFoundError: the folder has no ``onnx/simcse_onnx.json`` or the file is missing.
        ImportError: onnxruntime is missing.
    """

    def __init__(self, path: str | os.PathLike, file_name: str | None = None, num_threads: int | None = None):
        from transformers import AutoTokenizer

        ort = _require("onnxruntime")
        folder = Path(path)
        meta_file = folder / ONNX_SUBDIR / ONNX_META_NAME
        if not meta_file.is_file():
            raise FileNotFoundError(f"{str(path)!r} has no ONNX export ({ONNX_SUBDIR}/{ONNX_META_NAME} is missing); "
                                    "write one with `simcse export --format onnx --model M --output DIR`")
        self.meta = json.loads(meta_file.read_text())
        if file_name is None:
            file_name = self.meta["files"][0]
        onnx_file = next((p for p in (folder / ONNX_SUBDIR / file_name, folder / file_name) if p.is_file()), None)
        if onnx_file is None:
            raise FileNotFoundError(f"{file_name!r} is not in {folder / ONNX_SUBDIR} (it holds {self.meta['files']})")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(num_threads or torch.get_num_threads())
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])
        self.onnx_file = onnx_file
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.pooler_type = self.meta["pooler_type"]
        self.mlp_only_train = self.meta["mlp_only_train"]
        self.hidden_size = int(self.meta["hidden_size"])
        self.matryoshka_dims = self.meta.get(TRAINED_DIMS_KEY)  # None for a model trained at its full size only
        self.max_input_tokens = int(self.meta["max_input_tokens"])
        self.input_names = list(self.meta["input_names"])
        self.device = torch.device("cpu")
        self.training = False
        saved = folder / "simcse_config.json"
        cfg = json.loads(saved.read_text()) if saved.is_file() else {}
        self.prompts, self.default_prompt_name = dict(cfg.get("prompts") or {}), cfg.get("default_prompt_name")
        self.include_prompt = PROMPT_LENGTH not in self.input_names
        if self.meta.get("append_eos"):  # the exported model's rows end with the EOS (the torch model's rule)
            from simcse.models.decoder import append_eos

            append_eos(self.tokenizer, repr(str(path)))

    def fingerprint(self) -> str:
        """The identity of what this encoder computes (:func:`simcse.models.folder.model_fingerprint`): the fp32
        graph's is the exported torch model's (recorded at export; they agree to 1e-6), so an index built with
        either can be searched with the other; the int8 graph (or an export without the record) is identified
        by a SHA-256 of its file."""
        rec = self.meta.get("model_fingerprint")
        if rec and self.onnx_file.name == ONNX_FP32_NAME:
            return rec
        import hashlib

        h = hashlib.sha256(self.pooler_type.encode())
        with open(self.onnx_file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return "sha256:" + h.hexdigest()

    # the torch-module calls SimCSE makes; the session only runs on CPU
    def to(self, device):
        if torch.device(device).type != "cpu":
            raise ValueError(f"the ONNX backend runs on the CPU; got device {str(device)!r}")
        return self

    def eval(self):
        return self

    def encode(self, sentences: list[str], batch_size: int = 64, max_length: int = 128, device=None,
               show_progress: bool = False, normalize: bool = False, dtype=None, prompt: str | None = None,
               prompt_name: str | None = None, truncate_dim: int | None = None) -> np.ndarray:
        """Embed ``sentences``; float32 (N, H) in input order (the contract of :meth:`SimCSEModel.encode`; an
        exported graph records no ``truncate_dim`` of its own, so ``truncate_dim`` None is the full size H).

        Tokenisation and batching are the torch encoder's (:meth:`SimCSEModel.encode`): batches cut from the
        list sorted by token length; ``max_length`` truncates (tokens, capped at the model's limit).

        Raises:
            TypeError/ValueError: as :meth:`SimCSEModel.encode`; a ``dtype`` other than None/float32 (reduced
                precision is the int8 file) or a non-CPU ``device``.
        """
        if dtype not in (None, torch.float32):
            raise ValueError(f"dtype={dtype} is for the torch backend; the ONNX backend's reduced precision is the "
                             f"int8 file ({ONNX_INT8_NAME})")
        from simcse.models.modeling import SimCSEModel

        SimCSEModel._check_encode_args(self, sentences, batch_size, max_length)
        prefix = SimCSEModel.prompt_text(self, prompt, prompt_name)  # the folder's saved prompts, as the torch model
        if prefix:
            sentences = [prefix + s for s in sentences]
        if device is not None:
            self.to(device)
        n = len(sentences)
        out = np.empty((n, self.hidden_size), dtype=np.float32)
        if n == 0:
            return out
        max_length = min(max_length, self.max_input_tokens)
        # the torch encoder's tokenisation and length-sorted batching (only the tokenizer is used)
        flat, lengths, offsets = SimCSEModel._tokenize_flat(self, sentences, max_length)
        order = np.argsort(-lengths, kind="stable")
        starts = range(0, n, batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="encoding", unit="batch")
        prompt_tokens = 0 if self.include_prompt else SimCSEModel.prompt_length(self, prefix, max_length)
        for start in starts:
            idx = order[start : start + batch_size]
            batch = SimCSEModel._padded_batch(self, flat, lengths, offsets, idx)
            batch[PROMPT_LENGTH] = np.full(len(idx), prompt_tokens, dtype=np.int64)
            out[idx] = self.session.run(None, {k: batch[k] for k in self.input_names})[0]
        from simcse.models.truncation import check_truncate_dim, truncate_embeddings

        out = truncate_embeddings(out, check_truncate_dim(truncate_dim, self.hidden_size, "truncate_dim"),
                                  normalize=normalize)
        return out
