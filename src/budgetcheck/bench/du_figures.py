"""Du et al. 2025's Figures 10-13 in the paper's own form, and §5.4's percentages beside ours.

Figures 10-13 of Du et al. 2025 have one panel per data set in the order (a) Taxi, (b) Foursquare,
(c) TLNS, (d) Sin, (e) Log, the natural logarithm of AMRE (Eq. 15) on a linear y axis, the varied
parameter on x, and one line per method named PBD, PBA, BD, BA, PLBU (BD and BA being the methods
run under the strictest requirement, our StrictestBD and StrictestBA). A data set without rows
keeps its panel, marked "not run" (the real streams are not available offline).

The paper prints no per-point values; §5.4 gives only mean improvements (PBA over BA on the
synthetic data sets, PBD over BD on the real ones), which :func:`improvement_figure` draws beside
ours as grouped bars.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from budgetcheck.bench.personalized_study import PersonalizedRow
    >>> rows = [PersonalizedRow("Sin", "vary-w", w, "PBA", 1e-3 * w / 40, 1e-4) for w in (40.0, 200.0)]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     [p.suffix for p in paper_form(rows, "vary-w", Path(folder) / "fig11")]
    ['.png', '.pdf']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from budgetcheck.bench.figures import _pyplot, _save
from budgetcheck.bench.personalized_study import PersonalizedRow

PANELS = ("Taxi", "Foursquare", "TLNS", "Sin", "Log")
REAL = PANELS[:2]
# our mechanism name -> the paper's legend name, in the paper's legend order, with a fixed style each
NAMES = {"PBD": "PBD", "PBA": "PBA", "StrictestBD": "BD", "StrictestBA": "BA", "PLBU": "PLBU"}
STYLES = {"PBD": ("C3", "o"), "PBA": ("C0", "s"), "BD": ("C2", "^"), "BA": ("C1", "v"), "PLBU": ("C4", "D")}
EXPERIMENTS = {
    "vary-epsilon": ("Figure 10. AMRE with ε varied", "ε"),
    "vary-w": ("Figure 11. AMRE with w varied", "w"),
    "ratio-epsilon": ("Figure 12. AMRE with ratio for privacy budget varied", "ratio o of users with ε_k = 1.0"),
    "ratio-w": ("Figure 13. AMRE with ratio for window size varied", "ratio o of users with w_k = 40"),
}


def paper_form(rows: Sequence[PersonalizedRow], experiment: str, path: Path, *, note: str = "") -> list[Path]:
    """One of Figures 10-13 (``experiment`` as in :func:`personalized_study.experiments`) as PNG and PDF."""
    title, xlabel = EXPERIMENTS[experiment]
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(PANELS), figsize=(15.0, 3.3), constrained_layout=True)
    chosen = [r for r in rows if r.experiment == experiment and r.amre > 0 and math.isfinite(r.amre)]
    for letter, (ax, dataset) in zip("abcde", zip(axes, PANELS, strict=True), strict=False):
        mine = [r for r in chosen if r.dataset == dataset]
        for ours, theirs in NAMES.items():
            xy = sorted((r.x, math.log(r.amre)) for r in mine if r.mechanism == ours)
            if xy:
                color, marker = STYLES[theirs]
                xs, ys = zip(*xy, strict=True)
                ax.plot(xs, ys, color=color, marker=marker, markersize=4, label=theirs)
        if not mine:
            why = "not run: the data set\nis not available offline" if dataset in REAL else "not run"
            ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=9, color="0.4", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            ax.set_xticks(sorted({r.x for r in mine}))
            ax.grid(alpha=0.3)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_title(f"({letter}) {dataset}", fontsize=10)
        ax.tick_params(labelsize=8)
    axes[0].set_ylabel("ln(AMRE)", fontsize=9)
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    order = [name for name in STYLES if name in handles]
    figure.legend([handles[n] for n in order], order, loc="outside lower center", ncols=len(order), fontsize=9)
    figure.suptitle(f"{title} — ours{': ' + note if note else ''} (cf. Du et al. 2025)", fontsize=11)
    return _save(figure, path)


def improvement_figure(
    ours: Mapping[tuple[str, str, str], float], paper: Mapping[tuple[str, str, str], float], path: Path, *, note: str
) -> list[Path]:
    """Grouped bars of "% lower AMRE" keyed (comparison, data set, experiment), e.g. ("PBA vs BA", "TLNS",
    "vary-epsilon"): the paper's §5.4 figure and ours side by side, one panel per experiment (vary ε, vary w).
    A missing value leaves its bar out and is written "n/a"."""
    plt = _pyplot()
    experiments = ("vary-epsilon", "vary-w")
    present = {(c, d) for c, d, _ in [*paper, *ours]}
    groups = [(c, d) for c in ("PBA vs BA", "PBD vs BD") for d in PANELS[2:] + PANELS[:2] if (c, d) in present]
    figure, axes = plt.subplots(1, 2, figsize=(12.0, 3.8), constrained_layout=True, sharey=True)
    width = 0.38
    drawn = [v for v in [*paper.values(), *ours.values()] if math.isfinite(v)]
    low, high = min(0.0, *drawn) - 5.0, max(100.0, *drawn) + 8.0  # a baseline beaten by P gives a negative bar
    for ax, experiment in zip(axes, experiments, strict=True):
        for k, (comparison, dataset) in enumerate(groups):
            for offset, (label, values, color) in enumerate(
                (("Du et al. 2025, §5.4", paper, "0.55"), ("ours", ours, "C0"))
            ):
                value = values.get((comparison, dataset, experiment))
                x = k + (offset - 0.5) * width
                if value is None or not math.isfinite(value):
                    ax.text(x, 1.0, "n/a", ha="center", va="bottom", fontsize=7, rotation=90, color="0.3")
                    continue
                ax.bar(
                    x,
                    value,
                    width,
                    color=color,
                    label=label if k == 0 or label not in ax.get_legend_handles_labels()[1] else None,
                )
                ax.text(x, max(value, 0.0) + 1.0, f"{value:.0f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(groups)), [f"{d}\n{c}" for c, d in groups], fontsize=8)
        ax.set_title("ε varied (Figure 10)" if experiment == "vary-epsilon" else "w varied (Figure 11)", fontsize=10)
        ax.set_ylim(low, high)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("% lower AMRE than the baseline\n(mean over the points)", fontsize=9)
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    figure.legend(list(handles.values()), list(handles), loc="outside upper center", ncols=2, fontsize=9)
    figure.supxlabel(note, fontsize=8)
    return _save(figure, path)
