"""pytest integration: ``pytest --budgetcheck MECH`` and the ``budgetcheck_verify`` fixture.

Loaded automatically (entry point ``pytest11``). ``--budgetcheck BD --budgetcheck pkg:Mine`` adds
one test per mechanism that fails unless ``verify`` passes every stage;
``--budgetcheck-profile thorough`` trades time for power. In a test, the fixture
``budgetcheck_verify("pkg:Mine")`` asserts the same and returns the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from budgetcheck._verify import VerifyResult, verify_mechanism


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("budgetcheck")
    group.addoption("--budgetcheck", action="append", default=[], metavar="MECH", help="verify this mechanism (repeatable)")
    group.addoption("--budgetcheck-profile", default="quick", choices=["quick", "thorough"], help="verify profile")


def _explain(result: VerifyResult) -> str:
    lines = [f"{result.mechanism}: {result.verdict}"]
    lines += [f"  [{stage.stage}] {stage.verdict}: {stage.detail}" for stage in result.stages]
    if result.counterexample is not None:
        lines.append(f"  reproduce: {result.counterexample.call(result.reference)}")
    return "\n".join(lines)


class BudgetcheckItem(pytest.Item):
    """One ``verify`` run as a test item."""

    def __init__(self, *, reference: str, profile: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference = reference
        self.profile = profile

    def runtest(self) -> None:
        result = verify_mechanism(self.reference, profile=self.profile)
        if not result.passed:
            raise AssertionError(_explain(result))

    def reportinfo(self) -> tuple[str, int, str]:
        return "budgetcheck", 0, f"budgetcheck verify {self.reference}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    profile = config.getoption("--budgetcheck-profile")
    for reference in config.getoption("--budgetcheck"):
        items.append(BudgetcheckItem.from_parent(session, name=f"budgetcheck[{reference}]", reference=reference, profile=profile))


@pytest.fixture
def budgetcheck_verify() -> Callable[..., VerifyResult]:
    """Assert that a mechanism verifies: ``budgetcheck_verify("pkg:Mine", profile="quick")``."""

    def check(reference: str, **options: Any) -> VerifyResult:
        result = verify_mechanism(reference, **options)
        assert result.passed, _explain(result)
        return result

    return check
