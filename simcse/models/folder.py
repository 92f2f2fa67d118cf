"""The saved-folder format of :class:`simcse.SimCSEModel`: file names, reading and writing a folder.

A saved SimCSE model is a plain HF encoder folder plus small files::

    config.json, model.safetensors, tokenizer files   # the encoder: AutoModel.from_pretrained(dir) works
    simcse_config.json                                 # pooler_type, mlp_only_train, hidden_size, format version
    simcse_mlp.safetensors                             # the MLP head (only for pooler_type "cls")
    simcse_dense.safetensors                           # Dense layers after pooling (a dense head, if any)
    modules.json, 1_Pooling/, ...                      # sentence-transformers modules (:mod:`simcse.models.st_files`)
    README.md                                          # the model card (:mod:`simcse.models.card`)

(or, for a LoRA adapter, ``adapter_config.json`` and ``adapter_model.safetensors`` instead of the encoder's weights:
:mod:`simcse.models.lora`), so loading never guesses the pooler from the model's name (the reference's tool did).
A save over an earlier model leaves only the new model's files of these names (:mod:`simcse.models.folder_files`).
:class:`SavedFolder` is the
mixin that gives :class:`simcse.SimCSEModel` its ``save_pretrained`` / ``from_pretrained`` / ``load_weights``.

Why one module: it is the folder format's reader and writer together (which file records what, which pooler and
modules a folder of another tool means, how a save replaces an earlier one); a rule read here is written here, so
the two cannot drift apart. File-name bookkeeping and sentence-transformers' module files live beside it
(:mod:`simcse.models.folder_files`, :mod:`simcse.models.st_files`).
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
from pathlib import Path

import torch
from torch import nn

from simcse.files.storage import atomic_folder, writing
from simcse.models.card import CARD_NAME, write_model_card
from simcse.models.decoder import check_decoder_pooler, default_decoder_pooler, read_model_config
from simcse.models.after_pooling import apply_recorded_pipeline, load_dense_weights, pipeline_config, write_dense_weights
from simcse.models.dense import DENSE_WEIGHTS_NAME
from simcse.models.pooling import PROMPT_POOLERS, get_pooler, recorded_pooler
from simcse.models.prompt_pooling import check_include_prompt, recorded_include_prompt
from simcse.models.reference_checkpoints import missing_pooler_message, published_pooler, read_reference_mlp
from simcse.models.fingerprint import model_fingerprint, tokenizer_settings  # re-exported: their old home
from simcse.models.folder_files import (MLM_HEAD_WEIGHTS_NAME, MLP_WEIGHTS_NAME, SIMCSE_CONFIG_NAME, TOKENIZER_FILES,
                                        WEIGHT_FILES, written_by_a_save)
from simcse.models.st_files import (apply_st_pipeline, read_st_pipeline, st_transformer_folder,
                                   write_sentence_transformers_files)
from simcse.models.truncation import TRAINED_DIMS_KEY

logger = logging.getLogger(__name__)

TRAIN_COMMAND_NAME = "simcse_train_command.txt"  # in a training checkpoint-N: the run's command line (one line)

FORMAT_VERSION = 1


def _check_model_dir(path: str, hf_kwargs: dict | None = None) -> bool:
    """True when ``path`` is a local folder (checked for weights); False for a hub name.

    Raises:
        FileNotFoundError: ``path`` looks like a local path but does not exist, or has no weight file (for the
            output folder of an unfinished training run, the message names its newest ``checkpoint-N`` and the
            command that resumes the run).
    """
    p = Path(path)
    if p.is_dir():
        if not any((p / f).is_file() for f in WEIGHT_FILES):
            raise FileNotFoundError(
                f"model folder {path!r} has no weights: expected one of {list(WEIGHT_FILES)}{_unfinished_run_hint(p)}"
            )
        return True
    if p.exists() or path.startswith((".", "/", "~")) or os.sep + os.sep in path or path.count("/") > 1:
        raise FileNotFoundError(f"model path {path!r} is not a folder with a saved model")
    _check_hub_name(path, hf_kwargs)
    return False  # a hub name such as "bert-base-uncased"; transformers resolves it (needs the hub)

def _unfinished_run_hint(folder: Path) -> str:
    """For a folder holding the ``checkpoint-N`` folders of a training run that stopped before saving the final
    model: the newest checkpoint and the command that resumes the run (the run's own command line, which
    training writes into each checkpoint as :data:`TRAIN_COMMAND_NAME`, with ``--resume_from_checkpoint``);
    else ``""``."""
    from transformers.trainer_utils import get_last_checkpoint

    try:
        last = get_last_checkpoint(str(folder))
    except OSError:
        return ""
    if last is None:
        return ""
    try:
        command = (Path(last) / TRAIN_COMMAND_NAME).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        command = ""
    resume = (f"{command} --resume_from_checkpoint {shlex.quote(last)}" if command else
              f"the training command that wrote it, with --resume_from_checkpoint {shlex.quote(last)}")
    return (f"; it holds the checkpoints of a training run that stopped before saving the final model, the newest "
            f"being {last!r} (itself a saved model that loads); resume the run with: {resume}")

def _check_hub_name(name: str, hf_kwargs: dict | None = None, timeout: float = 3.0) -> None:
    """Fail at once, saying what was looked for, when hub name ``name`` cannot be loaded here.

    Passes when the name is in the local HF cache or the hub answers a TCP connection within ``timeout``
    seconds; otherwise (``HF_HUB_OFFLINE=1``, or no route to the hub) transformers would spend its retries
    (~25 s) before a generic message.

    Raises:
        FileNotFoundError: not a local folder, not cached, and the hub is off or unreachable.
    """
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    looked = f"{name!r} is not a local folder (no {str(Path(name).resolve())!r})"
    try:
        cache = {k: v for k, v in (hf_kwargs or {}).items() if k in ("cache_dir", "revision")}
        if isinstance(try_to_load_from_cache(name, "config.json", **cache), str):
            return
    except ValueError:  # not a valid hub repo id either
        raise FileNotFoundError(f"{looked} and not a valid hub model id") from None
    where = f"and not in the HF cache ({(hf_kwargs or {}).get('cache_dir') or constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"{looked} {where}; HF_HUB_OFFLINE is set, so the hub was not asked: "
                                "give a local model folder, or download the model where the hub is reachable")
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        raise FileNotFoundError(f"{looked} {where}, and the hub ({host}) cannot be reached from this machine ({e}); "
                                "give a local model folder, or download the model where the hub is reachable") from None

_HUB_KWARGS = ("cache_dir", "revision", "token", "local_files_only", "force_download")

def _hub_file(repo_id: str, filename: str, hf_kwargs: dict) -> Path | None:
    """``filename`` of Hub model ``repo_id`` (downloaded, or from the Hub cache when offline), or None when the
    repository (or, offline, its cached snapshot) has no such file. ``hf_kwargs``: the hub options of
    :meth:`SimCSEModel.from_pretrained` (``cache_dir``, ``revision``, ``token``...)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, filename, **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS}))
    except EntryNotFoundError:  # remote: no such file; offline: not in the cached snapshot
        return None

