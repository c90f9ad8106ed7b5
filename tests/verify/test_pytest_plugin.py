"""The pytest plugin: --budgetcheck MECH adds a verify test; the fixture asserts verification."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from budgetcheck import VerifyResult

pytest_plugins = ["pytester"]

GREEDY = """
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


def test_option_adds_passing_and_failing_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_placeholder():\n    pass\n")
    passing = pytester.runpytest_subprocess("--budgetcheck", "Uniform", "-p", "no:cacheprovider")
    passing.assert_outcomes(passed=2)
    pytester.makepyfile(broken_mech=GREEDY)
    failing = pytester.runpytest_subprocess("--budgetcheck", "broken_mech:Greedy", "-p", "no:cacheprovider")
    failing.assert_outcomes(passed=1, failed=1)
    failing.stdout.fnmatch_lines(["*[[]ledger replay[]] fail*"])


def test_a_failing_mechanism_is_reported_as_the_cli_reports_it_without_internals(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(broken_mech=GREEDY)
    failing = pytester.runpytest_subprocess("--budgetcheck", "broken_mech:Greedy", "-p", "no:cacheprovider")
    failing.assert_outcomes(failed=1)
    text = failing.stdout.str()
    failing.stdout.fnmatch_lines(
        [
            "budgetcheck verify broken_mech:Greedy: VIOLATED*",
            "*[[]ledger replay[]] fail*",
            "*reproduce: budgetcheck.execute(*",
        ]
    )
    assert len(text.splitlines()) < 40, text  # was 884 lines of pytest's frames
    assert "_pytest" not in text and "site-packages" not in text and "Traceback" not in text, text


def test_a_mechanism_that_does_not_load_is_one_line_naming_it(pytester: pytest.Pytester) -> None:
    failing = pytester.runpytest_subprocess("--budgetcheck", "Unifrom", "-p", "no:cacheprovider")
    failing.assert_outcomes(failed=1)
    failing.stdout.fnmatch_lines(["budgetcheck verify Unifrom: mechanism='Unifrom' is not built in*"])
    assert "Traceback" not in failing.stdout.str() and "_pytest" not in failing.stdout.str()


def test_collect_only_lists_and_counts_the_items_and_k_selects_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_placeholder():\n    pass\n")
    listed = pytester.runpytest_subprocess(
        "--budgetcheck", "Uniform", "--budgetcheck", "Sample", "--collect-only", "-q", "-p", "no:cacheprovider"
    )
    listed.stdout.fnmatch_lines(["budgetcheck::Uniform", "budgetcheck::Sample", "3 tests collected*"])
    chosen = pytester.runpytest_subprocess(
        "--budgetcheck", "Uniform", "--budgetcheck", "broken:Nope", "-k", "Uniform", "-p", "no:cacheprovider"
    )
    chosen.assert_outcomes(passed=1, deselected=2)


def test_the_fixture_fails_with_the_report_and_no_frames(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(broken_mech=GREEDY)
    pytester.makepyfile(test_mine="def test_mine(budgetcheck_verify):\n    budgetcheck_verify('broken_mech:Greedy')\n")
    failing = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    failing.assert_outcomes(failed=1)
    failing.stdout.fnmatch_lines(["*budgetcheck verify broken_mech:Greedy: VIOLATED*", "*reproduce:*"])
    assert "_pytest" not in failing.stdout.str() and "def check(" not in failing.stdout.str()


def test_fixture_returns_the_result(budgetcheck_verify: Callable[..., VerifyResult]) -> None:
    result = budgetcheck_verify("Sample", stages="abc", examples=20)
    assert result.passed and [s.stage for s in result.stages] == ["ledger replay", "secret access", "proof"]
