"""What a verify result says to a person: the verdict, each stage that did not pass, the shrunk case and
the call that reproduces it. ``budgetcheck verify`` prints it under its table; the pytest plugin
reports a failing item with it and nothing else (no frames of pytest or of budgetcheck).
"""

from __future__ import annotations

from budgetcheck.strategies import VerificationCase
from budgetcheck.verify.stages import VerifyResult
from budgetcheck.verify.verdict import Outcome, Verdict


def verdict_name(result: VerifyResult) -> str:
    """The verdict as the table prints it: upper case when it fails (``VIOLATED``, ``INCONCLUSIVE``);
    a ``--stages`` subset that found no violation names the stages it skipped.

    >>> from budgetcheck import verify_mechanism
    >>> verdict_name(verify_mechanism("Uniform", stages="a", examples=5))
    'verified to a bound (b, c, d, e skipped)'
    """
    value = result.outcome.value
    name = value if result.outcome in (Outcome.PROVED, Outcome.BOUNDED) else value.upper()
    if result.skipped and result.outcome is not Outcome.VIOLATED:  # a violation is one whatever they find
        name += f" ({', '.join(result.skipped)} skipped)"
    return name


def explain(result: VerifyResult, require: str = "bounded") -> list[str]:
    """The paragraphs printed under the table for ``result``, one string each (lines joined by newlines).

    >>> from budgetcheck import verify_mechanism
    >>> explain(verify_mechanism("Uniform", stages="a", examples=5))[0].startswith("Uniform: verified to a bound")
    True
    """
    paragraphs = []
    if result.outcome is Outcome.BOUNDED and result.bound is not None:
        short = " (does not meet --require proof)" if require == "proof" else ""
        paragraphs.append(f"{result.mechanism}: verified to a bound: {result.bound.describe()}{short}")
    if result.note is not None:
        paragraphs.append(f"{result.mechanism}: --stages {result.ran}: {result.note}")
    if result.vouched:
        paragraphs.append(
            f"{result.mechanism}: vouches for a sensitivity (ledger.measure): never proved; only the "
            "statistical audit checks those releases"
        )
    for stage in result.stages:
        if stage.verdict is not Verdict.PASS:
            paragraphs.append(f"{result.mechanism} [{stage.stage}] {stage.verdict}: {stage.detail}")
    if result.counterexample is not None:
        ce, lines = result.counterexample, []
        if isinstance(ce.case, VerificationCase):
            data = ce.case.data
            lines.append(
                f"  shrunk case: kind={ce.case.kind} T={data.shape[0]} d={data.shape[1]} "
                f"epsilon={ce.case.epsilon!r} w={ce.case.w} runs={ce.case.runs} seed={ce.case.seed}"
                + (f" intrusions={list(ce.case.intrusions)}" if ce.case.intrusions else "")
            )
        lines.append(f"  reproduce: {ce.call(result.reference)}")
        if paragraphs:
            paragraphs[-1] += "\n" + "\n".join(lines)
        else:
            paragraphs.append("\n".join(lines))
    return paragraphs
