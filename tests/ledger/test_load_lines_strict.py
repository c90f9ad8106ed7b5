"""load_lines refuses every field a ledger would not have written, naming the line; it never guesses."""

from __future__ import annotations

import json
from typing import Any

import pytest

import budgetcheck as bc
from budgetcheck import InvalidArgument, load_lines


def _log() -> list[dict[str, Any]]:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, keep_records=True)
    ledger.spend(1, 0.5, purpose="a")
    return [json.loads(line) for line in ledger.jsonl()]


HEADER_EDITS = {
    "w-bool": ("w", True),
    "w-float": ("w", 3.0),
    "runs-zero": ("runs", 0),
    "epsilon-string": ("epsilon", "1"),
    "epsilon-negative": ("epsilon", -1.0),
    "notion-unknown": ("notion", "x-event"),
    "version-bool": ("version", True),
    "unknown-field": ("colour", "red"),
}
RECORD_EDITS = {
    "t-bool": ("t", True),
    "t-huge": ("t", 2**62 + 1),
    "purpose-empty": ("purpose", " "),
    "purpose-number": ("purpose", 3),
    "amount-bool": ("amounts", [True]),
    "amount-string": ("amounts", ["0.5"]),
    "amounts-shape": ("amounts", [0.5, 0.5]),
    "sensitivity-negative": ("sensitivity", -1.0),
    "noise-scale-negative": ("noise_scale", [-1.0]),
    "vouched-string": ("vouched", "yes"),
    "sampler-number": ("sampler", 7),
    "unknown-field": ("colour", "red"),
}


@pytest.mark.parametrize("edit", sorted(HEADER_EDITS))
def test_a_bad_header_field_is_refused_on_line_1(edit: str) -> None:
    header, record = _log()
    key, value = HEADER_EDITS[edit]
    header[key] = value
    with pytest.raises(InvalidArgument, match="line 1"):
        load_lines([json.dumps(header), json.dumps(record)])


@pytest.mark.parametrize("edit", sorted(RECORD_EDITS))
def test_a_bad_record_field_is_refused_on_its_line(edit: str) -> None:
    header, record = _log()
    key, value = RECORD_EDITS[edit]
    record[key] = value
    with pytest.raises(InvalidArgument, match="line 2"):
        load_lines([json.dumps(header), json.dumps(record)])


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_that_are_not_json_are_refused(constant: str) -> None:
    header, _ = _log()
    line = '{"t": 1, "purpose": "a", "amounts": [%s], "sensitivity": null, "noise_scale": null, "sampler": null}'
    with pytest.raises(InvalidArgument, match=f"line 2: {constant} is not a JSON number"):
        load_lines([json.dumps(header), line % constant])


def test_every_exported_ledger_round_trips() -> None:
    """What the ledgers write is read back unchanged (the checks refuse nothing they write)."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=2, keep_records=True)
    ledger.spend(1, [0.5, 0.0], purpose="a")
    ledger.spend(3, 0.25, purpose="b")
    header, records = load_lines(list(ledger.jsonl()))
    assert header == ledger.header()
    assert [r.to_json() for r in records] == [r.to_json() for r in ledger.records]
