"""The sentence-transformers module files of a saved :class:`simcse.SimCSEModel` folder, and the reader of
folders sentence-transformers saved.

:meth:`SimCSEModel.save_pretrained` adds them to every saved folder (Transformer in the folder root,
``1_Pooling``, a ``2_Dense`` Linear+Tanh module holding the ``cls`` MLP when the MLP is used at inference, the
model's dense head as further ``k_Dense`` modules, and ``k_Normalize`` for a model that encodes unit vectors),
so ``SentenceTransformer(folder)`` loads it and encodes like our model. sentence-transformers is not needed to
write them; the formats are the ones its ``models.Transformer`` / ``models.Pooling`` / ``models.Dense`` /
``models.Normalize`` read (checked in the tests with the installed package).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import torch

from simcse.models.dense import check_dense_config, load_dense_layer, read_dense_weights, write_dense_module

# our pooler -> sentence-transformers pooling mode (a concatenation "a+b": each part's, :func:`st_modes_of`)
ST_POOLING_MODES = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean", "last_token": "lasttoken", "max": "max",
                    "weighted_avg": "weightedmean", "avg_sqrt_len": "mean_sqrt_len_tokens"}


def st_modes_of(pooler_type: str) -> tuple[str, ...] | None:
    """The sentence-transformers Pooling modes that compute ``pooler_type`` (``("mean",)`` for ``avg``,
    ``("cls", "max")`` for ``cls_before_pooler+max``), or None when a part has no Pooling mode (``avg_top2``,
    ``avg_first_last``, the prompt-template poolers). ``cls`` is ``("cls",)``: its MLP is a Dense module."""
    parts = str(pooler_type).split("+")
    if not all(p in ST_POOLING_MODES for p in parts):
        return None
    return tuple(ST_POOLING_MODES[p] for p in parts)


_ST_LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                           "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                           "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


def st_pooling_modes(pcfg: dict) -> tuple[str, ...]:
    """The pooling modes a sentence-transformers ``1_Pooling/config.json`` records, as a tuple of 6.x mode names
    (``("mean",)``, ``("cls",)``, ``("lasttoken",)``, or several when their outputs are concatenated).

    Reads both formats sentence-transformers has written: 6.x's ``"pooling_mode": "mean"`` (a string or a list),
    and the boolean ``pooling_mode_*`` keys of earlier releases; ``pooling_mode`` wins when both are present, and a
    legacy file with no mode set means mean pooling, as sentence-transformers' own loader
    (``sentence_transformers/.../pooling.py``, ``_convert_legacy_pooling_kwargs``) reads it.
    """
    mode = pcfg.get("pooling_mode")
    if isinstance(mode, str):
        return (mode,)
    if isinstance(mode, (list, tuple)) and all(isinstance(m, str) for m in mode):
        return tuple(mode)
    legacy = [k for k in _ST_LEGACY_POOLING_KEYS if k in pcfg]
    if not legacy:
        return ("mean",)  # sentence-transformers' default Pooling
    active = tuple(_ST_LEGACY_POOLING_KEYS[k] for k in _ST_LEGACY_POOLING_KEYS if pcfg.get(k) is True)
    return active or ("mean",)


def mlp_at_inference(model) -> bool:
    """Whether ``model`` (a :class:`simcse.SimCSEModel`) applies its ``cls`` MLP when encoding."""
    return model.mlp is not None and not model.mlp_only_train

def write_sentence_transformers_files(model, folder: str | os.PathLike, max_seq_length: int = 128) -> bool:
    """Write the sentence-transformers module files into a saved model folder; True when ST can load it.

    Modules: ``0`` Transformer (the folder root, written by :meth:`SimCSEModel.save_pretrained`), ``1`` Pooling
    (its modes: :func:`st_modes_of`, a list for a concatenation), for ``cls`` with the MLP used at inference
    (``mlp_only_train=False``) a Dense(H, H, Tanh) holding the MLP's weights, then one Dense module per layer of
    the model's dense head, then a Normalize module when the model encodes unit vectors (``pipeline_normalize``,
    a folder read from sentence-transformers with one); folders ``k_Dense`` / ``k_Normalize`` numbered as
    sentence-transformers numbers them, and module folders of an earlier save that this one does not write are
    removed. Without Normalize, like :meth:`SimCSEModel.encode` without ``normalize``, embeddings are not unit
    length. ``config_sentence_transformers.json`` records the model's ``truncate_dim`` when it has one.

    The Pooling config records ``include_prompt`` (False: sentence-transformers leaves the prompt's tokens out
    of the mean, as :meth:`SimCSEModel.encode` does). ``avg_top2`` / ``avg_first_last`` have no Pooling mode; their Pooling config names the pooler as its mode,
    so ``SentenceTransformer(folder)`` stops with ``Invalid pooling mode: 'simcse pooler avg_top2 ...'``
    rather than silently pooling differently (without ``modules.json`` it would fall back to mean pooling).
    Returns False for them.
    """
    from safetensors.torch import save_file

    out = Path(folder)
    hidden = model.encoder.config.hidden_size  # the token states' size the Pooling reads
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": min(max_seq_length, model.max_input_tokens), "do_lower_case": False}, indent=2)
        + "\n")
    from simcse.models.lora import is_lora

    adapter_only = is_lora(model.encoder) and not getattr(model, "_merging_lora", False)
    modes = st_modes_of(model.pooler_type)
    supported = modes is not None and not adapter_only
    mode = (modes[0] if len(modes) == 1 else list(modes)) if modes is not None else (
        f"simcse pooler {model.pooler_type} (not expressible in sentence-transformers; load this folder with "
        "simcse.SimCSE or transformers, see README.md)")
    if adapter_only:  # the base model's own config would load without this run's switches (bidirectional attention)
        mode = ("simcse LoRA adapter folder (sentence-transformers would rebuild the base model without this run's "
                "settings; load it with simcse.SimCSE, or train with --merge_lora true for a folder it loads)")
    pooling_dir = out / "1_Pooling"
    pooling_dir.mkdir(exist_ok=True)
    single = mode if isinstance(mode, str) else None
    pooling_cfg = {
        "word_embedding_dimension": hidden,  # the name every sentence-transformers version reads
        "pooling_mode": mode,
        # the boolean keys of releases before 6 (6.x reads pooling_mode, a list for a concatenation)
        **{key: (single == m if single is not None else m in mode) for key, m in _ST_LEGACY_POOLING_KEYS.items()},
        "include_prompt": bool(getattr(model, "include_prompt", True)),  # False: the prompt's tokens not averaged
    }
    (pooling_dir / "config.json").write_text(json.dumps(pooling_cfg, indent=2) + "\n")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]

    def add(kind: str) -> Path:
        idx = len(modules)
        modules.append({"idx": idx, "name": str(idx), "path": f"{idx}_{kind}", "type": f"sentence_transformers.models.{kind}"})
        return out / f"{idx}_{kind}"

    if mlp_at_inference(model):
        dense_dir = add("Dense")
        dense_dir.mkdir(exist_ok=True)
        dense_cfg = {"in_features": hidden, "out_features": hidden, "bias": True,
                     "activation_function": "torch.nn.modules.activation.Tanh"}
        (dense_dir / "config.json").write_text(json.dumps(dense_cfg, indent=2) + "\n")
        weights = {"linear.weight": model.mlp.dense.weight, "linear.bias": model.mlp.dense.bias}
        save_file({k: v.detach().float().contiguous().cpu() for k, v in weights.items()},
                  str(dense_dir / "model.safetensors"))
    for layer in getattr(model, "dense_head", ()):
        write_dense_module(layer, add("Dense"))
    if getattr(model, "pipeline_normalize", False):
        norm_dir = add("Normalize")
        norm_dir.mkdir(exist_ok=True)
        (norm_dir / "config.json").write_text(json.dumps(
            {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}, indent=2) + "\n")
    written = {m["path"] for m in modules}
    for stale in out.iterdir():  # module folders of an earlier save/export would be loaded (modules.json aside)
        if is_st_module_folder(stale.name) and stale.name not in written and stale.is_dir():
            shutil.rmtree(stale)
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    import transformers

    truncate_dim = getattr(model, "truncate_dim", None)
    (out / "config_sentence_transformers.json").write_text(json.dumps({
        "__version__": {"transformers": transformers.__version__, "pytorch": torch.__version__},
        "prompts": dict(getattr(model, "prompts", {}) or {}),
        "default_prompt_name": getattr(model, "default_prompt_name", None),
        "similarity_fn_name": "cosine",
        **({"truncate_dim": int(truncate_dim)} if truncate_dim else {}),
    }, indent=2) + "\n")
    return supported

ST_FILES = ("sentence_bert_config.json", "modules.json", "config_sentence_transformers.json", "1_Pooling", "2_Dense")
_ST_MODULE_FOLDER = re.compile(r"\d+_(Pooling|Dense|Normalize)")


def is_st_module_folder(name: str) -> bool:
    """Whether a top-level entry ``name`` of a model folder is a sentence-transformers module folder a save
    writes (:data:`ST_FILES`, or ``k_Pooling`` / ``k_Dense`` / ``k_Normalize``)."""
    return name in ST_FILES or _ST_MODULE_FOLDER.fullmatch(name) is not None


# ------------------------------------------------------------------------------------------------ reading
#: sentence-transformers pooling modes (``Pooling.POOLING_MODES``, 6.2) and simcse's pooler for each; several
#: modes concatenated are the poolers joined by "+" (``("cls", "mean")`` -> ``cls_before_pooler+avg``)
ST_MODE_POOLERS = {"mean": "avg", "cls": "cls_before_pooler", "lasttoken": "last_token", "max": "max",
                   "weightedmean": "weighted_avg", "mean_sqrt_len_tokens": "avg_sqrt_len"}
#: the module kinds (the class name in ``modules.json``'s ``type``) a folder without ``simcse_config.json`` may hold,
#: in this order: the encoder, its pooling, any number of Dense layers, optionally unit length
ST_READ_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")


class STPipeline:
    """What a sentence-transformers folder's module pipeline does to a sentence, in simcse's terms.

    Attributes:
        pooler: the simcse pooler of its ``Pooling`` module (:data:`ST_MODE_POOLERS`; several modes joined by
            ``+``), or None when a mode is not one sentence-transformers 6.2 has.
        modes: the Pooling modes as sentence-transformers 6 names them (``("mean",)``, ``("cls", "mean")``).
        pooling_config: ``1_Pooling/config.json`` as a dict; ``pooling_file``: its path.
        dense: its ``Dense`` modules in order, ``(module folder, config checked by
            :func:`simcse.models.dense.check_dense_config`)`` each (weights read by :func:`apply_st_pipeline`).
        normalize: True when a ``Normalize`` module ends the pipeline (unit vectors before any truncation).
        truncate_dim: ``config_sentence_transformers.json``'s ``truncate_dim`` (None: full size).
        prompts, default_prompt_name: its named prompts and the one encoding applies by default.
    """

    def __init__(self, pooler, modes, pooling_config, pooling_file, normalize, truncate_dim, prompts,
                 default_prompt_name, dense=()):
        self.pooler, self.modes = pooler, modes
        self.pooling_config, self.pooling_file = pooling_config, pooling_file
        self.dense = list(dense)
        self.normalize, self.truncate_dim = normalize, truncate_dim
        self.prompts, self.default_prompt_name = prompts, default_prompt_name

    def unsupported_pooling(self, folder) -> str:
        """The one-line reason a folder whose Pooling has no simcse pooler is refused (for the ValueError)."""
        return (f"model folder {str(folder)!r}: its sentence-transformers module {self.pooling_file} pools with "
                f"{'+'.join(map(str, self.modes))}, which simcse cannot encode alike (it reads the modes "
                f"{', '.join(ST_MODE_POOLERS)}, alone or concatenated); load it with "
                "sentence_transformers.SentenceTransformer, or pass a pooler to start from its Transformer weights "
                "on purpose")


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} is not readable JSON ({e}); expected the {what} sentence-transformers writes") from None


def _modules(folder):
    """``(root, modules.json path, its JSON)`` of a local sentence-transformers folder not saved by simcse, else None."""
    root = Path(folder) if isinstance(folder, (str, os.PathLike)) else None
    if root is None or not root.is_dir() or (root / "simcse_config.json").is_file():
        return None
    modules_file = root / "modules.json"
    if not modules_file.is_file():
        return None
    return root, modules_file, _read_json(modules_file, "list of modules")


def read_st_pipeline(folder) -> STPipeline | None:
    """The module pipeline of a local sentence-transformers folder (``modules.json``), read as
    ``SentenceTransformer(folder)`` reads it; the one reader behind every surface that loads such a folder
    (``SimCSE(folder)``, ``simcse evaluate``, training from it, :func:`simcse.models.pooling.recorded_pooler`).

    None for a folder saved by simcse (``simcse_config.json``: its own record wins), a folder without
    ``modules.json``, or anything that is not a local folder.

    Raises:
        ValueError: one line naming the module, when the pipeline holds a module simcse does not apply
            (``LayerNorm``, ``Router``, ``WordWeights``, a second Pooling...: anything but Transformer, Pooling, any
            number of Dense modules and an optional Normalize, in this order), a Dense module whose config simcse
            does not apply (:func:`simcse.models.dense.check_dense_config`: an activation other than
            :data:`simcse.models.dense.ACTIVATIONS`, ``use_residual``...) or whose ``in_features`` is not the size
            before it, or a ``modules.json`` / module config that is not JSON.
    """
    found = _modules(folder)
    if found is None:
        return None
    root, modules_file, modules = found
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{modules_file} is not a list of modules; expected the modules.json sentence-transformers "
                         "writes")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    for i, (kind, module) in enumerate(zip(kinds, modules)):
        if not _in_order(kinds, i):
            where = module.get("path") or "(the folder root)"
            raise ValueError(
                f"model folder {str(folder)!r}: its sentence-transformers module {i} {where} "
                f"({module.get('type')}) is not applied by simcse, which encodes with Transformer, Pooling, Dense "
                "modules and an optional Normalize, in this order (its embeddings would differ from "
                "sentence-transformers'); load it with sentence_transformers.SentenceTransformer")
    if len(kinds) < 2:
        raise ValueError(f"{modules_file} lists no Pooling module after the Transformer; expected the modules "
                         "sentence-transformers writes (Transformer, Pooling[, Dense...][, Normalize])")

    pooling_file = root / str(modules[1].get("path") or "1_Pooling") / "config.json"
    pcfg = _read_json(pooling_file, "Pooling config")
    if not isinstance(pcfg, dict):
        raise ValueError(f"{pooling_file} is not a JSON object; expected the Pooling config sentence-transformers writes")
    modes = st_pooling_modes(pcfg)
    dense = _dense_modules(root, modules, kinds, pcfg, len(modes))
    st_cfg_file = root / "config_sentence_transformers.json"
    st_cfg = _read_json(st_cfg_file, "model config") if st_cfg_file.is_file() else {}
    if not isinstance(st_cfg, dict):
        raise ValueError(f"{st_cfg_file} is not a JSON object; expected the model config sentence-transformers writes")
    truncate_dim = st_cfg.get("truncate_dim")
    if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int)
                                     or truncate_dim < 1):
        raise ValueError(f"{st_cfg_file}: truncate_dim must be a positive integer, got {truncate_dim!r}")
    known = all(isinstance(m, str) and m in ST_MODE_POOLERS for m in modes)
    return STPipeline(pooler="+".join(ST_MODE_POOLERS[m] for m in modes) if known else None, modes=modes,
                      pooling_config=pcfg, pooling_file=str(pooling_file), normalize=kinds[-1] == "Normalize",
                      truncate_dim=truncate_dim, prompts=dict(st_cfg.get("prompts") or {}),
                      default_prompt_name=st_cfg.get("default_prompt_name"), dense=dense)


def _in_order(kinds: list[str], i: int) -> bool:
    """Whether module ``i`` of kinds ``kinds`` fits Transformer, Pooling, Dense*, [Normalize] (:data:`ST_READ_MODULES`)."""
    if i < 2:
        return kinds[i] == ST_READ_MODULES[i]
    return kinds[i] == "Dense" and all(k == "Dense" for k in kinds[2:i]) or (
        kinds[i] == "Normalize" and i == len(kinds) - 1)


def _dense_modules(root: Path, modules: list, kinds: list, pcfg: dict, n_modes: int) -> list[tuple[Path, dict]]:
    """The Dense modules of a pipeline (checked by :func:`_in_order`): ``(folder, checked config)`` each, their sizes
    chained from the Pooling's output (its ``embedding_dimension`` times ``n_modes``) when it records one; also
    checks a Normalize module's config. ValueError (one line) as :func:`read_st_pipeline`."""
    out = []
    width = pcfg.get("embedding_dimension", pcfg.get("word_embedding_dimension"))
    width = width * n_modes if isinstance(width, int) and not isinstance(width, bool) else None
    for module, kind in zip(modules[2:], kinds[2:]):
        sub = root / str(module.get("path") or "")
        cfg_file = sub / "config.json"
        if kind == "Normalize":
            ncfg = _read_json(cfg_file, "Normalize config") if cfg_file.is_file() else {}
            if isinstance(ncfg, dict) and ncfg.get("module_input_name", "sentence_embedding") != "sentence_embedding":
                raise ValueError(f"{cfg_file}: module_input_name {ncfg['module_input_name']!r} (a Normalize not on the "
                                 "sentence embedding) is not applied by simcse; load this model with "
                                 "sentence_transformers.SentenceTransformer")
            continue
        if not module.get("path") or root.resolve() not in sub.resolve().parents or not cfg_file.is_file():
            raise ValueError(f"model folder {str(root)!r}: its Dense module {module.get('path')!r} has no "
                             "config.json inside the folder; expected the files sentence-transformers writes")
        cfg = check_dense_config(_read_json(cfg_file, "Dense config"), str(cfg_file))
        if width is not None and cfg["in_features"] != width:
            raise ValueError(f"{cfg_file}: in_features {cfg['in_features']} but the module before it gives {width}; "
                             "expected the modules sentence-transformers writes")
        width = cfg["out_features"]
        out.append((sub, cfg))
    return out


