"""The raw-data aggregations of the paper's WorldCup, Taxi Porto, TDrive and Retail streams,
checked on small files whose counts are worked out by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from budgetcheck import InvalidArgument
from budgetcheck.bench import aggregate
from budgetcheck.bench.real import load_paper_stream

T0 = 894_000_000  # a whole hour (seconds since 1970)


def _log(records: list[tuple[int, int]]) -> bytes:
    table = np.zeros(len(records), dtype=aggregate._WORLDCUP_RECORD)
    table["timestamp"] = [t for t, _ in records]
    table["object"] = [o for _, o in records]
    return table.tobytes()


def test_count_table_keeps_the_largest_keys_with_ties_to_the_smaller() -> None:
    bins = np.array([0, 0, 1, 1, 1, 2, 5])
    keys = np.array([7, 3, 3, 9, 7, 9, 3])
    table = aggregate.count_table(bins, keys, None, length=3, dimensions=2)
    # totals over bins 0..2: key 3 → 2, key 7 → 2, key 9 → 2; ties: 3 and 7 kept (bin 5 dropped)
    assert table.tolist() == [[1, 1], [1, 1], [0, 0]]
    weighted = aggregate.count_table(bins, keys, np.array([1, 1, 1, 5, 1, 1, 1.0]), length=3, dimensions=1)
    assert weighted.tolist() == [[0], [5], [1]]  # key 9 (6 units)
    with pytest.raises(InvalidArgument, match="no events"):
        aggregate.count_table(np.array([4]), np.array([1]), None, length=3, dimensions=1)


def test_worldcup_hourly_requests_of_the_top_urls(tmp_path: Path) -> None:
    (tmp_path / "wc_day1_1.gz").write_bytes(gzip.compress(_log([(T0 + 10, 5), (T0 + 20, 5), (T0 + 30, 8)])))
    (tmp_path / "wc_day2_1").write_bytes(_log([(T0 + 3600 + 5, 8), (T0 + 7200, 5), (T0 + 7201, 2)]))
    table = aggregate.worldcup(tmp_path, length=3, dimensions=2)
    assert table.tolist() == [[2, 1], [0, 1], [1, 0]]  # URL 5 (3 requests), URL 8 (2)
    assert load_paper_stream("worldcup", tmp_path).shape == (1320, 1289)
    (tmp_path / "wc_day3_1").write_bytes(b"\x00" * 7)
    with pytest.raises(InvalidArgument, match="20-byte"):
        aggregate.worldcup(tmp_path)


def test_taxi_porto_hourly_trip_starts_per_cell(tmp_path: Path) -> None:
    inside, other, outside = [-8.6, 41.15], [-8.52, 41.23], [-9.0, 41.15]
    rows = [
        (T0, False, [inside, other]),
        (T0 + 100, False, [inside]),
        (T0 + 3700, False, [other]),
        (T0 + 3800, True, [inside]),
        (T0 + 3900, False, []),
        (T0 + 4000, False, [outside]),
    ]
    file = tmp_path / "train.csv"
    lines = ["TRIP_ID,TIMESTAMP,MISSING_DATA,POLYLINE"]
    lines += [
        f'{i},{t},{"True" if missing else "False"},"{json.dumps(points)}"'
        for i, (t, missing, points) in enumerate(rows)
    ]
    file.write_text("\n".join(lines) + "\n")
    table = load_paper_stream("taxi-porto", file)
    assert table.shape == (672, 1289)
    assert table[:2, :2].tolist() == [[2, 0], [0, 1]] and table[:, 2:].sum() == 0 and table[2:].sum() == 0
    cells = aggregate.grid_cells(
        np.array([inside[0], other[0]]), np.array([inside[1], other[1]]), aggregate.PORTO_BOX, aggregate.PORTO_GRID
    )
    assert cells.min() >= 0 and cells[0] != cells[1]
    file.write_text('TRIP_ID,TIMESTAMP,MISSING_DATA,POLYLINE\n1,soon,False,"[]"\n')
    with pytest.raises(InvalidArgument, match="row 2"):
        aggregate.taxi_porto(file)


def test_tdrive_counts_each_taxi_once_per_cell_and_hour_and_tiles_the_week(tmp_path: Path) -> None:
    (tmp_path / "1.txt").write_text(
        "1,2008-02-02 13:30:44,116.30,39.90\n1,2008-02-02 13:35:00,116.30,39.90\n1,2008-02-02 14:00:00,116.30,39.90\n"
    )
    (tmp_path / "2.txt").write_text("2,2008-02-02 13:59:59,116.30,39.90\n2,2008-02-02 13:10:00,117.5,39.90\n")
    table = load_paper_stream("tdrive", tmp_path)
    assert table.shape == (672, 100)
    cell = int(
        aggregate.grid_cells(np.array([116.30]), np.array([39.90]), aggregate.BEIJING_BOX, aggregate.TDRIVE_GRID)[0]
    )
    assert table[0, cell] == 2 and table[1, cell] == 1 and table[:168].sum() == 3
    assert np.array_equal(table[:168], table[168:336]) and np.array_equal(table[:168], table[504:])
    (tmp_path / "3.txt").write_text("3,yesterday,116.3,39.9\n")
    with pytest.raises(InvalidArgument, match="3.txt: line 1"):
        aggregate.tdrive(tmp_path)


def test_retail_daily_units_of_the_most_sold_products(tmp_path: Path) -> None:
    file = tmp_path / "online_retail.csv"
    file.write_text(
        "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
        "1,85123a,HEART,6,12/1/2010 8:26,2.55,17850,UK\n"
        "2,85123A,HEART,4,12/1/2010 9:00,2.55,17850,UK\n"
        "3,71053,LANTERN,3,12/2/2010 8:26,3.39,17850,UK\n"
        "C4,85123A,HEART,-12,12/3/2010 10:00,2.55,17850,UK\n"
        "5,22752,SET,1,12/3/2010 10:00,7.65,17850,UK\n"
    )
    table = aggregate.retail(file, length=3, dimensions=2)
    # net units: 71053 → 3, 22752 → 1, 85123A (upper-cased: one product) → 6 + 4 − 12 = −2
    assert table.tolist() == [[0, 0], [3, 0], [0, 1]]
    counts = load_paper_stream("retail", file)
    assert counts.shape == (374, 1289) and counts[:3, 2].tolist() == [10, 0, 0]  # the return clipped to 0


def test_the_first_records_of_the_real_porto_and_tdrive_files_land_in_the_cells_worked_out_by_hand(
    tmp_path: Path,
) -> None:
    # Porto train.csv's first trip and T-Drive's 1.txt first two points, in the files' own layouts
    porto = tmp_path / "train.csv"
    porto.write_text(
        '"TRIP_ID","CALL_TYPE","ORIGIN_CALL","ORIGIN_STAND","TAXI_ID","TIMESTAMP","DAY_TYPE","MISSING_DATA",'
        '"POLYLINE"\n"1372636858620000589","C","","","20000589","1372636858","A","False",'
        '"[[-8.618643,41.141412],[-8.618499,41.141376]]"\n'
    )
    # (−8.618643 + 8.73) / 0.23 · 75 = 36.3 → column 36; (41.141412 − 41.08) / 0.16 · 50 = 19.2 → row 19
    assert aggregate.grid_cells(
        np.array([-8.618643]), np.array([41.141412]), aggregate.PORTO_BOX, aggregate.PORTO_GRID
    ).tolist() == [19 * 75 + 36]
    assert aggregate.taxi_porto(porto, length=1, dimensions=1).tolist() == [[1.0]]
    taxi = tmp_path / "1.txt"
    taxi.write_text("1,2008-02-02 15:36:08,116.51172,39.92123\n1,2008-02-02 15:46:08,116.51135,39.93883\n")
    table = aggregate.tdrive(taxi)  # columns 8 and 8, rows 4 and 5 (10 × 10 over the 5th ring road)
    assert np.flatnonzero(table[0]).tolist() == [48, 58] and table.sum() == 8  # one hour, tiled 4 times