def _saved_file(path: str, filename: str, is_local: bool, hf_kwargs: dict) -> Path | None:
    """``filename`` of model ``path``: in the local folder (it may not exist), else from the Hub (:func:`_hub_file`)."""
    return Path(path) / filename if is_local else _hub_file(path, filename, hf_kwargs)

@contextlib.contextmanager
def quiet_transformers_bars():
    """Within the block, transformers' own progress bars (``Loading weights 0/N`` and ``Writing model shards``,
    which transformers 5 draws on every ``from_pretrained`` / ``save_pretrained``) are not drawn; the previous
    setting is restored on exit.

    Uses ``transformers.utils.logging.set_tqdm_hook`` (the hook returned is put back), so download bars of
    ``huggingface_hub`` and the user's own transformers bars outside the block are untouched.
    """
    from transformers.utils import logging as hf_logging

    def no_bar(factory, args, kwargs):
        return factory(*args, **{**kwargs, "disable": True})

    previous = hf_logging.set_tqdm_hook(no_bar)
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)


def _load_encoder(path: str, trust_remote_code: bool = False, **kwargs):
    """Load ``AutoModel`` from ``path``; return (encoder, its detached pooler module or None).

    The encoder's own pooler (BERT's NSP pooler: Linear + Tanh) is detached: SimCSE never runs it inside the
    encoder, and an unused module would break DDP's gradient bookkeeping. It is returned so that a plain HF
    checkpoint evaluated with ``cls`` can use its weights (as the reference evaluation's ``pooler_output``)
    and so that saving can put it back, holding the MLP (as the reference's ``simcse_to_huggingface``).
    """
    from transformers import AutoModel

    if kwargs.get("weights_only", True) is not True:
        raise ValueError("weights_only=False is refused: simcse loads pickle-based weight files (pytorch_model.bin) "
                         "only with torch.load(weights_only=True); convert the checkpoint to safetensors instead")
    import pickle

    if is_adapter_folder(path):  # LoRA adapter + base reference (simcse.models.lora)
        from simcse.models.lora import load_lora_encoder

        cfg = SavedFolder.read_simcse_config(path) or {}
        overrides = {"is_causal": False} if cfg.get("bidirectional") else {}
        with quiet_transformers_bars():
            return load_lora_encoder(path, overrides, **{k: v for k, v in kwargs.items() if k != "weights_only"}), None
    try:
        with quiet_transformers_bars():
            encoder = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except Exception as e:
        if type(e).__name__ != "SafetensorError" and not isinstance(e, pickle.UnpicklingError):
            raise
        if isinstance(e, pickle.UnpicklingError):  # torch.load(weights_only=True) met an object that is not a tensor
            _refuse_pickle(path, e)
        raise OSError(f"cannot read the weights in {path!r}: {str(e).splitlines()[0]} (a truncated or corrupt "
                      "model.safetensors? save or copy the model again)") from None
    hf_pooler = getattr(encoder, "pooler", None)
    if not isinstance(hf_pooler, nn.Module):
        return encoder, None
    encoder.pooler = None
    return encoder, hf_pooler


