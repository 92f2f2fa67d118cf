"""The paper's training configs, shipped with the package and selectable by name.

``simcse train --config unsup_bert_base`` reads ``configs/unsup_bert_base.json``: from the installed package
(the wheel puts the checkout's ``configs/`` folder at ``simcse/configs/``) or, when running from a checkout,
from its top-level ``configs/``. A path to a JSON file works as well and wins over a name.
"""
from __future__ import annotations

from pathlib import Path


def config_dir() -> Path | None:
    """The folder of packaged configs: ``simcse/configs`` in an installed wheel, else the checkout's ``configs``."""
    package = Path(__file__).resolve().parent.parent  # simcse/
    for d in (package / "configs", package.parent / "configs"):
        if (d / "unsup_bert_base.json").is_file():
            return d
    return None


# folders of configs/ that hold no run configs: engine files (--deepspeed FILE), experiment specs (simcse experiment)
ENGINE_CONFIG_DIRS = ("deepspeed", "experiments")


def list_configs() -> list[str]:
    """Names of the packaged run configs, e.g. ``['ablations/table1_crop10', ..., 'unsup_bert_base']`` (the
    DeepSpeed files of ``configs/deepspeed/`` are passed to ``--deepspeed``, not to ``--config``)."""
    d = config_dir()
    if d is None:
        return []
    names = (p.relative_to(d).with_suffix("").as_posix() for p in d.rglob("*.json"))
    return sorted(n for n in names if n.split("/")[0] not in ENGINE_CONFIG_DIRS)


def resolve_config(name_or_path: str) -> Path:
    """The JSON file meant by ``name_or_path``.

    Tried in order: an existing file at that path; a packaged config of that name, with or without
    ``.json`` and a leading ``configs/`` (so ``configs/sup_bert_base.json`` also works outside a checkout).

    Raises:
        FileNotFoundError: neither exists; the message lists the packaged names.
    """
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    name = name_or_path.replace("\\", "/")
    name = name[len("configs/"):] if name.startswith("configs/") else name
    name = name[: -len(".json")] if name.endswith(".json") else name
    d = config_dir()
    if d is not None and (d / f"{name}.json").is_file():
        return d / f"{name}.json"
    top = [n for n in list_configs() if "/" not in n]
    raise FileNotFoundError(f"cannot read config file {name_or_path!r}: no such file, and not a packaged config; "
                            f"packaged configs: {', '.join(top)} and ablations/<name> (see 'simcse train --list_configs')")
