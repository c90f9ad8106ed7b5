"""Tex et al.'s Figures 4-6 and Table 3 in the paper's form, ours beside what the paper states.

Figures 4 and 5: one panel per pair of Table 2, boxes of the per-household MRE ratio
MRE(Swellfish) / MRE(w-event) along the zones in increasing average consumption (log y, 1 dashed),
and beside them a grey slot redrawing the order of magnitude §5.2.1 states in words
(:data:`budgetcheck.bench.tex_paper.PAPER_RANGES`; the paper's figures print no values). Figure 6:
the competitors' MRE per household (upper panel) and the Swellfish mechanisms' (lower panel), as in
the paper. Table 3: ΔQ and w, ours and the paper's, and the boxes of the MAE improvement Theorems 6.1
and 6.2 predict for Uniform over the households, with the measured ratios beside them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from budgetcheck.bench.figures import _pyplot, _save
from budgetcheck.bench.tex_paper import (
    PAPER_GLOBAL_SENSITIVITY,
    PAPER_HOUSEHOLDS,
    PAPER_RANGES,
    PAPER_WINDOW,
    PAPER_ZONES_MW,
)

PAPER_SLOT = f"paper §5.2.1\n({min(PAPER_ZONES_MW.values()):g}–{max(PAPER_ZONES_MW.values()):g} MW)"
_GREY = "0.55"


def zone_label(zone_kw: float) -> str:
    """A zone's average consumption as the paper writes it (MW)."""
    return f"{zone_kw / 1000:g} MW"


def _boxes(ax: Any, groups: Sequence[Sequence[float]], positions: Sequence[float], width: float, color: str) -> None:
    parts = ax.boxplot(
        list(groups),
        positions=list(positions),
        widths=width,
        patch_artist=True,
        manage_ticks=False,
        flierprops={"markersize": 3, "markeredgecolor": color},
        medianprops={"color": "black"},
    )
    for box in parts["boxes"]:
        box.set(facecolor=color, alpha=0.7)


def _paper_slot(ax: Any, x: float, base: str, improved: str) -> None:
    stated = PAPER_RANGES.get((base, improved))
    if stated is None:
        return
    if stated.low is not None and stated.high is not None and stated.low < stated.high:
        ax.fill_between([x - 0.3, x + 0.3], stated.low, stated.high, color=_GREY, alpha=0.35, hatch="//", lw=0)
    elif stated.low is not None:
        ax.plot([x - 0.3, x + 0.3], [stated.low, stated.low], color=_GREY, linewidth=4, solid_capstyle="butt")
    else:
        ax.text(
            x,
            0.5,
            "in words only:\n" + textwrap.fill(stated.words, 18),
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="center",
            fontsize=6,
            color="0.3",
        )
    ax.axvline(x - 0.5, color="0.8", linewidth=0.8, linestyle=":")


def ratio_figure(
    ratios: Mapping[tuple[str, str], Mapping[float, Sequence[float]]],
    path: Path,
    *,
    title: str,
    columns: int = 2,
) -> list[Path]:
    """Figure 4 or 5: for each (w-event, Swellfish) pair, its per-household MRE ratios by zone (kW),
    boxes, and the paper's stated range in the last slot. PNG and PDF; nothing without data."""
    pairs = [(pair, by_zone) for pair, by_zone in ratios.items() if any(by_zone.values())]
    if not pairs:
        return []
    plt = _pyplot()
    rows = -(-len(pairs) // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(3.4 * columns, 2.7 * rows), squeeze=False, sharey=True, constrained_layout=True
    )
    for ax, ((base, improved), by_zone) in zip(axes.flat, pairs, strict=False):
        zones = sorted(z for z, v in by_zone.items() if v)
        _boxes(ax, [by_zone[z] for z in zones], range(len(zones)), 0.55, "C0")
        _paper_slot(ax, len(zones), base, improved)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(zones) + 1), [*(zone_label(z) for z in zones), PAPER_SLOT], fontsize=7)
        ax.set_xlim(-0.6, len(zones) + 0.6)
        ax.set_yscale("log")
        ax.set_title(f"{improved} vs. {base}", fontsize=9)
        ax.tick_params(which="both", labelsize=7)
        ax.grid(axis="y", which="major", linewidth=0.3, alpha=0.5)
    for ax in axes[:, 0]:
        ax.set_ylabel("MRE ratio (log)", fontsize=8)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.axis("off")
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor="C0", alpha=0.7, edgecolor="black"),
        plt.Rectangle((0, 0), 1, 1, facecolor=_GREY, alpha=0.35, hatch="//", edgecolor="none"),
    ]
    figure.legend(
        handles,
        ["ours: one value per household, by zone", "the paper's text (its figure prints no values)"],
        loc="outside lower center",
        ncols=2,
        fontsize=7,
        frameon=False,
    )
    figure.suptitle(title, fontsize=9)
    return _save(figure, path)