def is_adapter_folder(path) -> bool:
    """A local folder holding a LoRA adapter (``adapter_config.json``) instead of full encoder weights."""
    p = Path(path)
    return (p / "adapter_config.json").is_file() and not any((p / f).is_file() for f in ("model.safetensors", "pytorch_model.bin"))


def _refuse_pickle(path: str, e: Exception) -> None:
    """ValueError for pickle-based weights that hold more than tensors (``torch.load(weights_only=True)`` refused)."""
    detail = next((line for line in str(e).splitlines() if "GLOBAL" in line), "").strip()
    raise ValueError(
        f"refusing to load the pickle-based weights of {path!r}: they hold objects other than tensors, which "
        f"only an unsafe torch.load(weights_only=False) would run{f' ({detail})' if detail else ''}; "
        "expected model.safetensors (convert trusted weights with safetensors)"
    ) from None


def _check_tokenizer_files(path: str) -> None:
    """FileNotFoundError when the local model folder ``path`` holds no tokenizer vocabulary.

    Without one, transformers builds an empty tokenizer that maps every word to ``[UNK]``: the model then
    loads and encodes without an error, into embeddings that say nothing about the sentences.
    """
    if not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(f"model folder {path!r} has no tokenizer: expected one of {list(TOKENIZER_FILES)} "
                                "(save the tokenizer with the model: tokenizer.save_pretrained(folder))")


