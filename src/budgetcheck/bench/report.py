"""What a results file says: per-cell statistics, δ_MAE, the baseline-supremacy check and
Uniform's w/ε check (Schäler et al. 2022, §4.4, §5.1).

Findings check: for every (stream, ε, w) the best mechanism by mean MAE, the better baseline
(Uniform or Sample), and whether that baseline is within 10% of the best, i.e. whether the
paper's "baseline supremacy" holds on our implementation. Uniform spends ε/w at every timestamp,
so on an artificial stream (no truncation) its expected MAE is w/ε exactly; the check allows
five standard errors (|Lap(b)| has standard deviation b, so the mean of n draws has b/√n).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np

from budgetcheck.bench.config import ArtificialStream, Benchmark, Cell, RealStream, Setting, StreamSpec
from budgetcheck.bench.metrics import deterioration
from budgetcheck.bench.store import ResultStore

BASELINES = ("Uniform", "Sample")
SUPREMACY_MARGIN = 0.10


@attrs.frozen
class CellSummary:
    """Mean and 0.95-quantile of MAE and MRE over a cell's runs, and the spread of the cell's
    per-stream mean MAE over its ``streams`` random streams (std with ddof = 1; 0 for one stream)."""

    cell: Cell
    runs: int
    mae_mean: float
    mae_q95: float
    mre_mean: float
    mre_q95: float
    streams: int = 1
    stream_mae_std: float = 0.0
    stream_mae_min: float = math.nan
    stream_mae_max: float = math.nan


@attrs.frozen
class Finding:
    """The best mechanism of one (stream, ε, w) and the better baseline against it."""

    stream: str
    epsilon: float
    w: int
    best: str
    best_mae: float
    baseline: str | None
    baseline_mae: float

    @property
    def supremacy(self) -> bool:
        """A baseline is within 10% of the best mechanism's mean MAE."""
        return self.baseline is not None and self.baseline_mae <= (1.0 + SUPREMACY_MARGIN) * self.best_mae


@attrs.frozen
class UniformCheck:
    """Uniform's mean MAE on an artificial stream against its expectation w/ε."""

    cell: Cell
    mae: float
    expected: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return abs(self.mae - self.expected) <= self.tolerance


def summarize(store: ResultStore) -> list[CellSummary]:
    """Per-cell statistics of every stored cell."""
    per_cell: dict[Cell, list[tuple[float, float]]] = defaultdict(list)
    for mechanism, stream, epsilon, w, _run, run_mae, run_mre in store.rows():
        per_cell[Cell(mechanism, stream, epsilon, w)].append((run_mae, run_mre))
    per_stream = store.stream_maes()
    out = []
    for cell in sorted(per_cell):
        values = np.array(per_cell[cell])
        mae, mre = values[:, 0].astype(np.float64), values[:, 1].astype(np.float64)
        streams = per_stream.get(cell, np.array([mae.mean()]))
        spread = float(streams.std(ddof=1)) if streams.size > 1 else 0.0
        out.append(
            CellSummary(
                cell,
                len(values),
                float(mae.mean()),
                float(np.quantile(mae, 0.95)),
                float(mre.mean()),
                float(np.quantile(mre, 0.95)),
                int(streams.size),
                spread,
                float(streams.min()),
                float(streams.max()),
            )
        )
    return out


def columns(summaries: Sequence[CellSummary]) -> dict[tuple[str, float, int], dict[str, CellSummary]]:
    """Summaries grouped by (stream, ε, w), then by mechanism."""
    grouped: dict[tuple[str, float, int], dict[str, CellSummary]] = defaultdict(dict)
    for summary in summaries:
        c = summary.cell
        grouped[(c.stream, c.epsilon, c.w)][c.mechanism] = summary
    return dict(sorted(grouped.items()))


def deteriorations(summaries: Sequence[CellSummary]) -> dict[tuple[str, float, int], dict[str, float]]:
    """δ_MAE of every mechanism in every (stream, ε, w)."""
    out = {}
    for key, by_mechanism in columns(summaries).items():
        names = sorted(by_mechanism)
        ratios = deterioration(np.array([by_mechanism[m].mae_mean for m in names]))
        out[key] = dict(zip(names, map(float, ratios)))
    return out


def findings(summaries: Sequence[CellSummary]) -> list[Finding]:
    """The baseline-supremacy check of every (stream, ε, w)."""
    out = []
    for (stream, epsilon, w), by_mechanism in columns(summaries).items():
        best = min(by_mechanism.values(), key=lambda s: s.mae_mean)
        baselines = [by_mechanism[b] for b in BASELINES if b in by_mechanism]
        baseline = min(baselines, key=lambda s: s.mae_mean) if baselines else None
        out.append(
            Finding(
                stream,
                epsilon,
                w,
                best.cell.mechanism,
                best.mae_mean,
                baseline.cell.mechanism if baseline else None,
                baseline.mae_mean if baseline else math.nan,
            )
        )
    return out


def uniform_checks(summaries: Sequence[CellSummary], streams: Mapping[str, StreamSpec]) -> list[UniformCheck]:
    """Uniform's MAE against w/ε on every artificial stream (d = 1, no truncation)."""
    out = []
    for summary in summaries:
        c = summary.cell
        stream = streams.get(c.stream)
        if c.mechanism != "Uniform" or not isinstance(stream, ArtificialStream):
            continue
        expected = c.w / c.epsilon
        draws = summary.runs * stream.length
        out.append(UniformCheck(c, summary.mae_mean, expected, 5.0 * expected / math.sqrt(draws)))
    return out


