"""Each tutorial says at its top how long it takes to follow (issue 44: measured, docs44's note)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TUTORIALS = sorted(p for p in (Path(__file__).resolve().parents[2] / "docs" / "tutorials").glob("*.md"))


@pytest.mark.parametrize("page", [p for p in TUTORIALS if p.name != "index.md"], ids=lambda p: p.name)
def test_a_tutorial_opens_with_its_time_to_follow(page: Path) -> None:
    title, blank, first = page.read_text(encoding="utf-8").splitlines()[:3]
    assert title.startswith("# ") and blank == ""
    assert re.match(r"\*Time to follow: about \d+ minutes\* \(", first), first
