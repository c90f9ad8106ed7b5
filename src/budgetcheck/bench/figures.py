"""The benchmark's figures (matplotlib, PNG and PDF), after Schäler et al. 2022:
the δ_MAE heat map (Figure 2), error vs ε and vs w per stream (Figure 3), and true vs released
streams of Uniform and Sample (Figure 4)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck.bench.config import ArtificialStream, StreamSpec
from budgetcheck.bench.report import CellSummary

FloatArray = NDArray[np.float64]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, path: Path) -> list[Path]:
    """PNG and PDF. The constrained layout (every figure here has one) already keeps titles, labels
    and legends inside the figure, so no tight bounding box is searched, and it is laid out once: the
    PDF keeps the PNG's positions (with decade-only log labels, ``bench report`` on the paper grid
    took 17.6 s instead of 22.5)."""
    written = []
    for suffix in (".png", ".pdf"):
        target = path.with_suffix(suffix)
        figure.savefig(target, dpi=130)
        figure.set_layout_engine("none")
        written.append(target)
    _pyplot().close(figure)
    return written


def _grid(count: int, columns: int = 5) -> tuple[int, int]:
    cols = min(columns, count)
    return math.ceil(count / cols), cols


def heat_map(deltas: dict[tuple[str, float, int], dict[str, float]], streams: dict[str, StreamSpec], path: Path) -> list[Path]:
    """δ_MAE on the artificial streams: one panel per (ε, w), mechanisms × streams (sorted by a, s)."""
    plt = _pyplot()
    from matplotlib.colors import LogNorm

    artificial = sorted((s for s in streams.values() if isinstance(s, ArtificialStream)), key=lambda s: (s.amplitude, s.season))
    settings = sorted({(e, w) for (name, e, w) in deltas if name in {s.name for s in artificial}})
    if not artificial or not settings:
        return []
    mechanisms = sorted({m for values in deltas.values() for m in values})
    rows, cols = _grid(len(settings), 3)
    figure, axes = plt.subplots(rows, cols, figsize=(0.32 * len(artificial) * cols + 2, 0.3 * len(mechanisms) * rows + 1.5),
                                squeeze=False, constrained_layout=True)
    norm = LogNorm(vmin=1.0, vmax=10.0)
    image = None
    for ax, (epsilon, w) in zip(axes.flat, settings):
        grid = np.array([[deltas.get((s.name, epsilon, w), {}).get(m, np.nan) for s in artificial] for m in mechanisms])
        image = ax.imshow(np.clip(grid, 1.0, 10.0), cmap="RdYlGn_r", norm=norm, aspect="auto")
        ax.set_title(f"ε = {epsilon:g}, w = {w}", fontsize=9)
        ax.set_yticks(range(len(mechanisms)), mechanisms, fontsize=7)
        ax.set_xticks(range(len(artificial)), [f"a={s.amplitude:g} s={s.season}" for s in artificial], rotation=90, fontsize=6)
        if len(artificial) * len(mechanisms) <= 120:
            for (i, j), value in np.ndenumerate(grid):
                if not np.isnan(value):
                    ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=6)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    figure.colorbar(image, ax=axes, label="δ_MAE (MAE / best MAE; clipped at 10)", shrink=0.8)
    figure.suptitle("MAE deterioration on the artificial streams (cf. Schäler et al. 2022, Figure 2)")
    return _save(figure, path)


def error_curves(summaries: Sequence[CellSummary], path: Path, *, vary: str) -> list[Path]:
    """Mean MAE vs ε (at the w with most ε values) or vs w (at the ε with most w values), one panel per stream."""
    by_fixed: dict[float, set[float]] = defaultdict(set)
    for s in summaries:
        fixed, varied = (s.cell.w, s.cell.epsilon) if vary == "epsilon" else (s.cell.epsilon, s.cell.w)
        by_fixed[fixed].add(varied)
    if not by_fixed:
        return []
    fixed_value = max(by_fixed, key=lambda k: len(by_fixed[k]))
    if len(by_fixed[fixed_value]) < 2:
        return []
    chosen = [s for s in summaries if (s.cell.w if vary == "epsilon" else s.cell.epsilon) == fixed_value]
    streams = sorted({s.cell.stream for s in chosen})
    mechanisms = sorted({s.cell.mechanism for s in chosen})
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter

    rows, cols = _grid(len(streams))
    figure, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, constrained_layout=True)
    for ax, stream in zip(axes.flat, streams):
        for mechanism in mechanisms:
            points = sorted(((s.cell.epsilon if vary == "epsilon" else s.cell.w), s.mae_mean)
                            for s in chosen if s.cell.stream == stream and s.cell.mechanism == mechanism)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=3, label=mechanism)
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels crowd short ranges
        ax.set_title(stream, fontsize=9)
        ax.set_xlabel("ε" if vary == "epsilon" else "w", fontsize=8)
        ax.tick_params(which="both", labelsize=7)
    for ax in list(axes.flat)[len(streams):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("mean MAE (log)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=8)
    fixed_text = f"w = {int(fixed_value)}" if vary == "epsilon" else f"ε = {fixed_value:g}"
    figure.suptitle(f"Mean MAE vs {'ε' if vary == 'epsilon' else 'w'} at {fixed_text} (cf. Schäler et al. 2022, Figure 3)")
    return _save(figure, path)


def releases_figure(truth: dict[str, FloatArray], released: dict[str, dict[str, FloatArray]], setting: tuple[float, int],
                    path: Path) -> list[Path]:
    """True stream (first dimension) vs one run of each mechanism's releases, one panel per stream."""
    if not truth:
        return []
    plt = _pyplot()
    figure, axes = plt.subplots(len(truth), 1, figsize=(10, 2.4 * len(truth)), squeeze=False, constrained_layout=True)
    for ax, (stream, values) in zip(axes[:, 0], truth.items()):
        for mechanism, series in released[stream].items():
            ax.plot(series[:, 0], linewidth=0.8, alpha=0.8, label=mechanism)
        ax.plot(values[:, 0], color="black", linewidth=1.2, label="true")
        ax.set_title(stream, fontsize=9)
        ax.tick_params(which="both", labelsize=7)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("timestamp")
    figure.suptitle(f"True vs released stream, run 1, ε = {setting[0]:g}, w = {setting[1]} (cf. Schäler et al. 2022, Figure 4)")
    return _save(figure, path)


