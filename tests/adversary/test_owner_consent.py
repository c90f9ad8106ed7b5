"""The ledger's owner, not the mechanism, opts in to in-process code and vouched sensitivities (issue 43, item 2).

Tried from outside: a mechanism that holds a ledger whose owner did not opt in asks for each route, and
tries to flip the owner's flags; every request is refused before anything is charged or bound.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck.ledger.threshold import deviation
from budgetcheck.verify.verdict import Outcome

DATA = np.array([[3.0, 5.0], [7.0, 11.0], [13.0, 17.0]])


def _measure(ledger: bc.WindowLedger | bc.SwellfishLedger, secret: bc.Secret, isolation: str = "fork") -> object:
    return ledger.measure(lambda v: v, secret, sensitivity=1.0, epsilon=0.5, shape=secret.shape, isolation=isolation)


@pytest.mark.parametrize(
    "make",
    [
        lambda **k: bc.WindowLedger(epsilon=1.0, w=2, **k),
        lambda **k: bc.WindowLedger.with_epsilons([1.0], 2, **k),
        lambda **k: bc.SwellfishLedger(bc.PolicyCollection([bc.StreamPolicy(1, 3, (1.0,))]), epsilon=1.0, **k),
    ],
    ids=["window", "with_epsilons", "swellfish"],
)
def test_every_route_is_refused_before_the_charge_without_consent(make: object) -> None:
    ledger = make()  # type: ignore[operator]
    stream = bc.GuardedStream(DATA)
    for isolation in ("fork", "trusted"):
        with pytest.raises(bc.NotAllowed, match="owner has not allowed: nothing was charged"):
            _measure(ledger, stream.secret(1), isolation)
    assert ledger.t == 0 and ledger.vouched == 0 and ledger.in_process == 0
    assert ledger.remaining(1).tolist() == [1.0]
    other = make(allow_vouched=True)  # type: ignore[operator]
    other.bind(stream)  # the refusals bound nothing: another ledger may still take the stream
    with pytest.raises(bc.NotAllowed, match="trusted_code=True"):
        _measure(other, stream.secret(1), "trusted")  # vouching allowed, in-process code not
    _measure(other, stream.secret(1))
    assert other.vouched == 1 and other.in_process == 0


def test_footprints_and_own_statistics_need_consent_too() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace")
    stream = bc.GuardedStream(DATA)
    with pytest.raises(bc.NotAllowed, match="measure_footprint"):
        ledger.measure_footprint(lambda v: v.sum(axis=0), list(stream)[:2], sensitivity=2.0, epsilon=0.2, shape=2)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(2,))
    with pytest.raises(bc.NotAllowed, match="statistic of its own"):
        test.query(stream.secret(1), lambda rows: np.nansum(rows, axis=1), 5.0)
    assert ledger.t == 0
    test.query(stream.secret(1), deviation, 5.0)  # the library's own statistic: derived, no consent needed
    assert ledger.t == 1 and ledger.vouched == 0


def test_the_flags_cannot_be_flipped_by_the_mechanism() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=2)
    for name in ("_trusted_code", "_allow_vouched"):
        with pytest.raises(bc.Fixed):
            object.__setattr__(ledger, name, True)
        with pytest.raises(bc.Fixed):
            setattr(ledger, name, True)
        with pytest.raises(bc.Fixed):
            delattr(ledger, name)
    with pytest.raises(AttributeError):
        ledger.allow_vouched = True  # type: ignore[misc]
    assert not hasattr(ledger, "__dict__")
    patched = bc.PersonalizedLedger.__mro__[1]  # LedgerCore: an attribute put over the slot on the class
    saved = patched.__dict__["_allow_vouched"]
    try:
        type.__setattr__(patched, "_allow_vouched", True)
        with pytest.raises(bc.NotAllowed):
            _measure(ledger, bc.GuardedStream(DATA).secret(1))  # the library reads the slot, not the class
    finally:
        type.__setattr__(patched, "_allow_vouched", saved)
    with pytest.raises(bc.InvalidArgument, match="trusted_code=1 must be True or False"):
        bc.WindowLedger(epsilon=1.0, w=2, trusted_code=1)  # type: ignore[arg-type]


def test_a_ledger_file_keeps_the_owner_flags_of_the_ledger_given(tmp_path: Path) -> None:
    with bc.open_ledger(tmp_path / "l.db", bc.WindowLedger(epsilon=1.0, w=2)) as ledger:
        with pytest.raises(bc.NotAllowed):
            _measure(ledger, bc.GuardedStream(DATA).secret(1))
        assert ledger.t == 0
    with bc.open_ledger(tmp_path / "l.db", bc.WindowLedger(epsilon=1.0, w=2, allow_vouched=True)) as ledger:
        _measure(ledger, bc.GuardedStream(DATA).secret(1))
        assert ledger.vouched == 1


def test_verify_reports_a_refused_mechanism_inconclusive_and_judges_it_with_the_flags() -> None:
    """verify's ledgers refuse as production's do: the mechanism that vouches is inconclusive (not violated,
    never a pass); with --allow-vouched it is judged as before (vouched: never proved)."""
    refused = bc.verify_mechanism("broken.mutants:MeasureTinySensitivity", examples=3, stages="a")
    assert refused.outcome is Outcome.INCONCLUSIVE, [s.to_json() for s in refused.stages]
    assert refused.counterexample is not None and "--allow-vouched" in refused.counterexample.detail
    allowed = bc.verify_mechanism(
        "broken.mutants:MeasureTinySensitivity", examples=3, stages="a", trusted_code=True, allow_vouched=True
    )
    assert allowed.vouched and allowed.outcome is Outcome.INCONCLUSIVE and allowed.counterexample is None


_HEADER = """
from __future__ import annotations

