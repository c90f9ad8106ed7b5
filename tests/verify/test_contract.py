"""A mechanism that breaks its contract with the harness (a release of the wrong shape, a non-finite one)
is the author's error: exit 2 naming their method's file and line, not a VIOLATED verdict pointing into
the library (issue 44, first day)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from budgetcheck.cli import main

SOURCE = """
import attrs, numpy as np
from budgetcheck import rounding


@attrs.frozen
class WrongShape:
    name: str = "wrongshape"

    def run(self, stream, ledger):
        out = np.zeros((ledger.runs, stream.length))
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, budget)[:, 0]
        return out


@attrs.frozen
class NotFinite:
    name: str = "notfinite"

    def run(self, stream, ledger):
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        out = np.stack([ledger.laplace(secret, budget) for secret in stream], axis=1)
        out[:, 0] = np.inf
        return out
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "contract_mechs.py"
    path.write_text(SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield path
    sys.modules.pop("contract_mechs", None)


@pytest.mark.parametrize(
    ("name", "what", "line"), [("WrongShape", "returned shape (2, 6)", 10), ("NotFinite", "non-finite", 22)]
)
def test_a_broken_contract_exits_2_at_the_authors_method(module: Path, name: str, what: str, line: int) -> None:
    result = CliRunner().invoke(main, ["verify", f"contract_mechs:{name}"])
    assert result.exit_code == 2, result.output
    assert "breaks its contract" in result.output and what in result.output
    assert f"{module}:{line})" in result.output  # the line of its run()
    assert "VIOLATED" not in result.output and "/budgetcheck/" not in result.output
    assert "Traceback" not in result.output


def test_the_contract_is_named_once(module: Path) -> None:
    result = CliRunner().invoke(main, ["verify", "contract_mechs:WrongShape"])
    assert result.output.count("returned shape") == 1, result.output
