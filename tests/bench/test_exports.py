"""The paper's weekly and monthly streams read from the agencies' export files as downloaded
(tests/data/exports holds real ones; see its README)."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from budgetcheck import InvalidArgument
from budgetcheck.bench import aggregate, exports
from budgetcheck.bench.real import PAPER_STREAMS, load_paper_stream

DATA = Path(__file__).parents[1] / "data" / "exports"
FRED = DATA / "fred_LNU03000000.csv"


def _fred_values() -> list[float]:
    with FRED.open() as handle:
        return [float(row["LNU03000000"]) for row in csv.DictReader(handle)]


def test_numbers_read_thousands_separators_and_the_exports_marks_for_missing() -> None:
    assert exports.number("1,234") == 1234.0 and exports.number(" 12,345,678 ") == 12345678.0
    assert exports.number("-1,234.5") == -1234.5 and exports.number("0.5748") == 0.5748
    assert all(exports.number(mark) is None for mark in ("X", "", " x ", "NA", ".", "Insufficient Data"))
    for bad in ("1,23", "12,3456", "seven"):
        with pytest.raises(ValueError):
            exports.number(bad)


def test_unemployment_from_freds_download_is_the_first_478_months() -> None:
    stream = load_paper_stream("unemployment-bls", FRED)
    assert stream.shape == PAPER_STREAMS["unemployment-bls"].shape == (478, 1)
    assert stream[:2, 0].tolist() == [2351.0, 2807.0]  # 1948-01, 1948-02
    assert stream[-1, 0] == 6845.0  # 1987-10
    assert stream[:, 0].tolist() == _fred_values()[:478]


def test_unemployment_from_bls_flat_file_and_older_fred_headers_is_the_same_stream(tmp_path: Path) -> None:
    values = _fred_values()
    flat = tmp_path / "ln.data.1.AllData"
    lines = ["series_id                     \tyear\tperiod\t       value\tfootnote_codes"]
    for year in range(1948, 1988):
        for month in range(1, 13):
            value = values[(year - 1948) * 12 + month - 1]
            lines.append(f"LNS14000000                   \t{year}\tM{month:02d}\t         3.4\t")  # another series
            lines.append(f"LNU03000000                   \t{year}\tM{month:02d}\t{value:12.0f}\t")
        lines.append(f"LNU03000000                   \t{year}\tM13\t      9999\t")  # the annual average
    flat.write_text("\n".join(lines) + "\n")
    from_fred = load_paper_stream("unemployment-bls", FRED)
    assert np.array_equal(load_paper_stream("unemployment-bls", flat), from_fred)
    old = tmp_path / "UNEMPLOY_NSA.csv"
    old.write_text(FRED.read_text().replace("observation_date", "DATE", 1))
    assert np.array_equal(load_paper_stream("unemployment-bls", old), from_fred)
    generic = tmp_path / "unemployed.csv"
    generic.write_text("date,value\n1976-01,7.6\n1976-02,-1\n1976-03,8.2\n")
    assert load_paper_stream("unemployment-bls", generic).tolist() == [[8.0], [0.0], [8.0]]


def test_state_flu_skips_the_title_line_and_leaves_out_states_with_unreported_weeks() -> None:
    # Florida reports X throughout; Alabama's week 41 is missing: only Minnesota reports every week
    assert load_paper_stream("state-flu", DATA / "ILINet_states.csv").tolist() == [[38.0], [35.0]]
    regions = load_paper_stream("state-flu", DATA / "ILINet_hhs_regions.csv")
    assert regions.shape == (3, 10)
    assert regions[0].tolist() == [44, 3, 32, 46, 89, 5, 27, 5, 243, 76]  # 1997 week 40, Regions 1-10
    assert regions[:, 8].tolist() == [243, 274, 241]  # Region 9, weeks 40-42


def test_state_flu_refuses_a_file_where_no_state_reports_every_week(tmp_path: Path) -> None:
    file = tmp_path / "ILINet.csv"
    file.write_text(
        "\n".join(DATA.joinpath("ILINet_states.csv").read_text().splitlines()[:4]) + "\n"
        "States,Minnesota,2010,41,X,X,X,X,X,X,X,X,X,X,X\n"
    )
    with pytest.raises(InvalidArgument, match="no region reports ILITOTAL in every one of its 2 weeks"):
        load_paper_stream("state-flu", file)


def test_flu_outpatient_reads_the_national_export_and_refuses_a_regional_one(tmp_path: Path) -> None:
    lines = DATA.joinpath("ILINet_hhs_regions.csv").read_text().splitlines()
    national = [line.replace("HHS Regions,Region 1,", "National,X,") for line in lines[1:] if ",Region 1," in line]
    file = tmp_path / "ILINet.csv"
    file.write_text(
        "PERCENTAGE OF VISITS FOR INFLUENZA-LIKE-ILLNESS REPORTED BY SENTINEL PROVIDERS\n"
        + "\n".join([lines[0], *national])
        + "\n"
    )
    assert load_paper_stream("flu-outpatient", file).tolist() == [[44.0], [57.0], [85.0]]
    with pytest.raises(InvalidArgument, match="REGION takes 10 values .*download the national ILINet data only"):
        load_paper_stream("flu-outpatient", DATA / "ILINet_hhs_regions.csv")


MORTALITY_HEADER = (
    "AREA,SUB AREA,AGE GROUP,SEASON,WEEK,PERCENT P&I,NUM INFLUENZA DEATHS,NUM PNEUMONIA DEATHS,"
    "TOTAL DEATHS,PERCENT COMPLETE"
)


def test_flu_death_sums_influenza_and_pneumonia_deaths_with_thousands_separators(tmp_path: Path) -> None:
    file = tmp_path / "NCHSData.csv"
    file.write_text(
        MORTALITY_HEADER + "\n"
        'National,National,All,2013-14,40,6.2,4,"2,911","47,327",100.0\n'
        'National,National,All,2013-14,41,6.1,9,"2,870","47,220",100.0\n'
        'National,National,All,2013-14,42,6.0,12,"3,001","48,019",99.8\n'
    )
    assert load_paper_stream("flu-death", file).tolist() == [[2915.0], [2879.0], [3013.0]]
    file.write_text(
        MORTALITY_HEADER + "\n"
        'National,National,All,2013-14,40,6.2,4,"2,911","47,327",100.0\n'
        'State,Alabama,All,2013-14,40,6.9,0,75,"1,002",100.0\n'
    )
    with pytest.raises(InvalidArgument, match="AREA takes 2 values .*national data for all ages only"):
        load_paper_stream("flu-death", file)
    file.write_text(
        MORTALITY_HEADER + '\nNational,National,All,2013-14,40,6.2,Insufficient Data,"2,911","47,327",100.0\n'
    )
    with pytest.raises(InvalidArgument, match="row 2: NUM INFLUENZA DEATHS='Insufficient Data' is not reported"):
        load_paper_stream("flu-death", file)


def test_retail_reads_one_date_form_per_file(tmp_path: Path) -> None:
    header = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
    two_digit = tmp_path / "Online_Retail.csv"  # a common CSV copy: 2-digit years, descriptions with commas
    two_digit.write_text(
        header + '536365,85123A,"HEART, WHITE",6,12/1/10 8:26,2.55,17850,United Kingdom\n'
        "536366,71053 ,LANTERN,3,12/3/10 9:00,3.39,17850,United Kingdom\n"
    )
    assert aggregate.retail(two_digit, length=3, dimensions=2).tolist() == [[6, 0], [0, 0], [0, 3]]
    day_first = tmp_path / "day_first.csv"  # 13/1 is read day first, so 1/2/2011 is 1 February, not 2 January
    day_first.write_text(header + "1,A,X,1,13/1/2011 10:00,1,1,UK\n2,B,X,1,1/2/2011 10:00,1,1,UK\n")
    days = aggregate.invoice_days(day_first, [(2, "13/1/2011 10:00"), (3, "1/2/2011 10:00")])
    assert days.tolist() == [dt.date(2011, 1, 13).toordinal(), dt.date(2011, 2, 1).toordinal()]
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(header + "1,A,X,1,2011-01-13 10:00:00,1,1,UK\n2,B,X,1,1/2/2011 10:00,1,1,UK\n")
    with pytest.raises(InvalidArgument, match="mix date forms"):
        aggregate.retail(mixed)
    mixed.write_text(header + "1,A,X,1,2011-01-13 10:00:00,1,1,UK\n2,B,X,1,yesterday,1,1,UK\n")
    with pytest.raises(InvalidArgument, match="row 3: InvoiceDate='yesterday' is not a date and time"):
        aggregate.retail(mixed)


def test_tdrive_drops_points_without_coordinates(tmp_path: Path) -> None:
    file = tmp_path / "1.txt"
    file.write_text("1,2008-02-02 15:36:08,nan,39.9\n1,2008-02-02 15:40:00,116.26,39.81\n")
    table = aggregate.tdrive(file)
    assert table.sum() == 4 and table[0, 0] == 1  # the NaN point counts nowhere; the other in cell 0, tiled 4 times


PORTO_HEADER = "TRIP_ID,CALL_TYPE,ORIGIN_CALL,ORIGIN_STAND,TAXI_ID,TIMESTAMP,DAY_TYPE,MISSING_DATA,POLYLINE\n"
RETAIL_HEADER = "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n"
PORTO_POLYLINE = "row 2: TIMESTAMP='1372636858' or POLYLINE is not seconds and a list"
REFUSED = [  # (stream, file name, content, what the message says)
    ("unemployment-bls", "other.csv", "month,unemployed\n1948-01,2351\n", "not FRED's CSV of LNU03000000"),
    (
        "unemployment-bls",
        "f.csv",
        "observation_date,LNU03000000\n1948-01-01,2351\n1948-02-01,.\n",
        "row 3: LNU03000000='.' is not reported",
    ),
    ("unemployment-bls", "f.csv", "date,value\n1976-01,seven\n", "row 2: value='seven' is not a number"),
    (
        "unemployment-bls",
        "f.csv",
        "observation_date,LNU03000000\n1948-01-01,inf\n",
        "row 2: LNU03000000='inf' is not a number",
    ),
    ("flu-death", "deaths.csv", "week,value\n", "the first line \\['week', 'value'\\] is missing \\['deaths'\\]"),
    ("flu-death", "deaths.csv", "week,deaths\n", "a header but no rows"),
    ("retail", "r.csv", RETAIL_HEADER + "1,A,X\n", "row 2 has 3 fields, the header 8"),
    ("retail", "r.csv", RETAIL_HEADER + "1,A,X,nan,12/1/2010 8:26,1,1,UK\n", "row 2: Quantity='nan' is malformed"),
    (
        "tdrive",
        "1.txt",
        "99999999999999999999,2008-02-02 15:36:08,116.3,39.9\n",
        "line 1: .* is not id,YYYY-MM-DD HH:MM:SS,lon,lat",
    ),
    (
        "taxi-porto",
        "train.csv",
        PORTO_HEADER + '"1","A","","","2","99999999999999999999","A","False","[[-8.6,41.1]]"\n',
        "row 2: TIMESTAMP=99999999999999999999 is not a time",
    ),
    *(
        (
            "taxi-porto",
            "train.csv",
            PORTO_HEADER + f'"1","A","","","2","1372636858","A","False",{polyline}\n',
            PORTO_POLYLINE,
        )
        for polyline in ('"[1]"', '"[[1]]"', '"{""a"": 1}"', '"[[""x"", 2]]"', '"[[-8.6"')
    ),
]


@pytest.mark.parametrize(("stream", "name", "content", "message"), REFUSED)
def test_malformed_files_are_refused_with_the_row_named(
    tmp_path: Path, stream: str, name: str, content: str, message: str
) -> None:
    file = tmp_path / name
    file.write_text(content)
    with pytest.raises(InvalidArgument, match=message):
        load_paper_stream(stream, file)


def test_a_benchmark_file_runs_on_freds_download_as_the_papers_unemployment_stream(tmp_path: Path) -> None:
    from budgetcheck.bench import Benchmark
    from budgetcheck.bench.runner import run_cell

    config = tmp_path / "bench.toml"
    config.write_text(
        f'mechanisms = ["Uniform", "BD"]\nruns = 5\n[files]\n"unemployment-bls" = "{FRED}"\n[vary_w]\nws = [12]\n'
    )
    grid = Benchmark.from_toml(config)
    assert [cell.stream for cell in grid.cells()] == ["unemployment-bls", "unemployment-bls"]
    for cell in grid.cells():
        result = run_cell(grid, cell)
        assert len(result.mae) == 5 and all(np.isfinite(result.mae))
        # Lap(w/ε) noise on counts in the thousands: a mean error well below the stream's level
        assert 0 < float(np.mean(result.mae)) < 0.2 * float(np.mean(_fred_values()[:478]))
