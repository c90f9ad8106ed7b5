"""pytest integration: ``pytest --budgetcheck MECH`` and the ``budgetcheck_verify`` fixture.

Loaded automatically (entry point ``pytest11``). ``--budgetcheck BD --budgetcheck pkg:Mine`` adds
one test per mechanism, ``budgetcheck::pkg:Mine`` (listed by ``--collect-only``, selectable with
``-k``), that fails unless ``verify``'s verdict meets ``--budgetcheck-require`` (``bounded``, the
default: proved or verified to a bound, as ``budgetcheck verify`` exits 0; ``proof``: proved only);
``--budgetcheck-profile thorough`` trades time for power. A failure is reported as the CLI reports
it (the verdict, each stage that did not pass, the shrunk case and the call that reproduces it),
with no frames of pytest or of budgetcheck; a mechanism that cannot be loaded is one line naming it.
In a test, the fixture ``budgetcheck_verify("pkg:Mine")`` fails the same way and returns the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from budgetcheck.ledger.errors import BudgetcheckError

if TYPE_CHECKING:  # verification needs the verify extra: loaded when a mechanism is verified, so that
    # pytest, which loads this plugin wherever budgetcheck is installed, runs on the core install too
    from budgetcheck.verify.stages import VerifyResult


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


class VerificationFailed(Exception):
    """A mechanism's verdict does not meet the requirement; the message is the whole report."""


def failure_report(result: VerifyResult, require: str) -> str:
    """The report of a result that does not meet ``require``: its verdict line, then what the CLI prints."""
    from budgetcheck.verify.explain import explain, verdict_name

    bound = f" ({result.bound.describe()})" if result.bound is not None else ""
    head = f"budgetcheck verify {result.reference}: {verdict_name(result)}{bound}, --require {require}"
    return "\n\n".join([head, *explain(result, require)])


def _verify(reference: str, require: str, **options: Any) -> VerifyResult:
    from budgetcheck.extras import require_extra

    try:
        require_extra("verify", f"budgetcheck verify {reference}")
    except BudgetcheckError as error:
        raise VerificationFailed(str(error)) from None
    from budgetcheck.verify.stages import verify_mechanism

    try:
        result = verify_mechanism(reference, **options)
    except BudgetcheckError as error:  # the user's mistake (a name that does not load, a bad option)
        raise VerificationFailed(f"budgetcheck verify {reference}: {error}") from None
    if not result.meets(require):
        raise VerificationFailed(failure_report(result, require))
    return result


class BudgetcheckItem(pytest.Item):
    """One ``verify`` run as a test item."""

    def __init__(self, *, reference: str, profile: str, require: str = "bounded", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference = reference
        self.profile = profile
        self.require = require

    def runtest(self) -> None:
        _verify(self.reference, self.require, profile=self.profile)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, VerificationFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[str, int, str]:
        return "budgetcheck", 0, f"budgetcheck verify {self.reference}"


class BudgetcheckMechanisms(pytest.Collector):
    """The mechanisms named by ``--budgetcheck``, one item each."""

    def collect(self) -> Iterator[pytest.Item]:
        profile, require = (
            self.config.getoption("--budgetcheck-profile"),
            self.config.getoption("--budgetcheck-require"),
        )
        for reference in dict.fromkeys(self.config.getoption("--budgetcheck")):
            yield BudgetcheckItem.from_parent(
                self, name=reference, reference=reference, profile=profile, require=require
            )


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: they apply to these items too
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--budgetcheck"):
        return
    collector = BudgetcheckMechanisms.from_parent(session, name="budgetcheck", nodeid="budgetcheck")
    report = session.ihook.pytest_make_collect_report(collector=collector)
    session.ihook.pytest_collectreport(report=report)  # counted and listed like the files' tests
    items.extend(item for item in report.result if isinstance(item, pytest.Item))


@pytest.fixture
def budgetcheck_verify() -> Callable[..., VerifyResult]:
    """Fail the test unless a mechanism verifies, and return its result:
    ``budgetcheck_verify("pkg:Mine", profile="quick", require="bounded")``."""

    def check(reference: str, require: str = "bounded", **options: Any) -> VerifyResult:
        try:
            return _verify(reference, require, **options)
        except VerificationFailed as failure:
            report = str(failure)
        # failed outside the except block: inside it, pytest printed the report twice ("During handling
        # of the above exception, another exception occurred")
        pytest.fail(report, pytrace=False)

    return check
