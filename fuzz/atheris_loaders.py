"""Coverage-guided fuzzing (atheris) of the file readers: exported JSON-lines logs, publisher rows
(CSV and JSON lines) and ledger files. Every input must be read or refused with a budgetcheck
error; any other exception is a crash that atheris reports with the input.

    python fuzz/atheris_loaders.py -runs=20000          # CI runs it briefly
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import budgetcheck as bc
    from budgetcheck._events import load_requirements, parse_events, timestamps
    from budgetcheck._publish import parse_rows

FOLDER = Path(tempfile.mkdtemp(prefix="budgetcheck-fuzz-"))
REQUIREMENTS = load_requirements(["ann,2,1.0", "bo,4,0.5"])


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    choice = provider.ConsumeIntInRange(0, 5)
    rest = provider.ConsumeBytes(provider.remaining_bytes())
    text = rest.decode("utf-8", errors="replace")
    try:
        if choice == 0:
            bc.load_lines(text.splitlines())
        elif choice in (1, 2):
            for _ in parse_rows(text.splitlines(), fmt="csv" if choice == 1 else "jsonl", dimensions=2, integers=choice == 1):
                pass
        elif choice == 4:
            load_requirements(text.splitlines())
        elif choice == 5:
            for _ in timestamps(parse_events(text.splitlines(), fmt="csv"), REQUIREMENTS, dimensions=3, published=0, skip=lambda e: None):
                pass
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
