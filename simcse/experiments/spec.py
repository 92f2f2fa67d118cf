"""An experiment spec: arms x seeds, each (arm, seed) one run, and how the runs are scored.

A spec is a JSON object (``configs/experiments/*.json``, or any file)::

    {
      "base": "unsup_cpu_minilm",                 # a packaged config name or a config file: every arm starts here
      "options": {"max_steps": 150},              # simcse train options for every arm (over the base)
      "seeds": [42, 1, 2],
      "arms": {
        "simcse": {},                             # simcse train options over base + options ({} = the base itself)
        "p0.0": {"config": "ablations/table3_p0.0", "_label": "p = 0.0"},   # another config as this arm's base
        "start": {"kind": "untrained"}            # the starting model, scored without training
      },
      "baseline": "simcse",
      "evaluation": {"tasks": ["STSBenchmark", "SICKRelatedness"], "split": "test", "bootstrap": 1000}
    }

Keys starting with ``_`` are comments (``_comment``) or, in an arm, metadata shown by the report (``_label``, and
``_paper``: the paper's number, also read from a config's ``_paper_stsb_dev``). An option set to ``null`` removes
it (e.g. ``"global_batch_size": null`` drops the base's global batch). The runner owns ``output_dir``, ``seed``,
``save_on_signal`` and ``resume_from_checkpoint``; an arm that sets one is refused.

An arm's ``grid`` (option -> values; with ``sample``: N seeded random draws) makes each point an arm of its own,
``<arm>@<option>=<value>,...`` (:mod:`simcse.experiments.grids`); a spec's ``selection`` (``metric``, ``seeds``,
``test_seeds``) chooses each arm's point on dev and tests it on fresh seeds (:mod:`simcse.experiments.selection`).

Arm kinds: ``simcse`` (default; one ``simcse train`` process), ``untrained`` (the base's model and pooler,
scored as it is: the starting point of a gain) and ``sentence_transformers`` (sentence-transformers' own trainer
and loss on the arm's options, :mod:`simcse.experiments.st_train`; no base, no config). An arm's ``_versus``
names the arm it is compared with instead of the baseline (e.g. ours against sentence-transformers' on the same
data).

:func:`load_spec` checks everything it can before any run: the keys, the seeds (integers, no duplicate), the
baseline (an arm), each arm's options against the ``simcse train`` parser (an unknown option named with its arm),
and their values through the same argument dataclasses ``simcse train`` builds. Each error is one
:class:`SpecError` line naming the spec file and the field.

Why one module: a spec's shape, the checks of the whole spec before any run (keys, seeds, arms, the report's
metadata, every arm's options) and what one of its runs is (its identity and scoring) all read the same fields;
split, each part would restate the others' field names and rules.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from simcse.experiments.grids import GridError, expand_grids
from simcse.files.checks import MAX_SEED, check_int, check_seed, unique_keys
from simcse.files.storage import write_text_atomic

KINDS = ("simcse", "untrained", "sentence_transformers")
RUNNER_OPTIONS = ("output_dir", "seed", "save_on_signal", "resume_from_checkpoint", "overwrite_output_dir")
SPEC_KEYS = {"base", "options", "seeds", "arms", "baseline", "evaluation", "name", "description", "selection"}
# signals a run saves a checkpoint on: TERM (kill, Slurm's preemption), USR1 (the runner's own request) and USR2
# (submitit's and Slurm's warning before a time limit)
SAVE_SIGNALS = "TERM,USR1,USR2"
# a grid point's name adds "@<option>=<value>,..." (simcse.experiments.grids)
ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*(@[A-Za-z0-9_.+\-=,]+)?")


class SpecError(ValueError):
    """A spec that cannot be run: one line naming the spec file, the field and what was expected."""


# the evaluation fields that change a run's scores (a change rescores its saved model) and those that change only
# the report (nothing is run again); no evaluation field retrains a run
SCORING_FIELDS = ("tasks", "split", "alignment", "batch_size", "max_length")
REPORT_FIELDS = ("bootstrap", "bootstrap_seed")
MIN_RESAMPLES = 2  # a bootstrap interval needs at least two resamples (evaluation.bootstrap, report --resamples)


@dataclass
class Evaluation:
    """How each run's final model is scored (per-pair cosine similarities are kept for the report's resampling).

    Attributes:
        tasks: STS task names of :func:`simcse.evaluation.engine.sts_scores` (default STS-B and SICK-R).
        split: ``test`` or ``dev`` (STS-B and SICK-R have both; STS12-16 only test).
        bootstrap: resamples of the report's intervals (>= 2; 1000 is usual).
        bootstrap_seed: the resampling generator's seed.
        alignment: also measure l_align / l_uniform on STS-B pairs of ``split`` (the paper's Figure 2/3 axes).
        batch_size: sentences per encoder call when scoring.
        max_length: token cap when scoring (None: the model's own).
    """

    tasks: list = field(default_factory=lambda: ["STSBenchmark", "SICKRelatedness"])
    split: str = "test"
    bootstrap: int = 1000
    bootstrap_seed: int = 1111
    alignment: bool = False
    batch_size: int = 128
    max_length: int | None = None

    def __post_init__(self):
        from simcse.evaluation.engine import STS_TASKS

        if not isinstance(self.tasks, list) or not self.tasks:
            raise ValueError(f"evaluation.tasks must be a non-empty list of STS task names, got {self.tasks!r}")
        unknown = [t for t in self.tasks if t not in STS_TASKS]
        if unknown:
            raise ValueError(f"evaluation.tasks: {unknown} are not STS tasks; expected names from {list(STS_TASKS)}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"evaluation.tasks lists a task twice: {self.tasks}")
        if self.split not in ("test", "dev"):
            raise ValueError(f"evaluation.split must be 'test' or 'dev', got {self.split!r}")
        if self.split == "dev" and any(t not in ("STSBenchmark", "SICKRelatedness") for t in self.tasks):
            raise ValueError("evaluation.split 'dev' exists for STSBenchmark and SICKRelatedness only, "
                             f"not for {[t for t in self.tasks if t not in ('STSBenchmark', 'SICKRelatedness')]}")
        check_int(self.bootstrap, "evaluation.bootstrap", MIN_RESAMPLES)
        for name, least in (("bootstrap_seed", 0), ("batch_size", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < least:
                raise ValueError(f"evaluation.{name} must be an integer >= {least}, got {v!r}")
        if not isinstance(self.alignment, bool):
            raise ValueError(f"evaluation.alignment must be true or false, got {self.alignment!r}")
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length < 1):
            raise ValueError(f"evaluation.max_length must be a positive integer or null, got {self.max_length!r}")


@dataclass
class Arm:
    """One arm: ``kind`` (:data:`KINDS`), the config it starts from (None: the spec's base), its own options
    (option name -> JSON value; None removes the option) and its ``_`` metadata."""

    name: str
    kind: str = "simcse"
    config: str | None = None
    options: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


@dataclass
class Run:
    """One (arm, seed): what it runs and where.

    Attributes:
        arm, seed, kind: as the spec says.
        key: ``"<arm>/seed<seed>"``, also the run's folder under ``<output_dir>/runs``.
        options: the resolved options (config, then spec options, then arm options, then the seed), JSON values;
            for a ``simcse`` run exactly the config file the run trains with (without ``output_dir``).
        evaluation: the spec's :class:`Evaluation` as a dict.
        digest: 12 hex digits of SHA-256 over kind and options: the run's identity, what trains it (a change
            there is another run). score_digest: the same over the evaluation fields that change the scores
            (:data:`SCORING_FIELDS`: a change there rescores the trained model); the rest of the evaluation
            (:data:`REPORT_FIELDS`) changes only the report.
        meta: the arm's ``_`` metadata (label, paper number).
    """

    arm: str
    seed: int
    kind: str
    options: dict
    evaluation: dict
    meta: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    def identity(self) -> dict:
        """What the digest covers, what trains the run: ``{"kind", "options"}``."""
        return {"kind": self.kind, "options": self.options}

    @property
    def digest(self) -> str:
        return run_digest(self.identity())

    def scoring(self) -> dict:
        """What the score digest covers: the evaluation fields of :data:`SCORING_FIELDS`."""
        return {k: self.evaluation.get(k) for k in SCORING_FIELDS}

    @property
    def score_digest(self) -> str:
        return run_digest(self.scoring())

    @property
    def former_digest(self) -> str:
        """The digest earlier versions recorded, over kind, options and the whole evaluation: a record carrying it
        was trained as this run and scored with this evaluation."""
        return run_digest({"kind": self.kind, "options": self.options, "evaluation": self.evaluation})


def run_digest(identity: dict) -> str:
    """12 hex digits of SHA-256 over ``identity`` as sorted, compact JSON."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class Spec:
    """A loaded, checked spec (see the module). ``path``: where it was read from (messages name it)."""

    base: str
    seeds: list
    arms: dict
    baseline: str
    evaluation: Evaluation
    options: dict = field(default_factory=dict)
    name: str = "experiment"
    description: str = ""
    path: str = "<spec>"
    raw: dict = field(default_factory=dict)
    # the checked "selection" (simcse.experiments.grids.expand_grids): arms are then the methods' grid points
    # and seeds the selection seeds; None: an ordinary spec
    selection: dict | None = None

    def runs(self) -> list[Run]:
        """Every (arm, seed) run, arms in spec order, seeds in spec order within each arm."""
        evaluation = dataclasses.asdict(self.evaluation)
        return [Run(arm.name, seed, arm.kind, resolve_options(self, arm, seed), evaluation, arm_meta(self, arm))
                for arm in self.arms.values() for seed in self.seeds]


def spec_dir() -> Path | None:
    """The folder of the packaged specs (``configs/experiments`` in a checkout, ``simcse/configs/experiments``
    in a wheel), or None when configs are not shipped."""
    from simcse.training.recipes import config_dir

    d = config_dir()
    return d / "experiments" if d is not None else None


def list_specs() -> list[str]:
    """The packaged spec names (file stems), sorted."""
    d = spec_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d is not None and d.is_dir() else []


def resolve_spec(name_or_path: str | Path) -> Path:
    """An existing spec file: ``name_or_path`` itself, else the packaged spec of that name.

    Raises:
        SpecError: neither exists (the message lists the packaged specs).
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    d = spec_dir()
    if d is not None and (d / f"{name_or_path}.json").is_file():
        return d / f"{name_or_path}.json"
    raise SpecError(f"spec {str(name_or_path)!r}: no such file and no packaged spec of that name "
                    f"(packaged: {', '.join(list_specs()) or 'none'})")


def _config_path(spec_path: str, what: str, name: str) -> Path:
    from simcse.training.recipes import resolve_config

    try:
        return resolve_config(name)
    except (FileNotFoundError, ValueError) as e:
        raise SpecError(f"spec {spec_path}: {what} {name!r} is not a config name or file ({e})") from None


def _config(spec: Spec, arm: Arm) -> dict:
    from simcse.training.config import ConfigError, load_config

    what, name = ("arm " + repr(arm.name) + " config", arm.config) if arm.config else ("base", spec.base)
    try:
        return load_config(_config_path(spec.path, what, name))
    except ConfigError as e:
        raise SpecError(f"spec {spec.path}: {what}: {e}") from None


def arm_meta(spec: Spec, arm: Arm) -> dict:
    """The arm's metadata for the report: ``label`` (default the arm name), ``paper`` (the arm's ``_paper``,
    else its config's ``_paper_stsb_dev``, else None) and ``versus`` (the arm's ``_versus``: the arm it is compared
    with instead of the baseline, else None)."""
    cfg = _config(spec, arm) if arm.kind != "sentence_transformers" else {}
    for key, (types, expected) in CONFIG_META_TYPES.items():
        if key in cfg and not _of_type(cfg[key], types):
            raise SpecError(f"spec {spec.path}: arm {arm.name!r}: its config's {key} must be {expected}, "
                            f"got {cfg[key]!r}")
    paper = arm.meta.get("_paper", cfg.get("_paper_stsb_dev"))
    return {"label": arm.meta.get("_label", cfg.get("_row", arm.name)), "paper": paper,
            "versus": arm.meta.get("_versus")}


def resolve_options(spec: Spec, arm: Arm, seed: int) -> dict:
    """The options one run trains with (JSON values, comments dropped): for ``simcse`` and ``untrained`` arms the
    config's options, the spec's ``options``, the arm's options (a given ``train_file``/``dataset_name`` replaces
    the config's whole data source, as on the ``simcse train`` command line), ``null`` values removed, then
    ``seed``; for a ``sentence_transformers`` arm its own options and ``seed``."""
    if arm.kind == "sentence_transformers":
        out = {k: v for k, v in arm.options.items() if v is not None}
        out["seed"] = seed
        return out
    from simcse.training.parser import DATA_SOURCE_KEYS, OWN_SOURCE_KEYS

    cfg = {k: v for k, v in _config(spec, arm).items() if not k.startswith("_")}
    over = {**spec.options, **arm.options}
    if any(k in over for k in OWN_SOURCE_KEYS):
        cfg = {k: v for k, v in cfg.items() if k not in DATA_SOURCE_KEYS}
    merged = {**cfg, **over}
    out = {k: v for k, v in merged.items() if v is not None and k not in ("output_dir", "seed")}
    out["seed"] = seed
    return out


# the arm metadata the report reads, with the type it needs: checked before any run, so no report dies on one
META_TYPES = {"_label": ((str,), "a string"), "_paper": ((int, float), "a number (the paper's score x 100) or null"),
              "_versus": ((str,), "another arm's name")}
# the same for a config's metadata that an arm's report row shows
CONFIG_META_TYPES = {"_row": ((str,), "a string"), "_paper_stsb_dev": ((int, float), "a number or null")}


def _of_type(value, types) -> bool:
    return value is None or (isinstance(value, types) and not isinstance(value, bool))


def _arm(spec_path: str, name, value) -> Arm:
    if not isinstance(name, str) or not ARM_NAME.fullmatch(name):
        raise SpecError(f"spec {spec_path}: arm name {name!r} must be letters, digits, '_', '.' or '-' (a folder name)")
    if not isinstance(value, dict):
        raise SpecError(f"spec {spec_path}: arm {name!r} must be an object of options, got {type(value).__name__}")
    value = dict(value)
    kind = value.pop("kind", "simcse")
    if kind not in KINDS:
        raise SpecError(f"spec {spec_path}: arm {name!r}: kind {kind!r} is not one of {list(KINDS)}")
    config = value.pop("config", None)
    if config is not None and (not isinstance(config, str) or kind == "sentence_transformers"):
        raise SpecError(f"spec {spec_path}: arm {name!r}: 'config' must be a config name or file"
                        + (" (a sentence_transformers arm has none)" if kind == "sentence_transformers" else ""))
    meta = {k: v for k, v in value.items() if k.startswith("_")}
    for key, (types, expected) in META_TYPES.items():
        if key in meta and not _of_type(meta[key], types):
            raise SpecError(f"spec {spec_path}: arm {name!r}: {key} must be {expected}, got {meta[key]!r}")
    options = {k: v for k, v in value.items() if not k.startswith("_")}
    owned = [k for k in options if k in RUNNER_OPTIONS]
    if owned:
        raise SpecError(f"spec {spec_path}: arm {name!r} sets {owned[0]!r}, which the runner sets itself "
                        f"(each run's folder and seed come from the spec's seeds); remove it")
    return Arm(name, kind, config, options, meta)


def parse_spec(raw: dict, path: str = "<spec>") -> Spec:
    """Check the shape of ``raw`` (a spec's JSON object) and build a :class:`Spec`; no option is validated yet
    (:func:`check_options`).

    Raises:
        SpecError: an unknown key, missing ``base``/``seeds``/``arms``/``baseline``, seeds that are not distinct
            integers, a baseline that is not an arm, a bad arm or evaluation field (one line each).
    """
    if not isinstance(raw, dict):
        raise SpecError(f"spec {path} must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(k for k in raw if k not in SPEC_KEYS and not k.startswith("_"))
    if unknown:
        raise SpecError(f"spec {path}: unknown key {unknown[0]!r}; expected {sorted(SPEC_KEYS)} (or '_' comments)")
    original = raw
    try:  # grids and random searches become arms of their own; a selection's seeds become the spec's
        raw, selection = expand_grids(raw, RUNNER_OPTIONS)
    except GridError as e:
        raise SpecError(f"spec {path}: {e}") from None
    for key in ("seeds", "arms", "baseline"):
        if key not in raw:
            raise SpecError(f"spec {path}: missing {key!r}")
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds:
        raise SpecError(f"spec {path}: 'seeds' must be a non-empty list of integers in [0, {MAX_SEED}], got {seeds!r}")
    for seed in seeds:
        try:
            check_seed(seed, "each of 'seeds'")
        except ValueError as e:
            raise SpecError(f"spec {path}: {e}") from None
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise SpecError(f"spec {path}: seed {dup[0]} is listed {seeds.count(dup[0])} times in 'seeds' {seeds}; "
                        "each seed once")
    if not isinstance(raw["arms"], dict) or not raw["arms"]:
        raise SpecError(f"spec {path}: 'arms' must be a non-empty object of arm name -> options")
    arms = {name: _arm(path, name, value) for name, value in raw["arms"].items()}
    if raw["baseline"] not in arms:
        raise SpecError(f"spec {path}: baseline {raw['baseline']!r} is not an arm; expected one of {list(arms)}")
    for arm in arms.values():
        other = arm.meta.get("_versus")
        if other is not None and (other not in arms or other == arm.name):
            raise SpecError(f"spec {path}: arm {arm.name!r}: _versus {other!r} is not another arm; expected one of "
                            f"{[a for a in arms if a != arm.name]}")
    needs_base = [a.name for a in arms.values() if a.kind != "sentence_transformers" and a.config is None]
    base = raw.get("base")
    if needs_base and not isinstance(base, str):
        raise SpecError(f"spec {path}: missing 'base' (a config name or file), which arm {needs_base[0]!r} starts from")
    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise SpecError(f"spec {path}: 'options' must be an object of simcse train options, got {options!r}")
    owned = [k for k in options if k in RUNNER_OPTIONS]
    if owned:
        raise SpecError(f"spec {path}: 'options' sets {owned[0]!r}, which the runner sets itself; remove it")
    ev = raw.get("evaluation", {})
    if not isinstance(ev, dict):
        raise SpecError(f"spec {path}: 'evaluation' must be an object, got {ev!r}")
    known = {f.name for f in dataclasses.fields(Evaluation)}
    bad = sorted(k for k in ev if k not in known)
    if bad:
        raise SpecError(f"spec {path}: unknown evaluation field {bad[0]!r}; expected {sorted(known)}")
    try:
        evaluation = Evaluation(**ev)
    except ValueError as e:
        raise SpecError(f"spec {path}: {e}") from None
    return Spec(base=base or "", seeds=list(seeds), arms=arms, baseline=raw["baseline"], evaluation=evaluation,
                options=dict(options), name=raw.get("name", Path(path).stem), description=raw.get("description", ""),
                path=path, raw=original, selection=selection)


def check_distinct_arms(spec: Spec) -> None:
    """Refuse two arms that resolve to the same run (kind and options): each seed would train it twice and the
    report would show their difference as exactly 0, which reads as "no effect".

    Raises:
        SpecError: one line naming both arms.
    """
    seen: dict = {}
    for arm in spec.arms.values():
        what = json.dumps([arm.kind, resolve_options(spec, arm, spec.seeds[0])], sort_keys=True, default=str)
        if what in seen:
            raise SpecError(f"spec {spec.path}: arms {seen[what]!r} and {arm.name!r} resolve to the same options "
                            "(an arm repeats the base's values), so they would train the same runs twice; make "
                            "them differ or drop one")
        seen[what] = arm.name


def check_options(spec: Spec) -> None:
    """Validate every arm's resolved options as its run will parse them: ``simcse``/``untrained`` arms through
    :func:`simcse.training.parser.arguments_from` (the dataclasses of ``simcse train``) and every check ``simcse
    train`` makes before it loads a model (:func:`simcse.training.build.check_setup`: the objective's
    hyperparameters and declarations, such as the poolers it needs), ``sentence_transformers``
    arms through :func:`simcse.experiments.st_train.check_options`. Builds no model and reads no data.

    Raises:
        SpecError: ``spec <file>: arm <name>: <the option's problem>``; an unknown option is named.
    """
    import tempfile

    from simcse.training.build import SetupError, check_setup
    from simcse.training.compat import legacy_config_options
    from simcse.training.parser import _types, arguments_from

    fields = {f.name for cls in _types() for f in dataclasses.fields(cls) if f.init}
    seed = spec.seeds[0]
    shared = [k for k in legacy_config_options(dict(spec.options)) if k not in fields]
    if shared:
        raise SpecError(f"spec {spec.path}: 'options' has {shared[0]!r}, which is not an option of simcse train "
                        "(see simcse train --help)")
    check_distinct_arms(spec)
    with tempfile.TemporaryDirectory(prefix="simcse_spec_") as tmp:
        for arm in spec.arms.values():
            if arm.kind == "sentence_transformers":
                from simcse.experiments.st_train import check_options as check_st

                try:
                    check_st(resolve_options(spec, arm, seed))
                except ValueError as e:
                    raise SpecError(f"spec {spec.path}: arm {arm.name!r}: {e}") from None
                continue
            unknown = [k for k in legacy_config_options(dict(arm.options)) if k not in fields]
            if unknown:
                raise SpecError(f"spec {spec.path}: arm {arm.name!r}: {unknown[0]!r} is not an option of simcse "
                                "train (see simcse train --help)")
            cfg = Path(tmp) / f"{arm.name}.json"
            cfg.write_text(json.dumps(resolve_options(spec, arm, seed)), encoding="utf-8")
            try:
                check_setup(*arguments_from({"output_dir": str(Path(tmp) / "out")}, str(cfg)))
            except (SetupError, ValueError) as e:
                message = str(e).replace(f"config file {str(cfg)!r}: ", "")
                raise SpecError(f"spec {spec.path}: arm {arm.name!r}: {message}") from None


# Files known to be unfit for a run's data need: the wiki1m sample is 10^6 unrelated sentences, not running text.
SHUFFLED_CORPORA = ("wiki1m_for_simcse.txt",)
CONSECUTIVE_SOURCE = ("a .txt of running text, one sentence per line in reading order, a blank line between "
                      "documents (e.g. a Wikipedia dump through wikiextractor and a sentence splitter)")
NEUTRAL_SOURCE = ("an NLI CSV sent0,sent1,hard_neg,neutral built from SNLI+MNLI (premise; entailment, "
                  "contradiction and neutral hypotheses)")


def data_problem(options: dict) -> str | None:
    """Why a run's training file cannot serve its options, in one line, or None when it can (or is not checked).

    Next-sentence positives (``positives``/``objective`` other than ``simcse``, the paper's Table 2) need
    consecutive sentences: the shuffled wiki1m sample is refused by name; ``neutral_as_negative`` (Table 7) needs
    a ``neutral`` column. Only the file name and the CSV header are read.
    """
    from simcse.files.inputs import open_bytes
    from simcse.training.data import NEUTRAL_COLUMN

    if not options.get("train_file"):
        return None
    path = Path(str(options["train_file"]))
    positives = options.get("positives", options.get("objective", "simcse"))
    if positives != "simcse" and path.name in SHUFFLED_CORPORA:
        return (f"{positives} needs consecutive sentences, but train_file {str(path)!r} is a sample of unrelated "
                f"sentences; give train_file {CONSECUTIVE_SOURCE}")
    if options.get("neutral_as_negative"):
        try:
            with open_bytes(path) as f:
                header = f.readline().decode("utf-8", "replace").strip()
        except OSError as e:
            return f"cannot read its train_file {str(path)!r}: {e.strerror or e}"
        columns = [c.strip().strip('"') for c in header.split("\t" if path.name.endswith(".tsv") else ",")]
        if NEUTRAL_COLUMN not in columns:
            return (f"neutral_as_negative needs a {NEUTRAL_COLUMN!r} column, but train_file {str(path)!r} has "
                    f"columns {columns}; give train_file {NEUTRAL_SOURCE}")
    return None


def check_data(spec: Spec, runs: list[Run]) -> None:
    """Refuse, before any run starts, a run whose training file cannot serve it (:func:`data_problem`).

    Raises:
        SpecError: ``spec <file>: arm <name>: <the problem>``, the first such arm.
    """
    for run in runs:
        problem = data_problem(run.options) if run.kind == "simcse" else None
        if problem:
            raise SpecError(f"spec {spec.path}: arm {run.arm!r}: {problem}")


def load_spec(name_or_path: str | Path, check: bool = True) -> Spec:
    """Read, parse and (``check``) validate a spec file or packaged spec name.

    Raises:
        SpecError: as :func:`resolve_spec`, :func:`parse_spec` and :func:`check_options`; invalid JSON.
    """
    path = resolve_spec(name_or_path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
    except (OSError, ValueError) as e:  # not JSON, not UTF-8, or a key given twice
        raise SpecError(f"spec {str(path)}: cannot be read as JSON: {e}") from None
    spec = parse_spec(raw, str(path))
    if check:
        check_options(spec)
    return spec


def first_difference(old: dict, new: dict, prefix: str = "") -> str | None:
    """The first field where two run identities differ, as ``"options.learning_rate: 3e-05 -> 5e-05"``; None when
    they are equal."""
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, "<unset>"), new.get(key, "<unset>")
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            return first_difference(a, b, f"{prefix}{key}.")
        return f"{prefix}{key}: {json.dumps(a)} -> {json.dumps(b)}"
    return None


def write_json_atomic(path: str | Path, data) -> None:
    """``data`` as indented JSON in ``path``, whole or not at all (:func:`simcse.files.storage.write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
