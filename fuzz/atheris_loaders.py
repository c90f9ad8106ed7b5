"""Coverage-guided fuzzing (atheris) of the file readers: exported JSON-lines logs, publisher rows
(CSV and JSON lines), ledger files and the readers of the benchmark paper's real streams. Every
input must be read or refused with a budgetcheck error; any other exception is a crash that atheris
reports with the input.

    python fuzz/atheris_loaders.py -runs=20000          # CI runs it briefly
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import budgetcheck as bc
    from budgetcheck.bench.real import load_paper_stream
    from budgetcheck.durable.publish import parse_rows
    from budgetcheck.stream.events import load_requirements, parse_events, timestamps

FOLDER = Path(tempfile.mkdtemp(prefix="budgetcheck-fuzz-"))
REQUIREMENTS = load_requirements(["ann,2,1.0", "bo,4,0.5"])
# The paper's streams read from one text file (WorldCup's binary logs are read by numpy whole), each
# with the header of its export, so that the fuzzer reaches the rows (or without one, by a coin).
_ILINET = (
    "REGION TYPE,REGION,YEAR,WEEK,% WEIGHTED ILI,%UNWEIGHTED ILI,AGE 0-4,AGE 25-49,AGE 25-64,AGE 5-24,"
    "AGE 50-64,AGE 65,ILITOTAL,NUM. OF PROVIDERS,TOTAL PATIENTS\n"
)
STREAM_HEADERS = {
    "unemployment-bls": "observation_date,LNU03000000\n",
    "flu-outpatient": "PERCENTAGE OF VISITS FOR INFLUENZA-LIKE-ILLNESS REPORTED BY SENTINEL PROVIDERS\n" + _ILINET,
    "flu-death": "AREA,SUB AREA,AGE GROUP,SEASON,WEEK,PERCENT P&I,NUM INFLUENZA DEATHS,NUM PNEUMONIA DEATHS,"
    "TOTAL DEATHS,PERCENT COMPLETE\n",
    "state-flu": _ILINET,
    "retail": "InvoiceNo,StockCode,Description,Quantity,InvoiceDate,UnitPrice,CustomerID,Country\n",
    "taxi-porto": "TRIP_ID,CALL_TYPE,ORIGIN_CALL,ORIGIN_STAND,TAXI_ID,TIMESTAMP,DAY_TYPE,MISSING_DATA,POLYLINE\n",
    "tdrive": "",
}
TEXT_STREAMS = tuple(STREAM_HEADERS)


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    choice = provider.ConsumeIntInRange(0, 5 + len(TEXT_STREAMS))
    headed = provider.ConsumeBool()
    rest = provider.ConsumeBytes(provider.remaining_bytes())
    text = rest.decode("utf-8", errors="replace")
    try:
        if choice == 0:
            bc.load_lines(text.splitlines())
        elif choice in (1, 2):
            for _ in parse_rows(
                text.splitlines(), fmt="csv" if choice == 1 else "jsonl", dimensions=2, integers=choice == 1
            ):
                pass
        elif choice == 4:
            load_requirements(text.splitlines())
        elif choice == 5:
            for _ in timestamps(
                parse_events(text.splitlines(), fmt="csv"), REQUIREMENTS, dimensions=3, published=0, skip=lambda e: None
            ):
                pass
        elif choice > 5:
            name = TEXT_STREAMS[choice - 6]
            path = FOLDER / ("taxi.txt" if name == "tdrive" else "export.csv")
            path.write_text((STREAM_HEADERS[name] if headed else "") + text, encoding="utf-8")
            load_paper_stream(name, path)
        else:
            path = FOLDER / "ledger.db"
            path.write_bytes(b"SQLite format 3\x00" + rest if rest[:1] == b"S" else rest)
            bc.audit_file(path)
    except bc.BudgetcheckError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