def _check_tokenizer_fits(tokenizer, encoder) -> None:
    """ValueError when ``tokenizer`` makes token ids the encoder's embedding matrix has no row for.

    Without this check a mismatched tokenizer fails deep inside torch ("index out of range in self").
    """
    emb = encoder.get_input_embeddings() if hasattr(encoder, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    if tokenizer is None or not isinstance(rows, int):
        return
    n = len(tokenizer)
    if n > rows:
        raise ValueError(
            f"tokenizer ({type(tokenizer).__name__}, {n} tokens) does not match the encoder: its embedding matrix "
            f"has {rows} rows, so token ids {rows}..{n - 1} would be out of range; expected the tokenizer saved "
            "with this model (or resize the embeddings with encoder.resize_token_embeddings(len(tokenizer)))"
        )


def _pooler_dense(hf_pooler) -> nn.Linear | None:
    """The ``nn.Linear`` of an HF pooler (BERT's ``pooler.dense``), or None."""
    dense = getattr(hf_pooler, "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


class SavedFolder:
    """save_pretrained / from_pretrained / load_weights of :class:`simcse.SimCSEModel` (see the module)."""

    # ----------------------------------------------------------------------------------- save / load
    def simcse_config(self) -> dict:
        """``simcse_config.json``: version, pooler, MLP flag, embedding size; ``matryoshka_dims``, :func:`pipeline_config`."""
        from simcse.models.decoder import is_bidirectional, is_decoder_config

        cfg = {
            "format_version": FORMAT_VERSION,
            "pooler_type": self.pooler_type,
            "mlp_only_train": self.mlp_only_train,
            "hidden_size": self.hidden_size,
            **({"prompt": self.prompt.to_dict()} if getattr(self, "prompt", None) is not None else {}),
        }
        encoder_config = getattr(self.encoder, "config", None)
        if encoder_config is not None and is_decoder_config(encoder_config):  # decoder LLMs: the attention used
            cfg["bidirectional"] = is_bidirectional(encoder_config)
            cfg["append_eos"] = bool(getattr(self, "append_eos", False))  # the saved tokenizer appends it itself
        if not getattr(self, "include_prompt", True):
            cfg["include_prompt"] = False
        from simcse.models.lora import is_lora

        if is_lora(self.encoder) and not getattr(self, "_merging_lora", False):
            cfg["lora_adapter"] = True  # the folder holds an adapter over base_model_name_or_path
        if getattr(self, "prompts", None):
            cfg["prompts"] = dict(self.prompts)
            cfg["default_prompt_name"] = self.default_prompt_name
        if getattr(self, TRAINED_DIMS_KEY, None):
            cfg[TRAINED_DIMS_KEY] = [int(d) for d in getattr(self, TRAINED_DIMS_KEY)]
        return {**cfg, **pipeline_config(self)}

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict | None = None,
                        is_main_process: bool = True, merge_lora: bool = False) -> None:
        """Write the encoder, tokenizer, ``simcse_config.json`` and MLP weights (safetensors), the
        sentence-transformers module files (:func:`simcse.models.st_files.write_sentence_transformers_files`) and the
        model card ``README.md`` (:func:`simcse.models.card.write_model_card`).

        Files are first written to a temporary folder next to ``save_directory`` and then moved in one
        rename each (:func:`simcse.files.storage.atomic_folder`), so an interrupted save never leaves a half-written
        weight file in place; only then are the files an earlier save left there and this one did not write
        removed (the other format's weights, an MLP, module or tokenizer file the model no longer has:
        :func:`simcse.models.folder_files.written_by_a_save`; files of other names are kept); a failed write
        raises :class:`simcse.files.storage.WriteError`. With ``is_main_process=False`` (HF's keyword for the
        other processes of a distributed run) nothing is written.
        ``state_dict`` (HF's keyword) is ignored: the model's own weights are written. An encoder with LoRA
        adapters (:mod:`simcse.models.lora`) is written as its adapter and base reference, or with ``merge_lora``
        as merged full weights.
        """
        from safetensors.torch import save_file

        if not is_main_process:
            return
        self._merging_lora = bool(merge_lora)
        stale = functools.partial(written_by_a_save, tokenizer=self.tokenizer is not None)
        with atomic_folder(save_directory, "the model", replaces=stale) as tmp:
            self._save_encoder(tmp)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp)
            if self.mlp is not None:
                save_file({k: v.detach().contiguous().cpu() for k, v in self.mlp.state_dict().items()}, str(tmp / MLP_WEIGHTS_NAME))
            write_dense_weights(self, tmp)
            if getattr(self, "mlm_head", None) is not None:
                save_file(self._mlm_head_state(), str(tmp / MLM_HEAD_WEIGHTS_NAME))
            (tmp / SIMCSE_CONFIG_NAME).write_text(json.dumps(self.simcse_config(), indent=2) + "\n")
            write_sentence_transformers_files(self, tmp)  # the folder is a sentence-transformers folder too
        with writing("the model card", save_directory):
            write_model_card(Path(save_directory), simcse_config=self.simcse_config())  # keeps results/training info

    def _mlm_head_state(self) -> dict[str, torch.Tensor]:
        """The MLM head's own tensors (transform, LayerNorm, bias), each storage once; the decoder weight tied to
        the encoder's word embeddings is left out (it is saved with the encoder)."""
        seen = {self.encoder.get_input_embeddings().weight.data_ptr()}
        out = {}
        for k, v in self.mlm_head.state_dict().items():
            if v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                out[k] = v.detach().contiguous().cpu()
        return out

    def _save_encoder(self, folder: Path) -> None:
        from simcse.models.lora import is_lora, merged_copy

        if is_lora(self.encoder):
            with quiet_transformers_bars():
                if getattr(self, "_merging_lora", False):
                    merged_copy(self.encoder).save_pretrained(folder, safe_serialization=True)
                else:
                    self.encoder.save_pretrained(folder)  # adapter_config.json + adapter_model.safetensors
                    (folder / CARD_NAME).unlink(missing_ok=True)  # peft's blank card: save_pretrained writes simcse's
            return
        # Put the detached HF pooler back for the save so the folder is a complete HF model; when this model
        # has an MLP of the same shape, the pooler holds the MLP, so HF's ``pooler_output`` equals our ``cls``.
        hf_pooler = self._hf_pooler[0] if self._hf_pooler else None
        dense = _pooler_dense(hf_pooler)
        if dense is not None and self.mlp is not None and dense.weight.shape == self.mlp.dense.weight.shape:
            with torch.no_grad():
                dense.weight.copy_(self.mlp.dense.weight)
                dense.bias.copy_(self.mlp.dense.bias)
        if hf_pooler is not None:
            self.encoder.pooler = hf_pooler.to(self.device)
        try:
            with quiet_transformers_bars():
                self.encoder.save_pretrained(folder, safe_serialization=True)
        finally:
            if hf_pooler is not None:
                self.encoder.pooler = None

    @staticmethod
    def read_simcse_config(path: str | os.PathLike) -> dict | None:
        """The parsed ``simcse_config.json`` of a local folder, or None when it has none."""
        f = Path(path) / SIMCSE_CONFIG_NAME
        if not f.is_file():
            return None
        try:
            cfg = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{f} is not valid JSON ({e}); expected the file save_pretrained writes") from None
        if not isinstance(cfg, dict) or "pooler_type" not in cfg:
            raise ValueError(f"{f} has no pooler_type; expected the file save_pretrained writes")
        if cfg.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{f} has format_version {cfg['format_version']}; this simcse reads <= {FORMAT_VERSION}")
        return cfg

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str | os.PathLike,
        pooler_type: str | None = None,
        mlp_only_train: bool | None = None,
        new_mlp_init: str = "encoder_pooler",
        trust_remote_code: bool = False,
        prompt: dict | None = None,
        include_prompt: bool | None = None,
        append_eos: bool | str | None = None,
        **hf_kwargs,
    ) -> "SavedFolder":
        """Load a folder saved by :meth:`save_pretrained`, a plain HF encoder folder, a folder written by the
        reference code's trainer (:mod:`simcse.models.reference_checkpoints`; its ``mlp.dense.*`` becomes the ``cls``
        MLP), or a hub name.

        For a hub name, ``simcse_config.json`` and ``simcse_mlp.safetensors`` are read from the repository (or
        the Hub cache offline) like the encoder, so a pushed model comes back with its pooler and MLP.

        Args:
            pooler_type: overrides the saved pooler. Without one: the saved one, else the one a
                sentence-transformers folder's ``1_Pooling`` records (:func:`simcse.models.pooling.recorded_pooler`);
                a reference trainer folder is an error (its pooler is not recorded); the reference's 8 published
                model ids get their documented pooler (one log line); anything else gets ``cls`` with a warning.
            mlp_only_train: overrides the saved flag (default False for a plain encoder).
            new_mlp_init: how a ``cls`` MLP absent from the folder starts: ``"encoder_pooler"`` copies the
                encoder's own pretrained pooler (BERT's, as the reference evaluation's ``pooler_output``),
                ``"random"`` draws N(0, initializer_range) like the reference trainer's fresh ``MLPLayer``.
            trust_remote_code: passed to transformers; off by default.
            prompt: the prompt template(s) of a ``prompt_mask`` pooler (:class:`simcse.models.prompt.PromptConfig`
                dict); default: the one the folder records.
            include_prompt: False leaves instruction prompts out of a mean pooler's average
                (:mod:`simcse.models.prompt_pooling`); default: what ``simcse_config.json`` records, else for a mean
                pooler what a sentence-transformers folder's ``1_Pooling/config.json`` does, else True.
            append_eos: end every tokenised text with the EOS token (:func:`simcse.models.decoder.append_eos`):
                True/False, or ``"auto"``/None: what the folder records for its own pooler, else on for a decoder
                pooled with ``last_token`` (:func:`simcse.models.decoder.resolve_append_eos`). A tokenizer that
                already ends with EOS keeps it.
            hf_kwargs: more ``AutoModel.from_pretrained`` options (``dtype``, ``attn_implementation``...).

        Raises:
            FileNotFoundError: a local path that is missing or holds no weights.
            ValueError: an unknown pooler name or ``new_mlp_init``; a reference trainer folder without a pooler;
                ``include_prompt`` False with a pooler that is not a mean; an ``append_eos`` the tokenizer cannot take.
        """
        from transformers import AutoTokenizer

        from simcse.models.decoder import apply_append_eos

        path = str(model_name_or_path)
        if new_mlp_init not in ("encoder_pooler", "random"):
            raise ValueError(f"new_mlp_init must be 'encoder_pooler' or 'random', got {new_mlp_init!r}")
        module_dir = st_transformer_folder(path) if os.path.isdir(path) else None
        encoder_path = str(module_dir) if module_dir is not None else path  # an older save's 0_Transformer/
        is_local = _check_model_dir(encoder_path, hf_kwargs)
        hub_cfg = None if is_local else _hub_file(path, SIMCSE_CONFIG_NAME, hf_kwargs)
        cfg = cls.read_simcse_config(path if is_local else hub_cfg.parent) if is_local or hub_cfg else None
        ref_mlp = read_reference_mlp(path) if is_local and cfg is None else None
        pipeline = read_st_pipeline(path) if is_local and cfg is None else None  # refuses modules it cannot apply
        config = hf_kwargs.get("config") or read_model_config(encoder_path, trust_remote_code, hf_kwargs)
        if pooler_type is None:
            pooler_type = cls._default_pooler(path, cfg, ref_mlp is not None, is_local, config)
        get_pooler(pooler_type)  # fail on a bad name before loading weights
        check_decoder_pooler(config, pooler_type, repr(path))
        if include_prompt is None:
            include_prompt = recorded_include_prompt(path if is_local else None, cfg, pooler_type)
        check_include_prompt(include_prompt, pooler_type)
        own = cfg is not None and "append_eos" in cfg and cfg["pooler_type"] == pooler_type
        if append_eos in (None, "auto") and own:
            append_eos = bool(cfg["append_eos"])  # the folder's own setting (auto decides for another pooler)
        if mlp_only_train is None:
            mlp_only_train = bool(cfg["mlp_only_train"]) if cfg is not None else False
        if is_local:
            _check_tokenizer_files(encoder_path)
        encoder, hf_pooler = _load_encoder(encoder_path, trust_remote_code=trust_remote_code, **hf_kwargs)
        hf_dense = _pooler_dense(hf_pooler)
        tokenizer = AutoTokenizer.from_pretrained(encoder_path, trust_remote_code=trust_remote_code,
                                                  **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS})
        if prompt is None and cfg is not None and pooler_type in PROMPT_POOLERS:
            prompt = cfg.get("prompt")
        model = cls(encoder, pooler_type=pooler_type, mlp_only_train=mlp_only_train, tokenizer=tokenizer, hf_pooler=hf_pooler,
                    prompt=prompt, include_prompt=include_prompt)
        apply_append_eos(model, append_eos, repr(path))
        if cfg is not None and cfg.get(TRAINED_DIMS_KEY):
            setattr(model, TRAINED_DIMS_KEY, [int(d) for d in cfg[TRAINED_DIMS_KEY]])
        if model.mlp is not None:
            mlp_file = _saved_file(path, MLP_WEIGHTS_NAME, is_local, hf_kwargs)
            if mlp_file is not None and mlp_file.is_file():
                from safetensors.torch import load_file

                model.mlp.load_state_dict(load_file(str(mlp_file)))
            elif ref_mlp is not None:
                model.mlp.load_state_dict(ref_mlp)
                logger.info("%s: the cls MLP is the reference checkpoint's mlp.dense.*", path)
            elif new_mlp_init == "encoder_pooler" and hf_dense is not None and hf_dense.weight.shape == model.mlp.dense.weight.shape:
                model.mlp.dense.load_state_dict(hf_dense.state_dict())
            elif new_mlp_init == "encoder_pooler" and not mlp_only_train:
                logger.warning("%s has no MLP weights for pooler 'cls'; the MLP is randomly initialised", path)
        if cfg is not None and cfg.get("prompts"):
            model.set_prompts(cfg["prompts"], cfg.get("default_prompt_name"))
        if cfg is not None:  # the dense head, unit length, truncate_dim
            weights = _saved_file(path, DENSE_WEIGHTS_NAME, is_local, hf_kwargs) if cfg.get("dense") else None
            apply_recorded_pipeline(model, cfg, weights, str(Path(path) / SIMCSE_CONFIG_NAME))
        if pipeline is not None:
            apply_st_pipeline(model, pipeline, path)
        return model

    @staticmethod
    def _default_pooler(path: str, cfg: dict | None, reference_folder: bool, is_local: bool, config=None) -> str:
        """The pooler when none is given: the saved one; the one a sentence-transformers folder records (a
        ValueError naming its Pooling module when it has none); none for a reference trainer folder (ValueError); for the reference's 8 published ids their documented one (one log
        line); ``last_token`` for a decoder LLM; else ``cls`` with a warning."""
        if cfg is not None:
            return cfg["pooler_type"]
        recorded = recorded_pooler(path) if is_local else None
        if recorded is not None:  # a sentence-transformers folder's pooling
            logger.info("%s: pooler_type=%r, read from %s", path, recorded[0], recorded[1])
            return recorded[0]
        if reference_folder:
            raise ValueError(missing_pooler_message(path))
        documented = published_pooler(path)
        if documented is not None:
            logger.warning("%s is one of the reference's published models: using its documented pooler %r "
                           "(pass pooler_type, or SimCSE(..., pooler=...), to choose)", path, documented)
            return documented
        chosen = default_decoder_pooler(config) or "cls"
        logger.warning("%s has no %s; using pooler_type=%r%s (pass pooler_type, or SimCSE(..., pooler=...), to "
                       "choose)", path, SIMCSE_CONFIG_NAME, chosen, " (a decoder LLM)" if chosen != "cls" else "")
        return chosen

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load encoder, MLP and dense-head weights saved by :meth:`save_pretrained` into this model, in place; with
        an attached MLM head (``do_mlm``) also the head's weights when the folder has them (training checkpoints).

        Raises:
            FileNotFoundError: no weights, or no MLP / dense-head file the model needs. ValueError: an incomplete head file.
        """
        from safetensors.torch import load_file

        _check_model_dir(str(path))
        fresh, _ = _load_encoder(str(path), dtype=next(self.encoder.parameters()).dtype)
        self.encoder.load_state_dict(fresh.state_dict())
        if self.mlp is not None:
            mlp_file = Path(path) / MLP_WEIGHTS_NAME
            if not mlp_file.is_file():
                raise FileNotFoundError(f"{mlp_file} is missing: the checkpoint has no MLP for pooler 'cls'")
            self.mlp.load_state_dict(load_file(str(mlp_file)))
        load_dense_weights(self, Path(path))
        head_file = Path(path) / MLM_HEAD_WEIGHTS_NAME
        if getattr(self, "mlm_head", None) is not None and head_file.is_file():  # a checkpoint of a do_mlm run
            state = load_file(str(head_file))
            missing = set(self._mlm_head_state()) - set(state)
            if missing:
                raise ValueError(f"{head_file} lacks MLM head weights {sorted(missing)}")
            self.mlm_head.load_state_dict(state, strict=False)
