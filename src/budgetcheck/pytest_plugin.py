"""pytest integration: ``pytest --budgetcheck MECH`` and the ``budgetcheck_verify`` fixture.

Loaded automatically (entry point ``pytest11``). ``--budgetcheck BD --budgetcheck pkg:Mine`` adds
one test per mechanism that fails unless ``verify``'s verdict meets ``--budgetcheck-require``
(``bounded``, the default: proved or verified to a bound, as ``budgetcheck verify`` exits 0;
``proof``: proved only); ``--budgetcheck-profile thorough`` trades time for power. In a test, the
fixture ``budgetcheck_verify("pkg:Mine")`` asserts the same and returns the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from budgetcheck.verify.stages import VerifyResult, verify_mechanism


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("budgetcheck")
    group.addoption(
        "--budgetcheck", action="append", default=[], metavar="MECH", help="verify this mechanism (repeatable)"
    )
    group.addoption("--budgetcheck-profile", default="quick", choices=["quick", "thorough"], help="verify profile")
    group.addoption(
        "--budgetcheck-require",
        default="bounded",
        choices=["bounded", "proof"],
        help="what passes: bounded (proved or verified to a bound) or proof (proved only)",
    )


def _explain(result: VerifyResult) -> str:
    bound = f" ({result.bound.describe()})" if result.bound is not None else ""
    lines = [f"{result.mechanism}: {result.outcome.value}{bound}"]
    lines += [f"  [{stage.stage}] {stage.verdict}: {stage.detail}" for stage in result.stages]
    if result.counterexample is not None:
        lines.append(f"  reproduce: {result.counterexample.call(result.reference)}")
    return "\n".join(lines)


class BudgetcheckItem(pytest.Item):
    """One ``verify`` run as a test item."""

    def __init__(self, *, reference: str, profile: str, require: str = "bounded", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference = reference
        self.profile = profile
        self.require = require

    def runtest(self) -> None:
        result = verify_mechanism(self.reference, profile=self.profile)
        if not result.meets(self.require):
            raise AssertionError(_explain(result))

    def reportinfo(self) -> tuple[str, int, str]:
        return "budgetcheck", 0, f"budgetcheck verify {self.reference}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    profile, require = config.getoption("--budgetcheck-profile"), config.getoption("--budgetcheck-require")
    for reference in config.getoption("--budgetcheck"):
        items.append(
            BudgetcheckItem.from_parent(
                session, name=f"budgetcheck[{reference}]", reference=reference, profile=profile, require=require
            )
        )


@pytest.fixture
def budgetcheck_verify() -> Callable[..., VerifyResult]:
    """Assert that a mechanism verifies: ``budgetcheck_verify("pkg:Mine", profile="quick", require="bounded")``."""

    def check(reference: str, require: str = "bounded", **options: Any) -> VerifyResult:
        result = verify_mechanism(reference, **options)
        assert result.meets(require), _explain(result)
        return result

    return check