def st_transformer_folder(folder) -> Path | None:
    """Where a local sentence-transformers folder keeps its Transformer module when ``modules.json`` places it in
    a subfolder (older saves: ``0_Transformer/``), as ``SentenceTransformer(folder)`` reads it; None when the
    module is at the folder's root, for a folder saved by simcse, or anything that is not such a folder.

    Raises:
        ValueError: the module's path is not a folder inside ``folder`` (one line naming the path).
    """
    found = _modules(folder)
    if found is None:
        return None
    root, modules_file, modules = found
    first = modules[0] if isinstance(modules, list) and modules and isinstance(modules[0], dict) else {}
    sub = str(first.get("path") or "")
    if not sub or str(first.get("type", "")).rsplit(".", 1)[-1] != "Transformer":
        return None
    target = (root / sub).resolve()
    if not target.is_dir() or root.resolve() not in target.parents:
        raise ValueError(f"{modules_file}: the Transformer module's path {sub!r} is not a folder inside "
                         f"{str(root)!r}; expected the module's weights, config and tokenizer there")
    return root / sub


def apply_st_pipeline(model, pipeline: STPipeline, folder) -> None:
    """Give ``model`` (a :class:`simcse.SimCSEModel` just loaded from ``folder``) what the folder's pipeline does
    after pooling, so :meth:`SimCSEModel.encode` gives sentence-transformers' embeddings: its ``Dense`` modules
    (the model's dense head, :meth:`SimCSEModel.set_dense_head`, weights read here), its ``Normalize`` module
    (:attr:`pipeline_normalize`), its recorded ``truncate_dim`` and its prompts with the default one.

    Raises:
        ValueError: a Dense module whose weights do not fit its config, or whose ``in_features`` is not the size
            the model's pooler gives (a ``pooler_type`` asked for that pools to another size); a recorded
            ``truncate_dim`` above the embedding size, or a ``default_prompt_name`` that is not one of its prompts
            (each names its file).
        FileNotFoundError: a Dense module without weights.
    """
    from simcse.models.truncation import check_truncate_dim

    if pipeline.dense:
        layers = [load_dense_layer(cfg, read_dense_weights(sub), str(sub)) for sub, cfg in pipeline.dense]
        try:
            model.set_dense_head(layers)
        except ValueError as e:
            raise ValueError(f"model folder {str(folder)!r}: {e}") from None
    where = f"{Path(folder) / 'config_sentence_transformers.json'}: truncate_dim"
    model.truncate_dim = check_truncate_dim(pipeline.truncate_dim, model.hidden_size, where)
    model.pipeline_normalize = pipeline.normalize
    if pipeline.prompts or pipeline.default_prompt_name is not None:
        try:
            model.set_prompts(pipeline.prompts, pipeline.default_prompt_name)
        except ValueError as e:
            raise ValueError(f"{Path(folder) / 'config_sentence_transformers.json'}: {e}") from None
