"""Several random streams per artificial benchmark cell (issue 31, item 6): the streams are really
different draws, every run is scored against its own stream, the spread is stored and reported,
and the quick grid costs what it did with one stream."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import attrs
import numpy as np
import pytest
from click.testing import CliRunner
from numpy.typing import NDArray

from budgetcheck import GuardedStream, InvalidArgument, WindowLedger
from budgetcheck.bench import Benchmark, run_benchmark
from budgetcheck.bench.config import ArtificialStream, Setting, stable_seed
from budgetcheck.bench.report import summarize
from budgetcheck.bench.store import ResultStore
from budgetcheck.bench.streams import seasonal_stream
from budgetcheck.cli import main


@attrs.frozen
class Zeros:
    """Releases 0 everywhere and spends nothing: its MAE on a run is the mean of that run's true stream."""

    name: str = "Zeros"

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        return np.zeros((ledger.runs, stream.length, stream.dimensions))


def test_draws_are_distinct_reproducible_and_draw_zero_is_the_old_stream() -> None:
    spec = ArtificialStream(40, 100.0, 300)
    draws = [spec.data(7, k) for k in range(4)]
    for i in range(4):
        np.testing.assert_array_equal(draws[i], spec.data(7, i))
        for j in range(i):
            assert not np.array_equal(draws[i], draws[j]), (i, j)
    old = seasonal_stream(300, 40, 100.0, rng=np.random.default_rng(stable_seed(7, "stream", spec.name)))
    np.testing.assert_array_equal(draws[0], old)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_bad_draw_or_streams_per_cell_is_refused_by_name(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="draw="):
        ArtificialStream(40, 10.0, 50).data(0, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="streams_per_cell="):
        Benchmark(("Uniform",), [ArtificialStream(40, 10.0, 50)], [Setting(1.0, 10)], streams_per_cell=bad)
    with pytest.raises(InvalidArgument, match="streams_per_cell="):
        Benchmark.quick(streams_per_cell=bad)  # type: ignore[arg-type]


def test_every_run_is_scored_against_its_own_stream_and_the_spread_is_stored(tmp_path: Path) -> None:
    """With zero releases a run's MAE is its true stream's mean: the stored per-stream MAEs must be
    the draws' means in order, the cell's MAE their mean, the spread their std, min and max."""
    streams = [ArtificialStream(40, 10.0, 120), ArtificialStream(80, 1000.0, 120)]
    grid = Benchmark(
        ("test_bench_streams:Zeros", "Sample"),
        streams,
        [Setting(1.0, 20), Setting(0.5, 20)],
        runs=3,
        seed=4,
        streams_per_cell=5,
    )
    run_benchmark(grid, tmp_path / "r.sqlite", progress=False)
    with ResultStore(tmp_path / "r.sqlite") as store:
        stored = store.stream_maes()
        summaries = {s.cell: s for s in summarize(store)}
        assert store.meta()["streams_per_cell"] == "5"
    for spec in streams:
        expected = np.array([spec.data(4, k).mean() for k in range(5)])
        assert np.unique(expected).size == 5
        for epsilon in (1.0, 0.5):
            cell = next(
                c
                for c in summaries
                if c.mechanism == "test_bench_streams:Zeros" and c.stream == spec.name and c.epsilon == epsilon
            )
            np.testing.assert_allclose(stored[cell], expected, rtol=1e-12)
            s = summaries[cell]
            assert (s.streams, s.runs) == (5, 15)
            assert s.mae_mean == pytest.approx(expected.mean(), rel=1e-12)
            assert s.stream_mae_std == pytest.approx(expected.std(ddof=1), rel=1e-12)
            assert s.stream_mae_min == pytest.approx(expected.min())
            assert s.stream_mae_max == pytest.approx(expected.max())
    sample = [s for c, s in summaries.items() if c.mechanism == "Sample"]
    assert all(s.streams == 5 and s.stream_mae_std > 0 and s.stream_mae_min < s.stream_mae_max for s in sample)


