"""Table 6 and the baseline-supremacy verdict of ``bench report`` (Schäler et al. 2022, §5.1.2, §5.3),
recomputed here from the results file's raw rows and the streams' definitions."""

from __future__ import annotations

import csv
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from budgetcheck.bench import ArtificialStream, Benchmark, RealStream, ResultStore, Setting, run_benchmark
from budgetcheck.bench.report import findings, stored_benchmark, summarize
from budgetcheck.bench.stream_table import write_stream_table, write_supremacy_table

STREAMS = [ArtificialStream(20, 10.0, 60), ArtificialStream(40, 1000.0, 60), RealStream("lung-deaths")]
SETTINGS = [Setting(1.0, 10), Setting(0.5, 10), Setting(1.0, 20)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("bench")
    grid = Benchmark(("Uniform", "Sample", "BD"), STREAMS, SETTINGS, runs=2, seed=3, streams_per_cell=2)
    results = base / "r.sqlite"
    run_benchmark(grid, results, progress=False)
    out = base / "report"
    with ResultStore(results) as store:  # the writers bench report calls (the whole report: test_bench.py)
        summaries = summarize(store)
        streams, _runs, seed, _bound = stored_benchmark(store)
    found = findings(summaries)
    written = write_stream_table(streams, found, seed, 2, out / "table6")
    written += write_supremacy_table(found, out / "supremacy")
    assert {p.name for p in written} == {"table6.csv", "table6.md", "supremacy.csv", "supremacy.md"}
    return results, out


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _mean_maes(results: Path) -> dict[tuple[str, float, int], dict[str, float]]:
    per: dict[tuple[str, float, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with sqlite3.connect(results) as db:
        for mechanism, stream, epsilon, w, mae in db.execute("SELECT mechanism, stream, epsilon, w, mae FROM results"):
            per[(stream, epsilon, w)][mechanism].append(mae)
    return {key: {m: float(np.mean(v)) for m, v in by.items()} for key, by in per.items()}


def test_table6_has_the_papers_columns_and_the_properties_of_the_true_streams(report: tuple[Path, Path]) -> None:
    _results, out = report
    rows = {row["stream"]: row for row in _csv(out / "table6.csv")}
    assert set(rows) == {s.name for s in STREAMS}
    md = (out / "table6.md").read_text()
    for column in ("dim", "length p", "q_min", "q_max", "90% quantile", "amplitude a", "supremacy"):
        assert f" {column} |" in md
    for spec in STREAMS:
        draws = 2 if isinstance(spec, ArtificialStream) else 1
        data = np.stack([spec.data(3, k) for k in range(draws)])  # (draws, T, d)
        row = rows[spec.name]
        assert int(row["dim"]) == data.shape[2] and int(row["length p"]) == data.shape[1]
        assert int(row["draws"]) == draws
        assert float(row["q_min"]) == data.min() and float(row["q_max"]) == data.max()
        assert float(row["amplitude a"]) == pytest.approx(data.max() - data.min())
        flat = sorted(data.ravel().tolist())  # the 90% quantile by linear interpolation, written out
        position = 0.9 * (len(flat) - 1)
        low = int(position)
        expected = flat[low] + (position - low) * (flat[min(low + 1, len(flat) - 1)] - flat[low])
        assert float(row["90% quantile"]) == pytest.approx(expected, rel=1e-12)


def test_supremacy_verdicts_follow_the_stored_maes(report: tuple[Path, Path]) -> None:
    results, out = report
    maes = _mean_maes(results)
    rows = _csv(out / "supremacy.csv")
    assert len(rows) == len(maes) == len(STREAMS) * len(SETTINGS)
    holds_per_stream: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        by = maes[(row["stream"], float(row["epsilon"]), int(row["w"]))]
        best = min(by.values())
        baseline = min(by["Uniform"], by["Sample"])
        assert by[row["best"]] == best and float(row["best MAE"]) == pytest.approx(best)
        assert float(row["baseline MAE"]) == pytest.approx(baseline)
        holds = baseline <= 1.1 * best
        assert row["supremacy"] == ("yes" if holds else "no")
        holds_per_stream[row["stream"]].append(holds)
    table6 = {row["stream"]: row for row in _csv(out / "table6.csv")}
    for stream, holds in holds_per_stream.items():
        row = table6[stream]
        assert int(row["settings"]) == len(holds) and int(row["baseline within 10%"]) == sum(holds)
        expected = "holds" if all(holds) else "fails" if not any(holds) else "mixed"
        assert row["supremacy"] == expected
