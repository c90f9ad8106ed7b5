"""What the outside attacks share: a mechanism written as a third party's module."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def mechanism_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[object]:
    """Writes a mechanism module (the test module's ``_HEADER`` plus ``body``) to tmp_path, importable by its
    name as a user's module is (``budgetcheck verify name:Mech``), and forgets it afterwards."""
    header = getattr(request.module, "_HEADER", "")
    written: list[str] = []

    def write(name: str, body: str) -> str:
        (tmp_path / f"{name}.py").write_text(header + textwrap.dedent(body), encoding="utf-8")
        written.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield write
    for name in written:
        sys.modules.pop(name, None)