def extrinsic_figure(
    mre: Mapping[str, Mapping[float, Sequence[float]]],
    panels: Sequence[tuple[str, Sequence[str]]],
    path: Path,
    *,
    title: str,
) -> list[Path]:
    """Figure 6: one panel per (title, mechanisms) of ``panels``, stacked as in the paper; in each, per zone
    (kW) a box per mechanism over the households' MRE. PNG and PDF; nothing without data."""
    panels = [(name, [m for m in names if any(mre.get(m, {}).values())]) for name, names in panels]
    panels = [(name, names) for name, names in panels if names]
    if not panels:
        return []
    plt = _pyplot()
    zones = sorted({z for by_zone in mre.values() for z, v in by_zone.items() if v})
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(6.4, 2.5 * len(panels)), squeeze=False, sharey=True, constrained_layout=True
    )
    colours = {name: f"C{k}" for k, name in enumerate(dict.fromkeys(m for _, names in panels for m in names))}
    for ax, (panel, names) in zip(axes[:, 0], panels, strict=True):
        width = 0.8 / len(names)
        for j, name in enumerate(names):
            present = [i for i, z in enumerate(zones) if mre[name].get(z)]
            _boxes(
                ax,
                [mre[name][zones[i]] for i in present],
                [i - 0.4 + width * (j + 0.5) for i in present],
                width * 0.8,
                colours[name],
            )
            ax.plot([], [], color=colours[name], linewidth=6, alpha=0.7, label=name)
        ax.set_xticks(range(len(zones)), [zone_label(z) for z in zones], fontsize=7)
        ax.set_xlim(-0.5, len(zones) - 0.5)
        ax.set_yscale("log")
        ax.set_ylabel("MRE (log)", fontsize=8)
        ax.set_title(panel, fontsize=9)
        ax.tick_params(which="both", labelsize=7)
        ax.grid(axis="y", which="major", linewidth=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    axes[-1, 0].set_xlabel("zone (average consumption)", fontsize=8)
    figure.suptitle(title, fontsize=9)
    return _save(figure, path)


def table3_figure(
    predicted: Mapping[str, Sequence[float]],
    measured: Mapping[str, Sequence[float]],
    ours: tuple[float, Sequence[int]],
    path: Path,
    *,
    title: str,
) -> list[Path]:
    """Table 3: ΔQ and w (ours, the paper's), and per effect ("TEAS", "TINAR") the boxes over the
    households of the predicted and the measured MAE ratio of Uniform. ``ours`` = (ΔQ, each household's w)."""
    effects = [e for e in ("TEAS", "TINAR") if predicted.get(e)]
    if not effects:
        return []
    plt = _pyplot()
    figure, axes = plt.subplots(
        1,
        1 + len(effects),
        figsize=(3.0 + 2.4 * len(effects), 2.8),
        squeeze=False,
        constrained_layout=True,
        gridspec_kw={"width_ratios": [1.5] + [1.0] * len(effects)},
    )
    sensitivity, windows = ours
    w_ours = f"{min(windows)}" if min(windows) == max(windows) else f"{min(windows)}–{max(windows)}"
    cells = [
        ["ΔQ (kW)", f"{sensitivity:.2f}", f"{PAPER_GLOBAL_SENSITIVITY:.2f}"],
        ["w", w_ours, "–".join(str(w) for w in PAPER_WINDOW)],
        ["households", str(len(windows)), str(PAPER_HOUSEHOLDS)],
        ["estimates", "boxes →", "picture only"],
    ]
    table_ax = axes[0, 0]
    table_ax.axis("off")
    table = table_ax.table(
        cellText=cells,
        colLabels=["", "ours", "paper"],
        colWidths=[0.46, 0.24, 0.3],
        loc="center",
        cellLoc="center",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.scale(1.0, 1.5)
    formulas = {"TEAS": r"$\varnothing_t\,\Delta_Q^t / \Delta Q$", "TINAR": r"$\varnothing_t\,\max\,\delta(J) / w$"}
    for ax, effect in zip(axes[0, 1:], effects, strict=True):
        values = [predicted[effect], measured.get(effect, [])]
        labels = ["predicted", "measured"]
        kept = [(v, label) for v, label in zip(values, labels, strict=True) if v]
        for k, (v, _) in enumerate(kept):
            _boxes(ax, [v], [k], 0.5, f"C{k}")
        ax.set_xticks(range(len(kept)), [label for _, label in kept], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylim(1e-2, 1.0)
        ax.set_title(f"{effect}: {formulas[effect]}", fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        ax.grid(axis="y", which="major", linewidth=0.3, alpha=0.5)
    axes[0, 1].set_ylabel("MAE ratio to Uniform (log)", fontsize=8)
    figure.suptitle(title, fontsize=9)
    return _save(figure, path)
