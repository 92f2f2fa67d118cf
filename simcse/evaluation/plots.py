"""The paper's analysis figures, written as PNG files with matplotlib.

* :func:`plot_align_uniform`: alignment vs uniformity of several models, coloured by STS average (Figure 3).
* :func:`plot_training_curve`: alignment/uniformity over training steps from a metrics log (Figure 2).
* :func:`plot_singular_spectra`: normalised singular values of several models (Appendix F, Figure F.1).
* :func:`plot_loss_curve`: a training-loss curve (the MLM pretraining of :mod:`simcse.research.pretrain`).
* :func:`plot_cosine_bins`: cosine-similarity densities of STS-B pairs per gold-score group (Appendix G,
  Figure G.1).

matplotlib is imported inside each function (``pip install simcse[plots]``) and used through its
object-oriented API with the Agg canvas: no pyplot, no global backend switch, no window, nothing at import.
Each function returns the path it wrote and raises ``ValueError`` naming the bad argument.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

_DPI = 150
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")


def _figure(width: float, height: float):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'simcse[plots]' (or pip install matplotlib)") from e
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _out_path(out: str | os.PathLike) -> Path:
    path = Path(out)
    if path.suffix.lower() != ".png":
        raise ValueError(f"out must be a .png path, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=_DPI)
    return path


def _finite_list(values, name: str, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} values; expected {n} (one per model)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has a NaN or infinite value at position {int(np.flatnonzero(~np.isfinite(arr))[0])}")
    return arr


def plot_align_uniform(
    names: Sequence[str],
    align: Sequence[float],
    uniform: Sequence[float],
    out: str | os.PathLike,
    sts: Sequence[float] | None = None,
    title: str | None = None,
    sts_label: str = "STS",
    legend: bool = False,
) -> Path:
    """Scatter of models in the (uniformity, alignment) plane (SimCSE Section 5, Figure 3).

    x = l_uniform, y = l_align (both lower is better, so the best models sit bottom-left). With ``sts``
    each point is coloured by it and labelled ``name (sts)``, as the paper colours by average STS.

    Args:
        names: M model labels.
        align, uniform: M floats each (see :func:`simcse.evaluation.analysis.alignment` / ``uniformity``).
        out: .png path (parent folders are created).
        sts: optional M floats (e.g. average Spearman x 100).
        title: optional figure title.
        sts_label: the colour bar's label (say which STS number colours the points).
        legend: give each model its own marker and its label in a legend below the axes instead of beside the
            point (for many models close together, whose labels would overlap).

    Raises:
        ValueError: no model, mismatched lengths, NaN/inf, or a non-.png ``out``.
    """
    path = _out_path(out)
    names = [str(n) for n in names]
    if not names:
        raise ValueError("names is empty: nothing to plot")
    a = _finite_list(align, "align", len(names))
    u = _finite_list(uniform, "uniform", len(names))
    s = None if sts is None else _finite_list(sts, "sts", len(names))
    labels = [name if s is None else f"{name} ({s[i]:.1f})" for i, name in enumerate(names)]
    fig = _figure(5.5, 4.5 + (0.2 * math.ceil(len(names) / 2) if legend else 0.0))
    ax = fig.add_subplot()
    colour = {"color": "tab:blue"} if s is None else {"c": s, "cmap": "viridis",
                                                      "vmin": float(s.min()), "vmax": float(s.max())}
    if legend:
        for i, label in enumerate(labels):
            one = colour if s is None else {**colour, "c": s[i:i + 1]}
            pts = ax.scatter(u[i:i + 1], a[i:i + 1], s=70, marker=_MARKERS[i % len(_MARKERS)], edgecolor="black",
                             zorder=3, label=label, **one)
        fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    else:
        pts = ax.scatter(u, a, s=60 if s is None else 70, edgecolor="black", zorder=3, **colour)
    if s is not None:
        fig.colorbar(pts, ax=ax, label=sts_label)
    ax.margins(x=0.12, y=0.12)
    mid = (u.min() + u.max()) / 2.0
    for i, label in enumerate([] if legend else labels):
        right_half = len(names) > 1 and u[i] > mid  # label towards the centre so it stays inside the axes
        ax.annotate(label, (u[i], a[i]), textcoords="offset points", xytext=(-6 if right_half else 6, 6),
                    ha="right" if right_half else "left", fontsize=8, annotation_clip=False)
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return _save(fig, path)


def plot_training_curve(
    runs: Mapping[str, Sequence[Mapping[str, float]]] | Sequence[Mapping[str, float]],
    out: str | os.PathLike,
    title: str | None = None,
) -> Path:
    """Alignment/uniformity during training (SimCSE Section 3, Figure 2).

    Left panel: each run's trajectory in the (l_uniform, l_align) plane with arrows in the training
    direction, as Figure 2. Right panels: l_align and l_uniform against the training step.

    Args:
        runs: ``{label: records}`` or one list of records; a record is a mapping with ``step``, ``align``
            and ``uniform`` (the lines of :class:`simcse.training.callbacks.AlignUniformCallback`'s JSONL log).
            Records are sorted by step.
        out: .png path.

    Raises:
        ValueError: no run, an empty run, a record missing a key or with a NaN/inf value.
    """
    path = _out_path(out)
    if not isinstance(runs, Mapping):
        runs = {"run": runs}
    if not runs:
        raise ValueError("runs is empty: nothing to plot")
    series = {}
    for label, records in runs.items():
        records = list(records)
        if not records:
            raise ValueError(f"run {label!r} has no records")
        for i, r in enumerate(records):
            missing = {"step", "align", "uniform"} - set(r)
            if missing:
                raise ValueError(f"run {label!r} record {i} lacks {sorted(missing)}")
        records.sort(key=lambda r: r["step"])
        steps = _finite_list([r["step"] for r in records], f"run {label!r} step")
        a = _finite_list([r["align"] for r in records], f"run {label!r} align")
        u = _finite_list([r["uniform"] for r in records], f"run {label!r} uniform")
        series[str(label)] = (steps, a, u)
    fig = _figure(10, 4.2)
    grid = fig.add_gridspec(2, 2, width_ratios=(1.2, 1))
    ax = fig.add_subplot(grid[:, 0])
    ax_a = fig.add_subplot(grid[0, 1])
    ax_u = fig.add_subplot(grid[1, 1], sharex=ax_a)
    for k, (label, (steps, a, u)) in enumerate(series.items()):
        color = f"C{k % 10}"
        ax.plot(u, a, "-o", color=color, ms=3, lw=1, label=label)
        for i in range(len(u) - 1):
            if (u[i + 1], a[i + 1]) != (u[i], a[i]):
                ax.annotate("", xy=(u[i + 1], a[i + 1]), xytext=(u[i], a[i]),
                            arrowprops=dict(arrowstyle="->", color=color, lw=1))
        ax.plot(u[:1], a[:1], marker="s", color=color, ms=6)  # the starting checkpoint
        ax_a.plot(steps, a, "-o", color=color, ms=3, lw=1, label=label)
        ax_u.plot(steps, u, "-o", color=color, ms=3, lw=1, label=label)
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax_a.set_ylabel(r"$\ell_{align}$")
    ax_u.set_ylabel(r"$\ell_{uniform}$")
    ax_u.set_xlabel("training step")
    for axis in (ax_a, ax_u):
        axis.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_singular_spectra(
    spectra: Mapping[str, Sequence[float]],
    out: str | os.PathLike,
    log_scale: bool = False,
    title: str | None = None,
) -> Path:
    """Singular values of several models' embedding matrices, largest first (SimCSE Appendix F, Figure F.1).

    Args:
        spectra: ``{label: singular values (K,)}``, e.g. from :func:`simcse.evaluation.analysis.singular_spectrum`
            (normalised so the largest is 1, as the paper). Lengths may differ between models.
        out: .png path.
        log_scale: log y axis (useful when the spectrum drops steeply).

    Raises:
        ValueError: no model, an empty or non-finite spectrum, or non-positive values with ``log_scale``.
    """
    path = _out_path(out)
    if not spectra:
        raise ValueError("spectra is empty: nothing to plot")
    fig = _figure(5.5, 4.2)
    ax = fig.add_subplot()
    for k, (label, values) in enumerate(spectra.items()):
        s = _finite_list(values, f"spectra[{label!r}]")
        if s.size == 0:
            raise ValueError(f"spectra[{label!r}] is empty")
        if log_scale and np.any(s <= 0):
            raise ValueError(f"spectra[{label!r}] has values <= 0, which a log scale cannot show")
        ax.plot(np.arange(1, s.size + 1), s, lw=1.5, color=f"C{k % 10}", label=str(label))
    if log_scale:
        ax.set_yscale("log")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value (largest = 1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return _save(fig, path)


def plot_cosine_bins(
    models: Mapping[str, Sequence],
    out: str | os.PathLike,
    n_points: int = 200,
    title: str | None = None,
) -> Path:
    """Cosine-similarity densities of sentence pairs per gold-score group (SimCSE Appendix G, Figure G.1).

    One panel per model, all on one x range; y = gold-score group (higher = more similar), x = cosine
    similarity. Each group's density is a Gaussian kernel estimate (Scott's bandwidth) scaled to the same
    height and drawn as a ridge; a group with fewer than 2 distinct values is drawn as ticks.

    Args:
        models: ``{label: groups}`` with groups from :func:`simcse.evaluation.analysis.cosine_by_gold_bins`
            (objects with ``low``, ``high`` and ``cosines``).
        out: .png path.
        n_points: grid points of each density curve (>= 10).

    Raises:
        ValueError: no model, a model with no group, n_points < 10, or non-finite cosines.
    """
    path = _out_path(out)
    if not models:
        raise ValueError("models is empty: nothing to plot")
    if n_points < 10:
        raise ValueError(f"n_points must be >= 10, got {n_points}")
    checked = {}
    for label, groups in models.items():
        groups = list(groups)
        if not groups:
            raise ValueError(f"models[{label!r}] has no gold-score group")
        checked[label] = (groups, [_finite_list(g.cosines, f"models[{label!r}] cosines") for g in groups])
    nonempty = [v for _, values in checked.values() for v in values if v.size]
    lo = min([v.min() for v in nonempty], default=-1.0)
    hi = max([v.max() for v in nonempty], default=1.0)
    pad = 0.05 * max(hi - lo, 1e-3)
    grid = np.linspace(lo - pad, hi + pad, n_points)  # one x range for all panels, so they compare
    ncols = min(3, len(models))
    nrows = math.ceil(len(models) / ncols)
    fig = _figure(4.0 * ncols, 3.2 * nrows)
    for m, (label, (groups, values)) in enumerate(checked.items()):
        ax = fig.add_subplot(nrows, ncols, m + 1)
        for k, (g, v) in enumerate(zip(groups, values)):
            color = f"C{k % 10}"
            if v.size >= 2 and np.ptp(v) > 0:
                dens = _gaussian_kde(v, grid)
                dens = 0.85 * dens / dens.max()
                ax.fill_between(grid, k, k + dens, color=color, alpha=0.6, lw=0)
                ax.plot(grid, k + dens, color=color, lw=1)
            elif v.size:
                ax.vlines(v, k, k + 0.85, color=color, lw=1)
        ax.set_yticks(range(len(groups)))
        ax.set_yticklabels([f"{g.low:g}-{g.high:g} (n={len(v)})" for g, v in zip(groups, values)], fontsize=8)
        ax.set_ylim(-0.1, len(groups))
        ax.set_xlim(grid[0], grid[-1])
        ax.set_xlabel("cosine similarity")
        if m % ncols == 0:
            ax.set_ylabel("gold score")
        ax.set_title(str(label), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def _gaussian_kde(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian kernel density of 1-D ``values`` (n,) on ``grid`` (G,), Scott's rule bandwidth; (G,)."""
    n = values.size
    bw = max(float(np.std(values, ddof=1)) * n ** (-1.0 / 5.0), 1e-6)
    z = (grid[:, None] - values[None, :]) / bw  # (G, n)
    return np.exp(-0.5 * z**2).sum(axis=1) / (n * bw * math.sqrt(2 * math.pi))


def plot_loss_curve(steps: Sequence[float], losses: Sequence[float], out: str | os.PathLike,
                    ylabel: str = "MLM loss", title: str | None = None) -> Path:
    """A training-loss curve (e.g. :mod:`simcse.research.pretrain`'s ``loss_curve.csv``): loss against optimizer step.

    Args:
        steps: (K,) step numbers; losses: (K,) loss values (nats); out: .png path.

    Raises:
        ValueError: no point, lengths that differ, or a non-finite value.
    """
    path = _out_path(out)
    x = _finite_list(steps, "steps")
    y = _finite_list(losses, "losses", n=x.shape[0])
    if x.size == 0:
        raise ValueError("steps is empty: nothing to plot")
    fig = _figure(5.0, 3.4)
    ax = fig.add_subplot()
    ax.plot(x, y, lw=1.5, color="C0")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return _save(fig, path)
