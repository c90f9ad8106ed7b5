"""Figure 2 of Schäler et al. 2022 (the δ_MAE heat map) from a results file, beside the authors' numbers.

The paper's Figure 2 shows δ_MAE (§5.1, the MAE of a mechanism over the smallest MAE of the nine
mechanisms in the same cell) on the artificial streams of period s = 80: (a) vary ε at w = 120,
(b) vary w at ε = 1, one heat map per mechanism, amplitude a across. The figure is an image in the
paper; its numbers are in the authors' reproducibility workbook (``figures/vldb-reproducability.xlsx``
of github.com/chryenix/streamdp-benchmark, sheets ``fig_2a`` and ``fig_2b``), transcribed cell by cell
into ``results/schaeler2022/paper_figure2.csv`` (each row names its workbook cell).

This script reads a benchmark results file (``bench --paper``), recomputes δ_MAE over the paper's
nine mechanisms only (our ``Hybrid`` is not in the paper's M and would change every cell's minimum),
and writes:

- ``figure2_comparison.csv``: every (experiment, ε, w, a, mechanism) with the paper's δ and ours;
- ``figure2_agreement.md``: per cell the paper's best mechanism(s) and ours, the share of cells where
  they agree (exactly, and within 10% as in the paper's baseline-supremacy reading), the same share at
  every period s (the paper says s is not decisive, §5.1.1), and the largest differences;
- ``--images DIR``: ``schaeler2022-figure2a.png`` and ``-figure2b.png``, the paper's numbers redrawn
  (left) beside ours (right) in the paper's layout.

    python benchmarks/schaeler_figure2.py bench-paper.sqlite --out results/schaeler2022/paper-grid \\
        --images docs/images
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from budgetcheck.bench.config import ArtificialStream
from budgetcheck.bench.report import stored_benchmark, summarize
from budgetcheck.bench.store import ResultStore

PAPER_CSV = Path(__file__).resolve().parent.parent / "results" / "schaeler2022" / "paper_figure2.csv"
SEASON = 80  # Figure 2's period
TIE = 0.005  # the workbook rounds δ to two decimals: "1" marks every mechanism within 0.5% of the best
NEAR = 0.10  # the paper's "among the best" (baseline supremacy) margin, as in ``bench report``
EXPERIMENTS = ("vary-epsilon", "vary-w")

# (experiment, ε, w, amplitude) -> mechanism -> value
Cells = dict[tuple[str, float, int, int], dict[str, float]]


def experiments_of(epsilon: float, w: int) -> list[str]:
    """Which of Figure 2's experiments a setting belongs to: (a) ε varies at w = 120, (b) w varies at ε = 1;
    (ε = 1, w = 120) is in both."""
    out = []
    if w == 120:
        out.append("vary-epsilon")
    if epsilon == 1.0:
        out.append("vary-w")
    return out


def load_paper(path: Path = PAPER_CSV) -> Cells:
    """The transcribed δ_MAE of Figure 2, keyed like :func:`load_ours_by_season`; each cell's mechanisms
    in the paper's panel order (the file's order)."""
    cells: Cells = defaultdict(dict)
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            key = (row["experiment"], float(row["epsilon"]), int(row["w"]), int(row["amplitude"]))
            cells[key][row["mechanism"]] = float(row["delta_mae"])
    return dict(cells)


def load_ours_by_season(results: Path, mechanisms: Sequence[str]) -> dict[int, Cells]:
    """Our mean MAE of the given mechanisms per period s and Figure 2 cell (length-1000 streams only:
    the paper's length; the growth of the file is whatever it ran with)."""
    if not results.is_file():
        raise SystemExit(f"results={str(results)!r}: no such file")
    with ResultStore(results) as store:
        streams, _runs, _seed, _bound = stored_benchmark(store)
        summaries = summarize(store)
    out: dict[int, Cells] = defaultdict(lambda: defaultdict(dict))
    for summary in summaries:
        cell = summary.cell
        spec = streams.get(cell.stream)
        if not isinstance(spec, ArtificialStream) or cell.mechanism not in mechanisms:
            continue
        for experiment in experiments_of(cell.epsilon, cell.w):
            key = (experiment, cell.epsilon, cell.w, int(spec.amplitude))
            out[spec.season][key][cell.mechanism] = summary.mae_mean
    return {s: dict(c) for s, c in out.items()}


def describe(results: Path) -> str:
    """What a results file ran with that changes Figure 2: Algorithm 2's growth, the MRE bound γ, the runs."""
    with ResultStore(results) as store:
        streams, runs, _seed, bound = stored_benchmark(store)
    growths = sorted({s.growth for s in streams.values() if isinstance(s, ArtificialStream)})
    return f"growth {', '.join(f'{g:g}' for g in growths)}, γ = {bound:g}, {runs} runs"


def deltas(maes: Cells) -> Cells:
    """δ_MAE (§5.1): each mechanism's MAE over the smallest of its cell."""
    out: Cells = {}
    for key, by_mechanism in maes.items():
        best = min(by_mechanism.values())
        out[key] = {m: v / best for m, v in by_mechanism.items()}
    return out


def implied_mae(paper: Cells) -> Cells:
    """The paper's mean MAE recovered from its δ: Uniform spends ε/w at every timestamp and artificial
    streams are not truncated, so Uniform's MAE is w/ε (to within 0.3% over 100 runs × 1,000 steps) and
    every mechanism's MAE is δ_m · (w/ε) / δ_Uniform."""
    return {
        key: {m: d * (key[2] / key[1]) / cell["Uniform"] for m, d in cell.items()}
        for key, cell in paper.items()
        if "Uniform" in cell
    }


@attrs.frozen
class CellAgreement:
    """One Figure 2 cell: the paper's best mechanism(s) (δ ≤ 1 + TIE), ours, and each one's δ in the other."""

    experiment: str
    epsilon: float
    w: int
    amplitude: int
    paper_best: tuple[str, ...]
    our_best: str
    our_best_in_paper: float  # the paper's δ of our best mechanism
    paper_best_in_ours: float  # our δ of the paper's (first) best mechanism

    @property
    def agrees(self) -> bool:
        """Our best mechanism is one the paper marks best."""
        return self.our_best in self.paper_best

    @property
    def near(self) -> bool:
        """Our best mechanism is within 10% of the best in the paper's numbers."""
        return self.our_best_in_paper <= 1.0 + NEAR


def agreement(paper: Cells, ours_delta: Cells) -> list[CellAgreement]:
    """Every cell that both have, compared over the mechanisms both have."""
    out = []
    for key in sorted(paper, key=lambda k: (EXPERIMENTS.index(k[0]), k[1], k[2], k[3])):
        if key not in ours_delta:
            continue
        common = sorted(set(paper[key]) & set(ours_delta[key]))
        if not common:
            continue
        p_low = min(paper[key][m] for m in common)
        o_low = min(ours_delta[key][m] for m in common)
        p = {m: paper[key][m] / p_low for m in common}
        o = {m: ours_delta[key][m] / o_low for m in common}
        paper_best = tuple(m for m in common if p[m] <= 1.0 + TIE)
        our_best = min(common, key=lambda m: o[m])
        out.append(CellAgreement(*key, paper_best, our_best, p[our_best], o[paper_best[0]]))
    return out


@attrs.frozen
class Difference:
    """One mechanism in one cell: the paper's δ and ours, and the factor between them (≥ 1)."""

    experiment: str
    epsilon: float
    w: int
    amplitude: int
    mechanism: str
    paper: float
    ours: float

    @property
    def factor(self) -> float:
        return max(self.ours / self.paper, self.paper / self.ours)


def differences(paper: Cells, ours_delta: Cells) -> list[Difference]:
    """Every (cell, mechanism) both have, δ taken over the mechanisms both have, largest factor first."""
    out = []
    for key in paper:
        common = sorted(set(paper[key]) & set(ours_delta.get(key, {})))
        if not common:
            continue
        p_low = min(paper[key][m] for m in common)
        o_low = min(ours_delta[key][m] for m in common)
        out += [Difference(*key, m, paper[key][m] / p_low, ours_delta[key][m] / o_low) for m in common]
    return sorted(out, key=lambda d: (-d.factor, d.mechanism, d.experiment, d.epsilon, d.w, d.amplitude))


def baseline_supremacy(cells: Cells) -> int:
    """How many cells have Uniform or Sample within 10% of the best (§5.1.2: "either Sample or Uniform is
    among the mechanisms with the smallest MAE for almost every combination of parameters")."""
    return sum(
        min(cell.get("Uniform", math.inf), cell.get("Sample", math.inf)) <= (1.0 + NEAR) * min(cell.values())
        for cell in cells.values()
    )


def _setting(experiment: str, epsilon: float, w: int) -> str:
    return f"ε = {epsilon:g}" if experiment == "vary-epsilon" else f"w = {w}"


def _share(count: int, total: int) -> str:
    return f"{count} of {total} ({100 * count / total:.0f}%)" if total else "0 of 0"


def agreement_markdown(
    rows: Sequence[CellAgreement],
    by_season: Mapping[int, Sequence[CellAgreement]],
    diffs: Sequence[Difference],
    top: int,
    mae_ratios: Mapping[str, Sequence[float]] | None = None,
    supremacy: tuple[int, int] | None = None,
    ours: str = "",
) -> str:
    """The agreement table, the shares, the per-period shares and the ``top`` largest differences."""
    exact = sum(r.agrees for r in rows)
    near = sum(r.near for r in rows)
    lines = [
        "# Figure 2 (δ_MAE, s = 80): the paper's best mechanism against ours",
        "",
        "Paper: Schäler et al. 2022, §5.1, Figure 2 (a) vary ε at w = 120, (b) vary w at ε = 1; numbers from the",
        "authors' workbook `figures/vldb-reproducability.xlsx` (sheets fig_2a, fig_2b), transcribed in",
        "`paper_figure2.csv`. δ over the paper's nine mechanisms. A cell lists the paper's best (every",
        "mechanism the workbook shows as 1.00) / ours; ✓ ours is one of the paper's best, ≈ ours is within",
        "10% of the best in the paper's numbers, ✗ otherwise.",
        *([f"Ours: {ours}."] if ours else []),
        "",
        f"- best mechanism agrees: **{_share(exact, len(rows))}** cells",
        f"- our best within 10% of the paper's best (in the paper's numbers): **{_share(near, len(rows))}** cells",
    ]
    if supremacy is not None:
        lines.append(
            f"- a baseline (Uniform or Sample) within 10% of the best (§5.1.2): "
            f"paper {_share(supremacy[0], len(rows))}, ours {_share(supremacy[1], len(rows))} cells"
        )
    for season, season_rows in sorted(by_season.items()):
        if season != SEASON:
            agree = sum(r.agrees for r in season_rows)
            lines.append(
                f"- our streams of period s = {season} against the paper's s = 80: {_share(agree, len(season_rows))}"
            )
    amplitudes = sorted({r.amplitude for r in rows})
    for experiment in EXPERIMENTS:
        part = [r for r in rows if r.experiment == experiment]
        if not part:
            continue
        lines += ["", f"## ({'ab'[EXPERIMENTS.index(experiment)]}) {experiment}", ""]
        lines.append("| setting | " + " | ".join(f"a = {a:,}" for a in amplitudes) + " |")
        lines.append("|---|" + "---|" * len(amplitudes))
        for setting in sorted({(r.epsilon, r.w) for r in part}):
            cells = {r.amplitude: r for r in part if (r.epsilon, r.w) == setting}
            texts = []
            for a in amplitudes:
                r = cells.get(a)
                if r is None:
                    texts.append("—")
                    continue
                mark = "✓" if r.agrees else ("≈" if r.near else "✗")
                texts.append(f"{'/'.join(r.paper_best)} / {r.our_best} {mark}")
            lines.append(f"| {_setting(experiment, *setting)} | " + " | ".join(texts) + " |")
    lines += [
        "",
        f"## The {top} largest differences in δ_MAE (factor between the paper's δ and ours)",
        "",
        "| experiment | setting | a | mechanism | paper δ | our δ | factor |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in diffs[:top]:
        lines.append(
            f"| {d.experiment} | {_setting(d.experiment, d.epsilon, d.w)} | {d.amplitude:,} | {d.mechanism} | "
            f"{d.paper:.4g} | {d.ours:.4g} | {d.factor:.3g} |"
        )
    by_mechanism: dict[str, list[Difference]] = defaultdict(list)
    for d in diffs:
        by_mechanism[d.mechanism].append(d)
    lines += [
        "",
        "## Per mechanism: median log10(our δ / paper δ) (> 0: ours further from the best), and its largest difference",
        "",
        "| mechanism | cells | median log10 ratio | cells within 2× | largest difference (paper δ → our δ) "
        "| median our MAE / paper's MAE |",
        "|---|---|---|---|---|---|",
    ]
    for m in sorted(by_mechanism):
        logs = np.array([math.log10(d.ours / d.paper) for d in by_mechanism[m]])
        worst = by_mechanism[m][0]  # diffs are sorted largest first
        where = f"{worst.experiment} {_setting(worst.experiment, worst.epsilon, worst.w)}, a = {worst.amplitude:,}"
        lines.append(
            f"| {m} | {logs.size} | {np.median(logs):+.2f} | {int((np.abs(logs) <= math.log10(2)).sum())} | "
            f"{where}: {worst.paper:.4g} → {worst.ours:.4g} | {_median_ratio((mae_ratios or {}).get(m, ()))} |"
        )
    lines += [
        "",
        "The paper's MAE is recovered from its δ as δ_m · (w/ε) / δ_Uniform (Uniform's MAE is w/ε on the",
        "untruncated artificial streams).",
    ]
    return "\n".join(lines) + "\n"


def _median_ratio(values: Sequence[float]) -> str:
    return f"{float(np.median(values)):.2f}" if len(values) else "—"


def mae_ratios(paper: Cells, ours_mae: Cells) -> dict[str, list[float]]:
    """Per mechanism, our mean MAE over the paper's (recovered by :func:`implied_mae`) in every cell."""
    implied = implied_mae(paper)
    out: dict[str, list[float]] = defaultdict(list)
    for key, cell in implied.items():
        for m, value in cell.items():
            if m in ours_mae.get(key, {}):
                out[m].append(ours_mae[key][m] / value)
    return dict(out)


def write_comparison_csv(paper: Cells, ours_mae: Cells, path: Path) -> None:
    """Every (cell, mechanism) of the paper: its δ and MAE (recovered) and ours (empty where we have none)."""
    ours_delta = deltas(ours_mae)
    implied = implied_mae(paper)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(
            [
                "experiment",
                "epsilon",
                "w",
                "amplitude",
                "mechanism",
                "paper_delta_mae",
                "our_delta_mae",
                "paper_mae",
                "our_mae",
            ]
        )
        for key in sorted(paper, key=lambda k: (EXPERIMENTS.index(k[0]), k[1], k[2], k[3])):
            for m in sorted(paper[key]):
                ours = ours_delta.get(key, {}).get(m)
                mae = ours_mae.get(key, {}).get(m)
                writer.writerow(
                    [
                        key[0],
                        f"{key[1]:g}",
                        key[2],
                        key[3],
                        m,
                        f"{paper[key][m]:.2f}",
                        "" if ours is None else f"{ours:.4g}",
                        f"{implied[key][m]:.4g}" if key in implied else "",
                        "" if mae is None else f"{mae:.4g}",
                    ]
                )


# -- the figure ------------------------------------------------------------------------------------

DELTA_TOP = 1000.0  # colour scale 1 .. 1000 (log); larger cells are labelled "1k+"


def _cell_text(value: float) -> str:
    if value >= DELTA_TOP:
        return "1k+"
    return f"{value:.2f}" if value < 9.995 else f"{value:.0f}"


def figure2(paper: Cells, ours_delta: Cells, experiment: str, ours: str = "") -> Any:
    """One part of Figure 2 in the paper's form, the paper's numbers (left block) beside ours (right):
    a heat map per mechanism, amplitude a across, ε or w up, green (δ = 1, the best) to red (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    keys = [k for k in paper if k[0] == experiment]
    amplitudes = sorted({k[3] for k in keys})
    settings = sorted({(k[1], k[2]) for k in keys})
    mechanisms = list(dict.fromkeys(m for k in keys for m in paper[k]))  # the paper's panel order
    norm = LogNorm(vmin=1.0, vmax=DELTA_TOP)
    cmap = plt.get_cmap("RdYlGn_r").with_extremes(bad="#dddddd")
    axis = "ε" if experiment == "vary-epsilon" else "w"
    figure = plt.figure(figsize=(15.5, 0.42 * len(settings) * 3 + 3.2), layout="constrained")
    top, bottom = np.asarray(figure.subfigures(2, 1, height_ratios=[12, 1]), dtype=object).ravel()
    halves = np.asarray(top.subfigures(1, 2, wspace=0.04), dtype=object).ravel()
    image = None
    for half, (label, source) in zip(
        halves,
        (
            ("Schäler et al. (authors' numbers)", paper),
            (f"budgetcheck ({ours})" if ours else "budgetcheck", ours_delta),
        ),
    ):
        half.suptitle(label, fontsize=11, fontweight="bold")
        axes = half.subplots(3, 3, squeeze=False)
        for index, mechanism in enumerate(mechanisms):
            ax = axes.flat[index]
            grid = np.array(
                [
                    [source.get((experiment, e, w, a), {}).get(mechanism, np.nan) for a in amplitudes]
                    for e, w in settings
                ]
            )
            image = ax.imshow(np.minimum(grid, DELTA_TOP), cmap=cmap, norm=norm, aspect="auto", origin="upper")
            ax.set_title(mechanism, fontsize=9, pad=2)
            ax.set_xticks(range(len(amplitudes)), [f"{a:,}" for a in amplitudes], fontsize=7)
            ax.set_yticks(range(len(settings)), [f"{e:g}" if axis == "ε" else str(w) for e, w in settings], fontsize=7)
            ax.tick_params(length=2, pad=1.5, labelleft=index % 3 == 0)
            if index % 3 == 0:
                ax.set_ylabel(axis, fontsize=9)
            if index >= 6:
                ax.set_xlabel("amplitude a", fontsize=8)
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    red, green, blue, _ = cmap(norm(min(value, DELTA_TOP)))
                    dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                    ax.text(
                        j,
                        i,
                        _cell_text(value),
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "black",
                        fontweight="bold" if value <= 1.0 + TIE else "normal",
                    )
    bar = bottom.add_axes((0.3, 0.55, 0.4, 0.25))
    colorbar = bottom.colorbar(image, cax=bar, orientation="horizontal")
    ticks = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    colorbar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks], fontsize=7)
    colorbar.minorticks_off()
    colorbar.set_label("δ_MAE = MAE / smallest MAE of the nine mechanisms in the cell (1 = best, bold)", fontsize=8)
    part = "(a) vary ε at w = 120" if experiment == "vary-epsilon" else "(b) vary w at ε = 1"
    figure.suptitle(f"Figure 2{part[1]}: δ_MAE heat map, {part[4:]}, period s = {SEASON}", fontsize=12)
    return figure


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results file of `bench --paper`")
    parser.add_argument("--out", type=Path, required=True, help="directory for the CSV and Markdown")
    parser.add_argument("--paper", type=Path, default=PAPER_CSV, help="the transcribed paper numbers")
    parser.add_argument("--images", type=Path, help="directory for the PNG figures (none when omitted)")
    parser.add_argument("--top", type=int, default=15, help="how many of the largest differences to list")
    parser.add_argument("--name", default="schaeler2022-figure2", help="the PNGs' name, 'a.png' or 'b.png' appended")
    args = parser.parse_args(argv)
    paper = load_paper(args.paper)
    mechanisms = sorted({m for cell in paper.values() for m in cell})
    seasons = load_ours_by_season(args.results, mechanisms)
    if SEASON not in seasons:
        raise SystemExit(f"results={str(args.results)!r} has no artificial stream of period s = {SEASON}")
    ours = deltas(seasons[SEASON])
    rows = agreement(paper, ours)
    by_season = {s: agreement(paper, deltas(c)) for s, c in seasons.items()}
    diffs = differences(paper, ours)
    args.out.mkdir(parents=True, exist_ok=True)
    common = {k: v for k, v in paper.items() if k in ours}
    supremacy = (baseline_supremacy(common), baseline_supremacy({k: ours[k] for k in common}))
    label = describe(args.results)
    text = agreement_markdown(rows, by_season, diffs, args.top, mae_ratios(paper, seasons[SEASON]), supremacy, label)
    (args.out / "figure2_agreement.md").write_text(text, encoding="utf-8")
    write_comparison_csv(paper, seasons[SEASON], args.out / "figure2_comparison.csv")
    print(text)
    if args.images is not None:
        import matplotlib.pyplot as plt

        args.images.mkdir(parents=True, exist_ok=True)
        for experiment, suffix in zip(EXPERIMENTS, "ab"):
            figure = figure2(paper, ours, experiment, label)
            target = args.images / f"{args.name}{suffix}.png"
            figure.savefig(target, dpi=90)
            plt.close(figure)
            print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
