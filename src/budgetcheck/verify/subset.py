"""What a ``--stages`` subset's verdict means: which stages were skipped and what verdict that leaves.

A subset reports a verdict from the full run's vocabulary (:class:`budgetcheck.verify.verdict.Outcome`),
computed by the same rule from the stages that ran. Where those stages decide it (a stage failed:
*violated*, whatever the others find) it is the full run's verdict; otherwise it is what the stages
run leave, and :func:`skipped_note` says which were skipped and what a full run may still say: a
skipped stage can only find a violation, or (with the proof, c, and rule conformance, e) prove it.
A subset that runs no stage covering the mechanism's code (``--stages c``, ``b`` or ``d``: the proof
covers the code only together with e's rule conformance) is *inconclusive*, and the note says which
letters to add.
"""

from __future__ import annotations

from collections.abc import Mapping

from budgetcheck.verify.verdict import INCONCLUSIVE, NOT_PROVED, PASS, Outcome

# the stage letters of ``verify --stages`` and what each runs (e runs exploration and, for a rule, conformance)
LETTERS = {
    "a": "ledger replay",
    "b": "secret access",
    "c": "proof",
    "d": "statistical audit",
    "e": "exploration and rule conformance",
}


def skipped_letters(ran: str) -> str:
    """The stage letters not in ``ran``, in order (``""`` for a full run).

    >>> skipped_letters("ce")
    'abd'
    """
    return "".join(letter for letter in LETTERS if letter not in ran)


def skipped_note(ran: str, verdict: Outcome, stages: Mapping[str, str], *, vouched: bool = False) -> str | None:
    """The sentence a subset's verdict carries: the stages skipped and what verdict that leaves (None
    for a full run). ``stages``: each stage's name and verdict as run; ``vouched``: some release's
    sensitivity was the mechanism's word (only the statistical audit, d, checks those).

    >>> print(skipped_note("c", Outcome.INCONCLUSIVE, {"proof": "pass"}))
    skipped a (ledger replay), b (secret access), d (statistical audit), e (exploration and rule conformance): \
that leaves inconclusive, since no stage that covers the mechanism's code ran (a proof covers it only with e's \
rule conformance); add a or e for verified to a bound, e to the proof for proved
    """
    skipped = skipped_letters(ran)
    if not skipped:
        return None
    named = ", ".join(f"{letter} ({LETTERS[letter]})" for letter in skipped)
    head = f"skipped {named}: "
    rest = f"the skipped stage{'s' if len(skipped) > 1 else ''} can still find a violation"
    if verdict is Outcome.VIOLATED:
        return head + "violated whatever they find, as a full run says"
    undecided = sorted(name for name, found in stages.items() if found == INCONCLUSIVE)
    if verdict is Outcome.INCONCLUSIVE and undecided:
        return head + f"that leaves inconclusive, since {' and '.join(undecided)} could not decide; {rest}"
    if verdict is Outcome.INCONCLUSIVE and vouched and "d" in skipped:
        return head + (
            "that leaves inconclusive, since the mechanism vouches for a sensitivity whose releases only d "
            "(statistical audit) checks; add d for verified to a bound"
        )
    if verdict is Outcome.INCONCLUSIVE:
        proof = stages.get("proof")
        proved = (
            ", e to the proof for proved" if proof == PASS else "" if proof == NOT_PROVED else ", c and e for proved"
        )
        alone = " (a proof covers it only with e's rule conformance)" if "c" in ran else ""
        return head + (
            f"that leaves inconclusive, since no stage that covers the mechanism's code ran{alone}; "
            f"add a or e for verified to a bound{proved}"
        )
    if verdict is Outcome.PROVED:
        return head + f"proved by the proof and rule conformance; {rest}, which a full run would report as violated"
    no_rule = stages.get("proof") == NOT_PROVED or ("e" in ran and "rule conformance" not in stages)
    departed = stages.get("rule conformance") == NOT_PROVED
    raise_it = (
        ""
        if no_rule or departed or vouched
        else "; with c and e a full run says proved if the mechanism exposes an allocation rule both pass"
    )
    return head + f"verified to a bound by the stages run; {rest}{raise_it}"
