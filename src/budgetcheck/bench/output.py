"""``budgetcheck bench report``: the text report, the summary CSV and the figures of a results file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from budgetcheck.bench import figures
from budgetcheck.bench.config import ArtificialStream, Cell
from budgetcheck.bench.report import (
    BASELINES,
    CellSummary,
    deteriorations,
    findings,
    mae_table,
    rebuild,
    spread_table,
    stored_benchmark,
    summarize,
    supremacy_table,
    uniform_checks,
    uniform_table,
    write_summary_csv,
)
from budgetcheck.bench.runner import run_releases, stream_data
from budgetcheck.bench.store import ResultStore
from budgetcheck.bench.stream_table import write_stream_table, write_supremacy_table
from budgetcheck.ledger.errors import InvalidArgument


@attrs.frozen
class Report:
    """The report's text and the files written."""

    text: str
    files: tuple[Path, ...]
    uniform_ok: bool


def text_report(results: str | Path) -> tuple[str, bool]:
    """The MAE table, the baseline-supremacy table and Uniform's w/ε check of a results file."""
    path = Path(results)
    if not path.is_file():
        raise InvalidArgument(f"results={str(path)!r} is not a file")
    with ResultStore(path) as store:
        summaries = summarize(store)
        streams, _runs, _seed, _bound = stored_benchmark(store)
    if not summaries:
        raise InvalidArgument(f"results file {str(path)!r} holds no cells")
    checks = uniform_checks(summaries, streams)
    text = "\n\n".join(
        [
            "Mean MAE (* best of the row)",
            mae_table(summaries),
            "Baseline supremacy (is Uniform or Sample within 10% of the best?)",
            supremacy_table(findings(summaries)),
            uniform_table(checks),
        ]
    )
    if any(s.streams > 1 for s in summaries):
        text += "\n\nSpread of the mean MAE over each cell's streams\n" + spread_table(summaries)
    return text, all(c.ok for c in checks)


def write_report(results: str | Path, out: str | Path, *, figure_streams: int = 4) -> Report:
    """Write report.txt, summary.csv, table6 and supremacy (CSV, Markdown) and the figures (PNG, PDF) into ``out``."""
    text, uniform_ok = text_report(results)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "report.txt").write_text(text + "\n")
    files = [target / "report.txt"]
    with ResultStore(results) as store:
        summaries = summarize(store)
        streams, *_ = stored_benchmark(store)
        deltas = deteriorations(summaries)
        write_summary_csv(summaries, deltas, target / "summary.csv")
        files.append(target / "summary.csv")
        found = findings(summaries)
        _, _, seed, _ = stored_benchmark(store)
        draws = int(store.meta().get("streams_per_cell", "1"))
        files += write_stream_table(streams, found, seed, draws, target / "table6")
        files += write_supremacy_table(found, target / "supremacy")
        files += figures.heat_map(deltas, streams, target / "delta_mae")
        files += figures.error_curves(summaries, target / "error_vs_epsilon", vary="epsilon")
        files += figures.error_curves(summaries, target / "error_vs_w", vary="w")
        files += _releases(store, summaries, figure_streams, target / "releases")
    return Report(text, tuple(files), uniform_ok)


def _releases(store: ResultStore, summaries: Sequence[CellSummary], count: int, path: Path) -> list[Path]:
    """Re-run Uniform and Sample (deterministic: the stored seeds) on up to ``count`` streams."""
    benchmark = rebuild(store, BASELINES)
    settings = sorted({(s.cell.epsilon, s.cell.w) for s in summaries})
    setting = (1.0, 120) if (1.0, 120) in settings else settings[0]
    real = [s for s in benchmark.streams if not isinstance(s, ArtificialStream)]
    chosen = (real + [s for s in benchmark.streams if isinstance(s, ArtificialStream)])[:count]
    truth, released = {}, {}
    for stream in chosen:
        truth[stream.name] = stream_data(stream, benchmark.seed)
        released[stream.name] = {m: run_releases(benchmark, Cell(m, stream.name, *setting))[0] for m in BASELINES}
    return figures.releases_figure(truth, released, setting, path)
