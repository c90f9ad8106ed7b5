"""The pytest plugin: --budgetcheck MECH adds a verify test; the fixture asserts verification."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from budgetcheck import VerifyResult

pytest_plugins = ["pytester"]


def test_option_adds_passing_and_failing_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_placeholder():\n    pass\n")
    passing = pytester.runpytest_subprocess("--budgetcheck", "Uniform", "-p", "no:cacheprovider")
    passing.assert_outcomes(passed=2)
    pytester.makepyfile(
        broken_mech="""
import attrs, numpy as np
@attrs.frozen
class Greedy:
    name: str = "greedy"
    def run(self, stream, ledger):
        out = np.zeros((ledger.runs, stream.length, stream.dimensions))
        for secret in stream:
            out[:, secret.t - 1] = ledger.laplace(secret, ledger.params.epsilon)
        return out
"""
    )
    failing = pytester.runpytest_subprocess("--budgetcheck", "broken_mech:Greedy", "-p", "no:cacheprovider")
    failing.assert_outcomes(passed=1, failed=1)
    failing.stdout.fnmatch_lines(["*[[]ledger replay[]] fail*"])


def test_fixture_returns_the_result(budgetcheck_verify: Callable[..., VerifyResult]) -> None:
    result = budgetcheck_verify("Sample", stages="abc", examples=20)
    assert result.passed and [s.stage for s in result.stages] == ["ledger replay", "secret access", "proof"]
