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
    PDF keeps the PNG's positions (with decade-only log labels)."""
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


PAPER_SEASON = 80  # Figure 2 shows the streams of period s = 80 (the period is not decisive, §5.1.1)
DELTA_CAP = 1000.0  # the colour scale never extends beyond δ_MAE = 1000 (larger cells are labelled "1k+")


def _experiments(settings: set[tuple[float, int]]) -> list[tuple[str, str, list[tuple[float, int]]]]:
    """Figure 2's two experiments: vary ε at the w with most ε values, vary w at the ε with most w values
    (each kept when it varies; the first one otherwise). Returns (axis name, title, settings in order)."""
    by_w: dict[int, set[float]] = defaultdict(set)
    by_epsilon: dict[float, set[int]] = defaultdict(set)
    for epsilon, w in settings:
        by_w[w].add(epsilon)
        by_epsilon[epsilon].add(w)
    w0 = max(by_w, key=lambda w: (len(by_w[w]), w))
    e0 = max(by_epsilon, key=lambda e: (len(by_epsilon[e]), e))
    both = [
        ("ε", f"vary ε at w = {w0}", [(e, w0) for e in sorted(by_w[w0])]),
        ("w", f"vary w at ε = {e0:g}", [(e0, w) for w in sorted(by_epsilon[e0])]),
    ]
    varied = [experiment for experiment in both if len(experiment[2]) > 1]
    chosen = varied or both[:1]
    return [(axis, f"({'ab'[k]}) {title}", rows) for k, (axis, title, rows) in enumerate(chosen)]


def delta_scale(largest: float) -> float:
    """The top of the shared colour scale: the first 1-2-5 step above the largest δ_MAE (so that no cell
    saturates), at most ``DELTA_CAP``."""
    step = 2.0
    while step <= largest and step < DELTA_CAP:
        step *= 2.5 if str(step)[0] == "2" else 2.0
    return min(step, DELTA_CAP)


def _cell_text(value: float) -> str:
    if value >= DELTA_CAP:
        return f"{DELTA_CAP / 1000:g}k+"
    return f"{value:.1f}" if value < 9.95 else f"{value:.0f}"


def _amplitude_text(amplitude: float) -> str:
    return f"{amplitude:,.0f}" if amplitude >= 1 else f"{amplitude:g}"


def delta_mae_figure(deltas: dict[tuple[str, float, int], dict[str, float]], streams: dict[str, StreamSpec]) -> Any:
    """δ_MAE on the artificial streams laid out as Schäler et al. 2022, Figure 2: one panel per mechanism,
    amplitude a across and ε (a) or w (b) up, streams of one period s; one log colour scale from 1 (the best
    MAE of its cell, green) to the first 1-2-5 step above the largest δ_MAE (red). None without data."""
    from matplotlib.colors import LogNorm

    artificial = [s for s in streams.values() if isinstance(s, ArtificialStream)]
    names = {s.name for s in artificial}
    settings = {(e, w) for (name, e, w) in deltas if name in names}
    if not artificial or not settings:
        return None
    seasons = sorted({s.season for s in artificial})
    season = PAPER_SEASON if PAPER_SEASON in seasons else seasons[len(seasons) // 2]
    of_season = sorted((s for s in artificial if s.season == season), key=lambda s: (s.amplitude, s.length))
    by_amplitude = {s.amplitude: s.name for s in of_season}
    amplitudes = sorted(by_amplitude)
    mechanisms = sorted({m for (name, _, _), values in deltas.items() if name in names for m in values})
    experiments = _experiments(settings)
    grids = {
        (m, k): np.array(
            [[deltas.get((by_amplitude[a], e, w), {}).get(m, np.nan) for a in amplitudes] for (e, w) in rows]
        )
        for m in mechanisms
        for k, (_, _, rows) in enumerate(experiments)
    }
    finite = [v for grid in grids.values() for v in grid.ravel() if np.isfinite(v)]
    top = delta_scale(max(finite, default=1.0))
    norm = LogNorm(vmin=1.0, vmax=top)
    cmap = _pyplot().get_cmap("RdYlGn_r").with_extremes(bad="#dddddd")
    columns = min(5, len(mechanisms))
    panel_rows = math.ceil(len(mechanisms) / columns)
    width, heights = [0.55 * len(amplitudes) + 0.75, [0.36 * len(rows) + 0.75 for _, _, rows in experiments]]
    block = [panel_rows * h + 0.45 for h in heights]
    plt = _pyplot()
    figure = plt.figure(figsize=(max(8.5, columns * width + 0.9), sum(block) + 1.55), layout="constrained")
    parts = figure.subfigures(len(experiments) + 1, 1, height_ratios=[*block, 0.95])
    image = None
    for k, (axis, title, rows) in enumerate(experiments):
        part = parts[k]
        part.suptitle(title, fontsize=10, x=0.01, ha="left")
        axes = part.subplots(panel_rows, columns, squeeze=False)
        for index, mechanism in enumerate(mechanisms):
            ax = axes.flat[index]
            grid = grids[(mechanism, k)]
            image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto", origin="lower")
            ax.set_title(mechanism, fontsize=9, pad=3)
            ax.set_xticks(range(len(amplitudes)), [_amplitude_text(a) for a in amplitudes], fontsize=7)
            ax.set_yticks(range(len(rows)), [f"{e:g}" if axis == "ε" else str(w) for e, w in rows], fontsize=7)
            ax.tick_params(length=2, pad=1.5, labelleft=index % columns == 0)
            if index % columns == 0:
                ax.set_ylabel(axis, fontsize=9)
            if index + columns >= len(mechanisms):
                ax.set_xlabel("amplitude a", fontsize=8)
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    red, green, blue, _ = cmap(norm(min(value, top)))
                    dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                    ax.text(
                        j,
                        i,
                        _cell_text(value),
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "black",
                        fontweight="bold" if value == 1.0 else "normal",
                    )
        for ax in list(axes.flat)[len(mechanisms) :]:
            ax.axis("off")
    bar = parts[-1].add_axes((0.2, 0.62, 0.6, 0.16))
    colorbar = parts[-1].colorbar(image, cax=bar, orientation="horizontal")
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top]
    colorbar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks], fontsize=7)
    colorbar.minorticks_off()
    colorbar.set_label(
        "δ_MAE: the mechanism's MAE / the smallest MAE of any mechanism on that stream and setting (1 = best, bold)",
        fontsize=8,
    )
    figure.suptitle(
        f"MAE deterioration on the artificial streams of period s = {season} (cf. Schäler et al. 2022, Figure 2)",
        fontsize=11,
    )
    return figure


