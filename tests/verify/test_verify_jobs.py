"""``verify`` gives the same report for a seed whatever ran before it, and with any ``--jobs``.

Hypothesis draws constants from the source of every local module loaded; the replay and the
non-interference pairs pin that pool to the mechanism's own module, so a module with other
constants imported in between changes nothing, and a mechanism verified in a worker process is
reported as it is in the caller's.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import budgetcheck
from budgetcheck.cli import main
from budgetcheck.verify.stages import verify_mechanism

_CONSTANTS = "\n".join(f"LIMIT_{i} = {10_007 * i + 12_345}\nSCALE_{i} = {1_000.25 + 1.37 * i!r}" for i in range(60))


def test_modules_loaded_in_between_change_no_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every module of budgetcheck (what a whole verify of another mechanism loads) and a module of
    other constants, loaded between two replays of the same seed, change nothing."""
    before = verify_mechanism("Sample", stages="a").to_json()
    (tmp_path / "many_constants_here.py").write_text(_CONSTANTS + "\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in pkgutil.walk_packages(budgetcheck.__path__, "budgetcheck."):
        if module.name != "budgetcheck.pytest_plugin":
            importlib.import_module(module.name)
    importlib.import_module("many_constants_here")
    try:
        after = verify_mechanism("Sample", stages="a").to_json()
    finally:
        sys.modules.pop("many_constants_here", None)
    assert after == before


@pytest.mark.bitwise
def test_jobs_give_the_same_json_in_the_same_order() -> None:
    arguments = ["verify", "Uniform", "Sample", "BD", "--stages", "abc", "--examples", "20", "--json"]
    one = CliRunner().invoke(main, arguments)
    two = CliRunner().invoke(main, [*arguments, "--jobs", "2"])
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    assert [r["mechanism"] for r in json.loads(two.output)["results"]] == ["Uniform", "Sample", "BD"]
    assert json.loads(two.output) == json.loads(one.output)


def test_jobs_name_a_mechanism_that_does_not_load_and_exit_2() -> None:
    result = CliRunner().invoke(main, ["verify", "Uniform", "NoSuchMechanism", "--stages", "a", "--jobs", "2"])
    assert result.exit_code == 2
    assert "NoSuchMechanism" in result.output and "Traceback" not in result.output


def test_jobs_must_be_positive() -> None:
    result = CliRunner().invoke(main, ["verify", "Uniform", "--jobs", "0"])
    assert result.exit_code == 2 and "--jobs" in result.output