def study_curves(points: Sequence[tuple[str, str, float, str, float]], path: Path, *, ylabel: str, title: str,
                 log: bool = True, xlog: bool = False) -> list[Path]:
    """Small multiples of (row, column, x, series, y): one panel per (row, column), one line per series."""
    if not points:
        return []
    plt = _pyplot()
    rows = list(dict.fromkeys(p[0] for p in points))
    cols = list(dict.fromkeys(p[1] for p in points))
    figure, axes = plt.subplots(len(rows), len(cols), figsize=(3.2 * len(cols), 2.5 * len(rows)), squeeze=False,
                                constrained_layout=True)
    series = list(dict.fromkeys(p[3] for p in points))
    styles = {name: (f"C{k % 10}", "os^vD"[k // 10 % 5]) for k, name in enumerate(series)}
    for (i, row), (j, col) in ((a, b) for a in enumerate(rows) for b in enumerate(cols)):
        ax = axes[i, j]
        for name in series:
            xy = sorted((p[2], p[4]) for p in points if p[0] == row and p[1] == col and p[3] == name)
            if xy:
                xs, ys = zip(*xy)
                color, marker = styles[name]
                ax.plot(xs, ys, marker=marker, markersize=3, color=color, label=name)
        if log:
            ax.set_yscale("log")
        if xlog:
            ax.set_xscale("log")
        ax.set_title(f"{row}: {col}", fontsize=9)
        ax.tick_params(which="both", labelsize=7)
        if j == 0:
            ax.set_ylabel(ylabel, fontsize=8)
    legend: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    figure.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=min(6, len(legend)), fontsize=8)
    figure.suptitle(title)
    return _save(figure, path)