def heat_map(
    deltas: dict[tuple[str, float, int], dict[str, float]], streams: dict[str, StreamSpec], path: Path
) -> list[Path]:
    """The δ_MAE figure (:func:`delta_mae_figure`) as PNG and PDF; nothing without artificial streams."""
    figure = delta_mae_figure(deltas, streams)
    return [] if figure is None else _save(figure, path)


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
            points = sorted(
                ((s.cell.epsilon if vary == "epsilon" else s.cell.w), s.mae_mean)
                for s in chosen
                if s.cell.stream == stream and s.cell.mechanism == mechanism
            )
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", markersize=3, label=mechanism)
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels crowd short ranges
        ax.set_title(stream, fontsize=9)
        ax.set_xlabel("ε" if vary == "epsilon" else "w", fontsize=8)
        ax.tick_params(which="both", labelsize=7)
    for ax in list(axes.flat)[len(streams) :]:
        ax.axis("off")
    axes.flat[0].set_ylabel("mean MAE (log)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(6, len(labels)), fontsize=8)
    fixed_text = f"w = {int(fixed_value)}" if vary == "epsilon" else f"ε = {fixed_value:g}"
    figure.suptitle(
        f"Mean MAE vs {'ε' if vary == 'epsilon' else 'w'} at {fixed_text} (cf. Schäler et al. 2022, Figure 3)"
    )
    return _save(figure, path)


def releases_figure(
    truth: dict[str, FloatArray], released: dict[str, dict[str, FloatArray]], setting: tuple[float, int], path: Path
) -> list[Path]:
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
    figure.suptitle(
        f"True vs released stream, run 1, ε = {setting[0]:g}, w = {setting[1]} (cf. Schäler et al. 2022, Figure 4)"
    )
    return _save(figure, path)


def study_curves(
    points: Sequence[tuple[str, str, float, str, float]],
    path: Path,
    *,
    ylabel: str,
    title: str,
    log: bool = True,
    xlog: bool = False,
) -> list[Path]:
    """Small multiples of (row, column, x, series, y): one panel per (row, column), one line per series."""
    if not points:
        return []
    plt = _pyplot()
    rows = list(dict.fromkeys(p[0] for p in points))
    cols = list(dict.fromkeys(p[1] for p in points))
    figure, axes = plt.subplots(
        len(rows), len(cols), figsize=(3.2 * len(cols), 2.5 * len(rows)), squeeze=False, constrained_layout=True
    )
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
    figure.legend(
        list(legend.values()), list(legend), loc="outside lower center", ncols=min(6, len(legend)), fontsize=8
    )
    figure.suptitle(title)
    return _save(figure, path)


def box_plots(
    panels: dict[str, dict[str, dict[str, list[float]]]],
    path: Path,
    *,
    ylabel: str,
    title: str,
    reference: float | None = None,
) -> list[Path]:
    """One panel per key of ``panels``; in each, groups along x (e.g. zones) of side-by-side boxes, one per
    series (e.g. mechanism), each box over its values (e.g. households); log y axis. Nothing without data."""
    panels = {
        name: {group: {k: v for k, v in series.items() if v} for group, series in groups.items()}
        for name, groups in panels.items()
    }
    panels = {name: groups for name, groups in panels.items() if any(groups.values())}
    if not panels:
        return []
    plt = _pyplot()
    rows, cols = _grid(len(panels), columns=3)
    figure, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False, constrained_layout=True)
    names = list(dict.fromkeys(k for groups in panels.values() for series in groups.values() for k in series))
    colors = {name: f"C{k % 10}" for k, name in enumerate(names)}
    for ax, (panel, groups) in zip(axes.flat, panels.items()):
        labels = list(groups)
        inside = list(dict.fromkeys(k for series in groups.values() for k in series))
        width = 0.8 / max(1, len(inside))
        for j, name in enumerate(inside):
            positions = [i - 0.4 + width * (j + 0.5) for i, g in enumerate(labels) if name in groups[g]]
            values = [groups[g][name] for g in labels if name in groups[g]]
            parts = ax.boxplot(values, positions=positions, widths=width * 0.85, patch_artist=True, manage_ticks=False)
            for box in parts["boxes"]:
                box.set(facecolor=colors[name], alpha=0.6)
            ax.plot([], [], color=colors[name], linewidth=6, alpha=0.6, label=name)
        if reference is not None:
            ax.axhline(reference, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_yscale("log")
        ax.set_title(panel, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        if len(inside) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    figure.suptitle(title, fontsize=10)
    return _save(figure, path)