def stored_benchmark(store: ResultStore) -> tuple[dict[str, StreamSpec], int, int, float]:
    """The stream definitions, runs, seed and γ a results file was written with."""
    meta = store.meta()
    streams: dict[str, StreamSpec] = {}
    for key, value in meta.items():
        if key.startswith("stream:"):
            spec = json.loads(value)
            kind = spec.pop("kind")
            streams[key[len("stream:") :]] = ArtificialStream(**spec) if kind == "artificial" else RealStream(**spec)
    return streams, int(meta.get("runs", "1")), int(meta.get("seed", "0")), float(meta.get("mre_bound", "0.001"))


def rebuild(store: ResultStore, mechanisms: Iterable[str]) -> Benchmark:
    """A benchmark that re-runs stored cells exactly (same streams, runs, seed and γ)."""
    streams, runs, seed, bound = stored_benchmark(store)
    settings = {(c.epsilon, c.w) for c in store.done()}
    draws = int(store.meta().get("streams_per_cell", "1"))
    grid = [Setting(e, w) for e, w in settings]
    return Benchmark(tuple(mechanisms), tuple(streams.values()), grid, runs, bound, seed, streams_per_cell=draws)


# -- text ------------------------------------------------------------------------------------------


def mae_table(summaries: Sequence[CellSummary]) -> str:
    """Mean MAE per (stream, ε, w) and mechanism, the best of each row marked with *."""
    grouped = columns(summaries)
    names = sorted({s.cell.mechanism for s in summaries})
    width = max(9, *(len(n) + 1 for n in names))
    lines = [f"{'stream':<16}{'eps':>5}{'w':>5}  " + "".join(f"{n:>{width}}" for n in names)]
    for (stream, epsilon, w), by_mechanism in grouped.items():
        best = min(s.mae_mean for s in by_mechanism.values())
        cells = []
        for name in names:
            if name not in by_mechanism:
                cells.append(f"{'-':>{width}}")
                continue
            value = by_mechanism[name].mae_mean
            mark = "*" if value == best else " "
            cells.append(f"{_fmt(value) + mark:>{width}}")
        lines.append(f"{stream:<16}{epsilon:>5g}{w:>5}  " + "".join(cells))
    return "\n".join(lines)


def spread_table(summaries: Sequence[CellSummary]) -> str:
    """One line per cell run on several streams: its per-stream mean MAE's std, min, max and max/min."""
    shown = [s for s in summaries if s.streams >= 2]
    name = max([12] + [len(s.cell.mechanism) + 2 for s in shown])  # a long name never runs into the stream
    lines = [
        f"{'mechanism':<{name}}{'stream':<16}{'eps':>5}{'w':>5}{'streams':>8}{'MAE':>10}{'std':>10}{'min':>10}"
        f"{'max':>10}{'max/min':>9}"
    ]
    for s in shown:
        c = s.cell
        ratio = s.stream_mae_max / s.stream_mae_min if s.stream_mae_min > 0 else math.inf
        spread = f"{_fmt(s.stream_mae_std):>10}{_fmt(s.stream_mae_min):>10}{_fmt(s.stream_mae_max):>10}{ratio:>9.2f}"
        head = f"{c.mechanism:<{name}}{c.stream:<16}{c.epsilon:>5g}{c.w:>5}{s.streams:>8}{_fmt(s.mae_mean):>10}"
        lines.append(head + spread)
    return "\n".join(lines)


def supremacy_table(found: Sequence[Finding]) -> str:
    """One line per (stream, ε, w): best mechanism, better baseline, ratio, holds?"""
    best = max([10] + [len(f.best) + 1 for f in found])
    lines = [
        f"{'stream':<16}{'eps':>5}{'w':>5}  {'best':<{best}}{'MAE':>10}  "
        f"{'baseline':<9}{'MAE':>10}{'ratio':>7}  supremacy"
    ]
    for f in found:
        ratio = f.baseline_mae / f.best_mae if f.baseline else math.nan
        lines.append(
            f"{f.stream:<16}{f.epsilon:>5g}{f.w:>5}  {f.best:<{best}}{_fmt(f.best_mae):>10}  {f.baseline or '-':<9}"
            f"{_fmt(f.baseline_mae):>10}{ratio:>7.2f}  {'yes' if f.supremacy else 'NO'}"
        )
    holds = sum(f.supremacy for f in found)
    lines.append(f"baseline within {SUPREMACY_MARGIN:.0%} of the best in {holds} of {len(found)} (stream, eps, w)")
    return "\n".join(lines)


def uniform_table(checks: Sequence[UniformCheck]) -> str:
    bad = [c for c in checks if not c.ok]
    lines = [
        f"Uniform MAE vs w/eps on artificial streams: {len(checks) - len(bad)} of {len(checks)} within 5 standard "
        "errors"
    ]
    for check in bad:
        lines.append(
            f"  OFF: {check.cell.key}: MAE {check.mae:.4g}, expected {check.expected:.4g} ± {check.tolerance:.3g}"
        )
    return "\n".join(lines)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.4g}"


def write_summary_csv(
    summaries: Sequence[CellSummary], deltas: dict[tuple[str, float, int], dict[str, float]], path: Path
) -> None:
    """Per-cell statistics and δ_MAE as CSV."""
    with path.open("w") as handle:
        handle.write("mechanism,stream,epsilon,w,runs,mae_mean,mae_q95,mre_mean,mre_q95,delta_mae\n")
        for s in summaries:
            c = s.cell
            delta = deltas[(c.stream, c.epsilon, c.w)][c.mechanism]
            handle.write(
                f"{c.mechanism},{c.stream},{c.epsilon!r},{c.w},{s.runs},{s.mae_mean!r},{s.mae_q95!r},"
                f"{s.mre_mean!r},{s.mre_q95!r},{delta!r}\n"
            )
