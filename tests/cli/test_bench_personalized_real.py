"""``bench personalized --taxi PATH --foursquare PATH``: Du et al.'s real streams reach the study unchanged, PLBU
runs beside PBD, PBA and the strictest baselines, and a missing or malformed download exits 2 naming the file
before any run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from budgetcheck.bench import du_figures, figures
from budgetcheck.bench import personalized_study as study
from budgetcheck.bench.study_report import DU_FIGURES
from budgetcheck.cli import main

QUICK = dict(epsilons=(0.2, 1.0), ws=(40, 200), ratios=(0.1, 0.9))


def _taxi(tmp_path: Path, taxis: int = 6, minutes: int = 12) -> Path:
    """T-Drive's layout: one id,YYYY-MM-DD HH:MM:SS,lon,lat file per taxi, some records outside A_E."""
    folder = tmp_path / "taxi_log_2008_by_id"
    folder.mkdir()
    rng = np.random.default_rng(7)
    for taxi in range(1, taxis + 1):
        lines = []
        for minute in range(minutes):
            lon, lat = rng.uniform(115.9, 116.9), rng.uniform(39.4, 40.4)
            lines.append(f"{taxi},2008-02-02 15:{minute:02d}:{rng.integers(60):02d},{lon:.5f},{lat:.5f}")
        (folder / f"{taxi}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _foursquare(tmp_path: Path, users: int = 40) -> Path:
    """Yang et al.'s two tab-separated files: venues with a country, check-ins with Twitter-style UTC times."""
    folder = tmp_path / "foursquare"
    folder.mkdir()
    countries = ["BR", "JP", "TR", "US"]
    (folder / "dataset_TIST2015_POIs.txt").write_text(
        "".join(f"v{k}\t0.0\t0.0\tBar\t{c}\n" for k, c in enumerate(countries)), encoding="utf-8"
    )
    rng = np.random.default_rng(8)
    lines = []
    for hour in range(20):
        for user in rng.choice(users, size=users // 2, replace=False):
            lines.append(f"u{user}\tv{rng.integers(5)}\tTue Apr 03 {hour:02d}:{rng.integers(60):02d}:00 +0000 2012\t0")
    (folder / "dataset_TIST2015_Checkins.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _rows(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = (out / "personalized.jsonl").read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0])["params"], [json.loads(line) for line in lines[1:]]


def _no_drawing(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[Any, ...]]]:
    """Replace the figure writer (matplotlib, seconds per figure) by one that keeps each figure's points."""
    drawn: dict[str, list[tuple[Any, ...]]] = {}

    def keep(points: list[tuple[Any, ...]], stem: Path, **_: Any) -> list[Path]:
        drawn[stem.name] = list(points)
        return []

    def keep_rows(rows: list[study.PersonalizedRow], experiment: str, stem: Path, **_: Any) -> list[Path]:
        drawn[stem.name] = [("", r.dataset, r.x, r.mechanism, r.amre) for r in rows if r.experiment == experiment]
        return []

    monkeypatch.setattr(figures, "study_curves", keep)
    monkeypatch.setattr(du_figures, "paper_form", keep_rows)  # Figures 10-13, in the paper's form
    return drawn


def test_the_real_streams_run_with_plbu_as_the_library_runs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every mechanism, PLBU included, at every quick point of both streams; the rows equal run_study's on the same
    files and seed, so the CLI passed the downloads through and nothing else; bench report draws PLBU in each of
    Du's figures and compares against it."""
    drawn = _no_drawing(monkeypatch)
    taxi, foursquare, out = _taxi(tmp_path), _foursquare(tmp_path), tmp_path / "out"
    args = ["bench", "personalized", "--real-only", "--taxi", str(taxi), "--foursquare", str(foursquare)]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    params, rows = _rows(out)
    assert params["taxi_path"] == str(taxi) and params["foursquare_path"] == str(foursquare)
    assert {r["dataset"] for r in rows} == {"Taxi", "Foursquare"}
    for dataset in ("Taxi", "Foursquare"):
        assert {r["mechanism"] for r in rows if r["dataset"] == dataset} == set(study.MECHANISMS)
    assert all(np.isfinite(r["amre"]) and r["amre"] >= 0 for r in rows)
    expected = study.run_study(  # each (dataset, point, mechanism) has its own seed: a subset suffices
        length=300,
        runs=3,
        seed=3,
        datasets=(),
        points=lambda n: study.experiments(n, **QUICK)[::3],
        mechanisms=("PLBU", "PBD"),
        real={"Taxi": taxi, "Foursquare": foursquare},
    )
    assert len(expected) == 2 * 3 * 2
    got = {(r["dataset"], r["experiment"], r["x"], r["mechanism"]): (r["amre"], r["ajsd"]) for r in rows}
    for r in expected:
        assert got[(r.dataset, r.experiment, r.x, r.mechanism)] == (r.amre, r.ajsd), r
    report = CliRunner().invoke(
        main, ["bench", "report", str(out / "personalized.jsonl"), "--out", str(tmp_path / "r")]
    )
    assert report.exit_code == 0, report.output
    for stem, experiment, *_ in DU_FIGURES:
        plotted = {(p[1], p[3]) for p in drawn[stem]}  # (panel, dataset, x, mechanism, value)
        assert plotted == {(d, m) for d in ("Taxi", "Foursquare") for m in study.MECHANISMS}, stem
        assert len(drawn[stem]) == sum(r["experiment"] == experiment for r in rows), stem
    table = (tmp_path / "r" / "du_results.csv").read_text(encoding="utf-8")
    assert table.count("PLBU") == sum(r["mechanism"] == "PLBU" for r in rows) > 0
    assert "PLBU" in (tmp_path / "r" / "du_improvement.md").read_text(encoding="utf-8")


def _broken(tmp_path: Path, kind: str) -> tuple[list[str], str]:
    """Command-line arguments naming a bad download, and the file the refusal must name."""
    if kind == "taxi missing":
        return ["--taxi", str(tmp_path / "nowhere")], "nowhere"
    if kind == "taxi bad time":
        folder = _taxi(tmp_path, taxis=2)
        (folder / "2.txt").write_text("2,2008-02-31 25:61:00,116.5,39.9\n", encoding="utf-8")
        return ["--taxi", str(folder)], "2.txt"
    if kind == "taxi empty folder":
        (tmp_path / "empty").mkdir()
        return ["--taxi", str(tmp_path / "empty")], "empty"
    folder = _foursquare(tmp_path)
    if kind == "foursquare no venues":
        (folder / "dataset_TIST2015_POIs.txt").unlink()
        return ["--foursquare", str(folder)], "dataset_TIST2015_POIs.txt"
    if kind == "foursquare bad time":
        with (folder / "dataset_TIST2015_Checkins.txt").open("a", encoding="utf-8") as file:
            file.write("u1\tv1\t2012-04-03 18:00:09\t0\n")
        return ["--foursquare", str(folder)], "dataset_TIST2015_Checkins.txt"
    assert kind == "foursquare check-ins a folder"
    (folder / "dataset_TIST2015_Checkins.txt").unlink()
    (folder / "dataset_TIST2015_Checkins.txt").mkdir()
    return ["--foursquare", str(folder)], "dataset_TIST2015_Checkins.txt"


@pytest.mark.parametrize(
    "kind",
    [
        "taxi missing",
        "taxi bad time",
        "taxi empty folder",
        "foursquare no venues",
        "foursquare bad time",
        "foursquare check-ins a folder",
    ],
)
def test_a_missing_or_malformed_download_exits_2_naming_it_before_any_run(tmp_path: Path, kind: str) -> None:
    """The synthetic data sets are asked for too: the refusal must come before any of them runs (no progress line,
    no results written), never as a traceback."""
    arguments, named = _broken(tmp_path, kind)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["bench", "personalized", *arguments, "--out", str(out)])
    assert result.exit_code == 2, (kind, result.output)
    assert named in result.output, (kind, result.output)
    assert "Traceback" not in result.output and "AMRE" not in result.output
    assert not out.exists()


def test_the_options_choose_the_data_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--dataset picks synthetic sets, --real-only drops them; contradictory or empty choices exit 2."""
    seen: list[dict[str, Any]] = []

    def fake(**kwargs: Any) -> list[study.PersonalizedRow]:
        seen.append(kwargs)
        return [study.PersonalizedRow("Sin", "vary-w", 40.0, "PLBU", 1.0, 0.5, 0.1)]

    monkeypatch.setattr(study, "run_study", fake)
    _no_drawing(monkeypatch)
    taxi = tmp_path / "t"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["bench", "personalized", "--dataset", "Sin", "--out", str(tmp_path / "a")]).exit_code == 0
    )
    assert seen[-1]["datasets"] == ("Sin",) and seen[-1]["real"] == {}
    assert seen[-1]["mechanisms"] == study.MECHANISMS and "PLBU" in study.MECHANISMS
    chosen = ["bench", "personalized", "--mechanism", "LBU", "--mechanism", "LPA", "--out", str(tmp_path / "c")]
    assert runner.invoke(main, chosen).exit_code == 0 and seen[-1]["mechanisms"] == ("LBU", "LPA")
    ok = runner.invoke(
        main, ["bench", "personalized", "--real-only", "--taxi", str(taxi), "--out", str(tmp_path / "b")]
    )
    assert ok.exit_code == 0, ok.output
    assert seen[-1]["datasets"] == () and seen[-1]["real"] == {"Taxi": taxi}
    assert callable(seen[-1]["points"]) and len(seen[-1]["points"](100)) == 8
    paper = runner.invoke(main, ["bench", "personalized", "--paper", "--foursquare", str(taxi), "--out", str(tmp_path)])
    assert paper.exit_code == 0 and seen[-1]["points"] is None and seen[-1]["datasets"] == study.DATASETS
    assert seen[-1]["real"] == {"Foursquare": taxi}
    calls = len(seen)
    alone = runner.invoke(main, ["bench", "personalized", "--real-only"])
    assert alone.exit_code == 2 and "--real-only needs --taxi PATH or --foursquare PATH" in alone.output
    both = runner.invoke(main, ["bench", "personalized", "--real-only", "--taxi", str(taxi), "--dataset", "Log"])
    assert both.exit_code == 2 and "--dataset Log" in both.output
    unknown = runner.invoke(main, ["bench", "personalized", "--dataset", "Taxi"])
    assert unknown.exit_code == 2 and "'Taxi' is not one of" in unknown.output
    assert len(seen) == calls


@pytest.mark.parametrize(
    ("name", "message"),
    [("BD", "mechanism='BD' is not a personalized w-event mechanism"), ("NoSuch", "NoSuch")],
)
def test_a_mechanism_the_study_cannot_run_exits_2_before_any_run(tmp_path: Path, name: str, message: str) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["bench", "personalized", "--mechanism", "PBD", "--mechanism", name, "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and "AMRE" not in result.output and not out.exists()


def test_the_local_mechanisms_run_on_a_real_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ren et al.'s LBU and LPA, chosen by name, run at every quick point of the Taxi stream."""
    _no_drawing(monkeypatch)
    out = tmp_path / "out"
    arguments = ["--real-only", "--taxi", str(_taxi(tmp_path)), "--mechanism", "LBU", "--mechanism", "LPA"]
    result = CliRunner().invoke(main, ["bench", "personalized", *arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    _, rows = _rows(out)
    assert sorted((r["mechanism"], r["experiment"], r["x"]) for r in rows) == sorted(
        (m, p.experiment, p.x) for m in ("LBU", "LPA") for p in study.experiments(6, **QUICK)
    )
    assert all(np.isfinite(r["amre"]) for r in rows)
