"""The examples run, the public surface is what __all__ says, and mypy --strict is clean."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

import budgetcheck

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(path.parent))
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip()
    sys.modules.pop(path.stem, None)


def test_all_is_sorted_and_exported() -> None:
    assert budgetcheck.__all__ == sorted(budgetcheck.__all__)
    public = {name for name in dir(budgetcheck) if name.isidentifier() and not name.startswith("_")}
    assert set(budgetcheck.__all__) <= public
    assert public - set(budgetcheck.__all__) <= {
        "annotations",
        "strategies",
        "cli",
        "pytest_plugin",
        "bench",
        "durable",
        "ledger",
        "stream",
        "verify",
        "mechanism",
        "extras",  # which optional extra a command needs (the light install), loaded by the commands
    }


def test_mypy_strict_is_clean() -> None:
    from mypy import api

    stdout, stderr, status = api.run(["--strict", "--config-file", str(ROOT / "pyproject.toml"), str(ROOT / "src")])
    assert status == 0, stdout + stderr