import attrs
import numpy as np

from budgetcheck import rounding
"""

_VOUCHING = """
@attrs.frozen
class Mech:
    name: str = "vouches"

    def run(self, stream, ledger):
        return np.stack(list(self.releases(stream, ledger)), axis=1)

    def releases(self, stream, ledger):
        budget = rounding.share(ledger.params.epsilon, ledger.params.w)
        for s in stream:
            yield ledger.measure(lambda v: v, s, sensitivity=1.0, epsilon=budget, shape=s.shape)
"""


def test_the_cli_publishes_through_a_vouching_mechanism_only_when_told(tmp_path: Path, mechanism_module) -> None:  # type: ignore[no-untyped-def]
    """budgetcheck publish: the publisher is the ledger's owner; --allow-vouched is its consent."""
    from click.testing import CliRunner

    from budgetcheck.cli import main

    name = mechanism_module("consent_vouching", _VOUCHING)
    rows = tmp_path / "in.csv"
    rows.write_text("1,3,5\n2,7,11\n", encoding="utf-8")
    args = ["publish", f"{name}:Mech", "--ledger", str(tmp_path / "l.db"), "--epsilon", "1", "--w", "2"]
    args += ["-d", "2", "--input", str(rows), "--out", str(tmp_path / "out.csv")]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "allow_vouched=True" in refused.output, refused.output
    assert not (tmp_path / "out.csv").exists() or (tmp_path / "out.csv").read_text() == ""
    allowed = CliRunner().invoke(main, [*args, "--allow-vouched"])
    assert allowed.exit_code == 0, allowed.output
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 2


def test_verify_and_bench_take_the_consent_only_when_told() -> None:
    """budgetcheck verify: without --allow-vouched the refusal is named (inconclusive, exit 3, no pass); a
    Benchmark's consent is off by default and not part of what makes stored results comparable."""
    import attrs
    from click.testing import CliRunner

    from budgetcheck.bench import Benchmark
    from budgetcheck.cli import main

    args = ["verify", "broken.mutants:MeasureTinySensitivity", "--stages", "a", "--examples", "3"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 3 and "not allowed by the ledger's owner" in refused.output, refused.output
    allowed = CliRunner().invoke(main, [*args, "--allow-vouched", "--trusted-code"])
    assert allowed.exit_code == 3 and "not allowed" not in allowed.output, allowed.output
    assert "vouches for a sensitivity" in allowed.output
    quick = Benchmark.quick()
    assert not quick.trusted_code and not quick.allow_vouched
    assert attrs.evolve(quick, allow_vouched=True).identity() == quick.identity()