def test_one_stream_per_cell_writes_the_old_identity_and_a_zero_spread(tmp_path: Path) -> None:
    grid = Benchmark(("Uniform",), [ArtificialStream(40, 10.0, 60)], [Setting(1.0, 10)], runs=4)
    assert "streams_per_cell" not in grid.identity()  # files written before the setting stay comparable
    run_benchmark(grid, tmp_path / "r.sqlite", progress=False)
    with ResultStore(tmp_path / "r.sqlite") as store:
        (summary,) = summarize(store)
    assert (summary.streams, summary.runs, summary.stream_mae_std) == (1, 4, 0.0)
    assert summary.stream_mae_min == summary.stream_mae_max == pytest.approx(summary.mae_mean)
    with pytest.raises(InvalidArgument, match="streams_per_cell"):
        run_benchmark(attrs.evolve(grid, streams_per_cell=2), tmp_path / "r.sqlite", progress=False)


def test_quick_grid_runs_as_many_runs_in_as_many_passes_as_with_one_stream() -> None:
    """The quick grid's cost: 4 streams × 5 runs = the 20 runs of one stream before, in the same passes."""
    quick, single = Benchmark.quick(), Benchmark.quick(streams_per_cell=1)
    assert (quick.streams_per_cell, quick.runs, single.runs) == (4, 5, 20)
    for spec in quick.streams:
        assert quick.draws(spec) * quick.runs == single.draws(spec) * single.runs == 20
    batches = {quick.batch(cell) for cell in quick.cells()}
    assert len(batches) == len({single.batch(cell) for cell in single.cells()})
    for batch in batches:
        assert len(batch.streams) * quick.draws(quick.stream(batch.streams[0])) * quick.runs * len(
            batch.epsilons
        ) == len(batch.streams) * 20 * len(batch.epsilons)


def test_cli_streams_per_cell_reports_the_spread(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["bench", "--quick", "--mechanism", "Sample", "--stream", "s40-a1000-p300", "--runs", "2", "--no-progress"]
    result = runner.invoke(main, base + ["--streams-per-cell", "3", "--results", str(tmp_path / "a.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    cells = json.loads(result.output)["cells"]
    assert len(cells) == 3 and all(c["streams"] == 3 and c["runs"] == 6 and c["stream_mae_std"] > 0 for c in cells)
    with sqlite3.connect(tmp_path / "a.sqlite") as db:
        rows = db.execute("SELECT epsilon, w, draw, runs FROM streams ORDER BY epsilon, w, draw").fetchall()
    assert len(rows) == 9 and {r[2] for r in rows} == {0, 1, 2} and {r[3] for r in rows} == {2}
    table = runner.invoke(main, base + ["--streams-per-cell", "3", "--results", str(tmp_path / "a.sqlite")])
    assert table.exit_code == 0, table.output
    assert "Spread of the mean MAE over each cell's streams" in table.output
    assert table.output.count("s40-a1000-p300") >= 3 + 3
    refused = runner.invoke(main, base + ["--streams-per-cell", "0", "--results", str(tmp_path / "b.sqlite")])
    assert refused.exit_code == 2 and "--streams-per-cell" in refused.output


def test_the_spread_table_keeps_a_long_mechanism_name_apart_from_its_stream(tmp_path: Path) -> None:
    """PeGaSusHierarchical, BDPanPrivate and module:attr names are longer than the old 12-character
    column: every row must still split into the mechanism, the stream and the figures."""
    from budgetcheck.bench.report import spread_table

    streams = [ArtificialStream(40, 10.0, 60)]
    grid = Benchmark(
        ("test_bench_streams:Zeros", "BDPanPrivate"), streams, [Setting(1.0, 10)], runs=2, streams_per_cell=2
    )
    run_benchmark(grid, tmp_path / "r.sqlite", progress=False)
    with ResultStore(tmp_path / "r.sqlite") as store:
        rows = spread_table(summarize(store)).splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == ["BDPanPrivate", "test_bench_streams:Zeros"]
    assert all(row.split()[1] == streams[0].name and len(row.split()) == 10 for row in rows)
