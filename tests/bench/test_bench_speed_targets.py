"""benchmarks/bench_speed.py's command line and its target lines (issue 45, item 2), on a tiny configuration.

Nothing here asserts a speed: only that the script takes --harness (or its variable), refuses a folder
that is not the harness, says when no harness was given and labels the recorded figure as such, and
prints every target with MET / NOT MET and, for a target missed, the profile of what remains.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import attrs
import pytest

from budgetcheck.bench import Benchmark
from budgetcheck.bench.config import Batch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    # the script imports its siblings as top-level modules, and tests/ has a plain_mechanisms of its own:
    # the siblings are imported from benchmarks/ and the other modules of those names put back after
    siblings = {path.stem for path in BENCHMARKS.glob("*.py")}
    shadowed = {name: sys.modules.pop(name) for name in siblings if name in sys.modules}
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("bench_speed")
    finally:
        sys.path.remove(str(BENCHMARKS))
        for name in siblings:
            sys.modules.pop(name, None)
        sys.modules.update(shadowed)


@pytest.fixture
def fake_checkout(tmp_path: Path) -> Path:
    """A folder laid out as the harness's checkout (only what parse_args looks at)."""
    (tmp_path / "src" / "experiment").mkdir(parents=True)
    (tmp_path / "src" / "experiment" / "DP_BENCH.java").write_text("class DP_BENCH {}\n")
    return tmp_path


def test_no_harness_by_default(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BUDGETCHECK_HARNESS", raising=False)
    args = bench.parse_args([])
    assert (args.quick, args.live, args.harness) == (False, False, None)
    assert bench.parse_args(["--quick"]).quick and bench.parse_args(["--live"]).live


def test_harness_from_the_flag_or_the_variable(
    bench: ModuleType, fake_checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BUDGETCHECK_HARNESS", raising=False)
    assert bench.parse_args(["--quick", "--harness", str(fake_checkout)]).harness == fake_checkout
    monkeypatch.setenv("BUDGETCHECK_HARNESS", str(fake_checkout))
    assert bench.parse_args([]).harness == fake_checkout


def test_a_folder_that_is_not_the_harness_is_refused_by_name(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BUDGETCHECK_HARNESS", raising=False)
    with pytest.raises(SystemExit, match=f"--harness {tmp_path}: not a checkout of https://github.com/chryenix"):
        bench.parse_args(["--harness", str(tmp_path)])


def test_the_driver_runs_the_nine_common_mechanisms(bench: ModuleType) -> None:
    java_harness = importlib.import_module("java_harness")
    source = java_harness.driver_source()
    for ours, java in java_harness.CLASSES.items():
        assert f'case "{ours}": return new {java}();' in source
    assert sorted(java_harness.CLASSES) == sorted(bench.PLAIN)  # the nine the plain versions cover
    assert "-XX:+DisableExplicitGC" in java_harness.JVM_FLAGS  # the tuned build the docstring states


def test_target_lines_say_met_or_not_met(bench: ModuleType) -> None:
    assert bench.Target("BD: ours / the harness", 0.4, 0.5, "x").line().rstrip().endswith(" MET")
    assert "NOT MET" in bench.Target("BD: ours / the harness", 0.6, 0.5, "x").line()
    slow = bench.Target("BD live", 30_000.0, 39_000.0, " steps/s", at_most=False, note="idle")
    assert "30,000 steps/s" in slow.line() and ">= 39,000 steps/s" in slow.line() and "NOT MET" in slow.line()
    assert bench.Target("PBD", 1_200.0, 1_109.0, " steps/s", at_most=False).met


@pytest.fixture
def tiny(bench: ModuleType) -> tuple[Benchmark, list[Batch]]:
    """Uniform and BD at w = 40 on two streams with two runs each."""
    paper = Benchmark.paper(real=())
    grid = paper.select(mechanisms=["Uniform", "BD"], streams=paper.stream_names[:2], ws=[40], runs=2)
    batches = [attrs.evolve(b, streams=b.streams[:2]) for b in dict.fromkeys(grid.batch(c) for c in grid.cells())]
    return grid, batches


def test_without_a_harness_it_says_so_and_labels_the_recorded_figure(
    bench: ModuleType, tiny: tuple[Benchmark, list[Batch]], capsys: pytest.CaptureFixture[str]
) -> None:
    grid, batches = tiny
    targets = bench.compare_with_harness(grid, batches, None, True, {})
    out = capsys.readouterr().out
    assert "NO HARNESS GIVEN" in out and "RECORDED figure, not measured in this run" in out
    assert [t.what.split(":")[0] for t in targets] == [n for n in ("Uniform", "BD") if n in bench.RECORDED_HARNESS_NS]
    for target in targets:
        assert target.note == "against the RECORDED harness figure" and target.bound == 0.5
        assert f"{target.measured:,.2f}x" in target.line()


def test_every_target_printed_and_a_missed_one_profiled(
    bench: ModuleType, tiny: tuple[Benchmark, list[Batch]], capsys: pytest.CaptureFixture[str]
) -> None:
    grid, _ = tiny
    met = bench.Target("Uniform: ours / the harness, CPU per timestep-run", 0.3, 0.5, "x")
    missed = bench.Target("BD: ours / the harness, CPU per timestep-run", 0.9, 0.5, "x")
    bench.report([met, missed], grid)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("targets (issue 45)")
    assert lines[1] == met.line() and lines[1].endswith("MET") and lines[2] == missed.line()
    profile = next(line for line in lines if line.startswith("  BD: one pass of 4 runs profiled"))
    for layer in ("check", "noise", "operation", "mechanism"):
        assert f" {layer} " in profile
    assert not any(line.startswith("  Uniform: one pass") for line in lines)  # met: no profile


def test_a_missed_target_prints_what_remains(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    slow = bench.Target("PBD at 1,000 users", 800.0, 1_109.0, " steps/s", at_most=False, remains="where it goes")
    bench.report([slow], None)
    assert "  PBD at 1,000 users: where it goes" in capsys.readouterr().out.splitlines()


def test_harness_runs_follow_ours_but_fit_the_clock(bench: ModuleType, tiny: tuple[Benchmark, list[Batch]]) -> None:
    """The harness runs our runs, more when a batch would be a few clock ticks, fewer under --quick when
    it would be long; never under 10 runs."""
    _, batches = tiny
    batch = batches[0]  # 2 streams, one ε
    steps = 1000
    per_run = 2 * steps  # timestep-runs of one run per stream
    normal = bench.HARNESS_MIN_SECONDS / per_run / 100 * 4  # 100 runs take 4x the least
    assert bench._harness_runs(normal, batch, 100, steps, quick=False) == 100
    assert bench._harness_runs(normal, batch, 100, steps, quick=True) == 100
    assert 100 < bench._harness_runs(normal / 8, batch, 100, steps, quick=False) <= 2000
    assert bench._harness_runs(0.0, batch, 100, steps, quick=True) == 2000
    costly = bench.QUICK_HARNESS_SECONDS / per_run / 100 * 4  # 100 runs take 4x the --quick bound
    assert bench._harness_runs(costly, batch, 100, steps, quick=False) == 100  # the full run: all of ours
    assert 10 <= bench._harness_runs(costly, batch, 100, steps, quick=True) == 25
