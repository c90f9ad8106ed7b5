"""Du et al.'s Taxi and Foursquare streams from small synthetic files in the downloads' formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from budgetcheck.bench import personalized_study as ps
from budgetcheck.bench.du_streams import load_foursquare, load_taxi
from budgetcheck.ledger.errors import DataUnavailable, InvalidArgument


def _taxi_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "taxi_log_2008_by_id"
    folder.mkdir()
    (folder / "1.txt").write_text(
        "1,2008-02-02 15:36:08,116.51172,39.92123\n"
        "1,2008-02-02 15:36:08,116.51172,39.92123\n"  # a duplicate: dropped
        "1,2008-02-02 15:36:50,116.05,39.55\n"  # same minute, later: wins (cell 0)
        "1,2008-02-02 15:38:00,117.5,39.9\n",  # outside A_E: dropped
        encoding="utf-8",
    )
    (folder / "2.txt").write_text("2,2008-02-02 15:37:10,116.79,40.29\n", encoding="utf-8")
    return folder


def test_taxi_cells_per_minute_last_record_wins(tmp_path: Path) -> None:
    bins, d = load_taxi(_taxi_folder(tmp_path))
    assert d == 100
    assert bins.tolist() == [[0, -1], [-1, 99]]  # minute 0: taxi 1 in cell 0; minute 1: taxi 2 in the last cell


def _foursquare_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "foursquare"
    folder.mkdir(exist_ok=True)
    (folder / "dataset_TIST2015_POIs.txt").write_text(
        "v1\t40.7\t-74.0\tBar\tUS\nv2\t35.6\t139.7\tCafe\tJP\n", encoding="utf-8"
    )
    (folder / "dataset_TIST2015_Checkins.txt").write_text(
        "u1\tv1\tTue Apr 03 18:00:09 +0000 2012\t-240\n"
        "u2\tv2\tTue Apr 03 18:30:00 +0000 2012\t540\n"
        "u1\tv2\tTue Apr 03 19:50:00 +0000 2012\t540\n"  # 110 minutes later: slot 1
        "u3\tv9\tTue Apr 03 18:00:00 +0000 2012\t0\n",  # unknown venue: removed
        encoding="utf-8",
    )
    return folder


def test_foursquare_countries_per_100_minutes(tmp_path: Path) -> None:
    bins, d = load_foursquare(_foursquare_folder(tmp_path), share=1.0)
    assert d == 2  # JP, US
    assert bins.tolist() == [[1, 0], [0, -1]]
    half, _ = load_foursquare(_foursquare_folder(tmp_path), share=0.5)
    assert half.shape[1] == 1


def test_a_missing_download_names_the_file_and_the_source(tmp_path: Path) -> None:
    with pytest.raises(
        DataUnavailable, match=r"Taxi: nothing at .*nowhere.*download it from: Microsoft Research T-Drive"
    ):
        load_taxi(tmp_path / "nowhere")
    with pytest.raises(DataUnavailable, match=r"dataset_TIST2015_Checkins.txt.*download it from: the Foursquare"):
        load_foursquare(tmp_path)
    with pytest.raises(InvalidArgument, match=r"share=0 must be in \(0, 1\]"):
        load_foursquare(_foursquare_folder(tmp_path), share=0)


def test_the_study_runs_plbu_beside_pbd_on_the_real_streams(tmp_path: Path) -> None:
    point = ps.PersonalizedPoint("vary-epsilon", 1.0, ps.RequirementSet.from_counts([((2, 1.0), 1), ((3, 0.5), 1)]))
    rows = ps.run_study(
        runs=2,
        length=2,
        datasets=(),
        points=[point],
        mechanisms=("PBD", "PLBU"),
        real={"Taxi": _taxi_folder(tmp_path)},
    )
    assert [(r.dataset, r.mechanism) for r in rows] == [("Taxi", "PBD"), ("Taxi", "PLBU")]
    assert all(np.isfinite(r.amre) for r in rows)
