"""``bench personalized`` on a Dask cluster and resumed from its progress file: the same rows, bit for bit,
as the serial loop of execute_personalized that the study ran before points became units."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck import execute_personalized, load_mechanism
from budgetcheck.bench import personalized_study as ps
from budgetcheck.bench.config import stable_seed
from budgetcheck.cli import main
from budgetcheck.ledger.errors import InvalidArgument

DATASETS = ("TLNS", "Log")
MECHANISMS = ("PBD", "StrictestBA", "PLBU")
SMALL: dict[str, object] = dict(users=150, length=40, runs=2, seed=3, datasets=DATASETS, mechanisms=MECHANISMS)


def _points(n: int) -> list[ps.PersonalizedPoint]:
    return [p for p in ps.experiments(n) if (p.experiment, p.x) in {("vary-epsilon", 0.2), ("ratio-w", 0.9)}]


def _measured(rows: list[ps.PersonalizedRow]) -> list[tuple[object, ...]]:
    return [(r.dataset, r.experiment, r.x, r.mechanism, r.amre, r.ajsd) for r in rows]


def _serial_reference() -> list[tuple[object, ...]]:
    """The study's loop as it was written before (one data set's bins, then every point and mechanism)."""
    out: list[tuple[object, ...]] = []
    for dataset in DATASETS:
        rng = np.random.default_rng(stable_seed(3, "personalized", dataset))
        bins = ps.binary_bins(ps.probabilities(dataset, 40, rng), 150, rng)
        truth = np.stack([(bins == j).sum(axis=1) for j in range(2)], axis=1).astype(np.float64)
        for point in _points(150):
            for name in MECHANISMS:
                releases = execute_personalized(
                    load_mechanism(name),
                    point.requirements,
                    bins,
                    dimensions=2,
                    runs=2,
                    seed=stable_seed(3, dataset, point.experiment, point.x, name),
                ).releases
                amre = float(ps.amre(truth, releases, 150).mean())
                out.append(
                    (dataset, point.experiment, point.x, name, amre, float(ps.ajsd(truth, releases, 150).mean()))
                )
    return out


def test_dask_and_serial_give_the_releases_of_the_former_loop_bit_for_bit() -> None:
    distributed = pytest.importorskip("distributed")
    serial = ps.run_study(points=_points, **SMALL)  # type: ignore[arg-type]
    assert _measured(serial) == _serial_reference()
    assert all(r.cpu_seconds >= 0.0 and r.seconds >= 0.0 for r in serial)
    with distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cluster:
        on_cluster = ps.run_study(points=_points, scheduler=cluster.scheduler_address, **SMALL)  # type: ignore[arg-type]
    assert _measured(on_cluster) == _measured(serial)


def test_a_finished_point_is_stored_and_skipped_on_rerun(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    fresh = ps.run_study(points=_points, **SMALL)  # type: ignore[arg-type]
    seen: list[str] = []

    def stop_after_three(line: str) -> None:
        seen.append(line)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ps.run_study(points=_points, progress=stop_after_three, progress_file=progress, **SMALL)  # type: ignore[arg-type]
    assert len(progress.read_text().splitlines()) == 1 + 3 * len(MECHANISMS)
    with progress.open("a") as handle:  # a point cut short by a crash: one row of three, run again
        last = progress.read_text().splitlines()[-1]  # Log, vary-epsilon, x = 0.2, PLBU
        handle.write(last.replace('"vary-epsilon", "x": 0.2', '"ratio-w", "x": 0.9') + "\n")
    again: list[str] = []
    resumed = ps.run_study(points=_points, progress=again.append, progress_file=progress, **SMALL)  # type: ignore[arg-type]
    assert again[0].startswith("3 of 4 points stored")
    assert len(again) == 2  # the skip notice and the one point left
    assert _measured(resumed) == _measured(fresh)
    with pytest.raises(InvalidArgument, match="other parameters"):
        ps.run_study(points=_points, progress_file=progress, **{**SMALL, "runs": 3})  # type: ignore[arg-type]


def test_the_cli_runs_on_a_scheduler_and_resumes(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    runner = CliRunner()
    bad = runner.invoke(main, ["bench", "personalized", "--executor", "dask", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--scheduler" in bad.output
    lone = runner.invoke(main, ["bench", "personalized", "--scheduler", "tcp://h:1", "--out", str(tmp_path / "x")])
    assert lone.exit_code == 2 and "--executor dask" in lone.output
    out = tmp_path / "study"
    args = ["bench", "personalized", "--dataset", "Sin", "--mechanism", "PBA", "--out", str(out)]
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        first = runner.invoke(main, [*args, "--executor", "dask", "--scheduler", cluster.scheduler_address])
    assert first.exit_code == 0, first.output
    stored = (out / "personalized-progress.jsonl").read_text()
    assert len(stored.splitlines()) == 1 + 8  # the quick study's 8 points of Sin, one mechanism
    second = runner.invoke(main, args)
    assert second.exit_code == 0 and "8 of 8 points stored" in second.output
    assert (out / "personalized-progress.jsonl").read_text() == stored
