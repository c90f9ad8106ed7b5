"""The data model is frozen when a stream is bound (issue 43, item 3), tried from outside.

A mechanism gets a bound stream and its ledger; the ledger derives every sensitivity from the stream's
neighbouring relation (w-event) or from its policies (Swellfish). Each test is one route a mechanism could
take after binding to weaken that model, and shows what the route did on the code before the fix (the noise
scale fell, or an exact value came out: the comment ``found:``); after the fix the route is refused or has
no effect, and the next release is charged at the sensitivity the owner's model gives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import budgetcheck as bc

DATA = np.array([[3.0, 5.0], [7.0, 11.0], [13.0, 17.0], [19.0, 23.0]])
WIDE = bc.Neighbours.across_bins(8)  # one person adds up to 8 across bins: the counts' sensitivity is 8


def _bound() -> tuple[bc.WindowLedger, bc.GuardedStream]:
    ledger = bc.WindowLedger(epsilon=4.0, w=4, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(DATA, neighbours=WIDE)
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), 1.0)
    assert ledger.records[-1].sensitivity == 8.0  # before any route: Δ = 8
    return ledger, stream


def _sensitivity_after(ledger: bc.WindowLedger, stream: bc.GuardedStream, t: int) -> float:
    ledger.laplace(stream.secret(t), 1.0)
    return float(ledger.records[-1].sensitivity)


def _attempt(route: Callable[[], object]) -> None:
    """Run a route; a refusal (Fixed, AttributeError, TypeError) is one of the two allowed outcomes."""
    try:
        route()
    except (AttributeError, TypeError):
        pass


def test_the_relation_object_cannot_be_edited_in_place() -> None:
    """object.__setattr__ on the relation the stream shows (attrs' frozen check is only __setattr__)."""
    ledger, stream = _bound()
    with pytest.raises(AttributeError):
        object.__setattr__(stream.neighbours, "bound", 1)  # found: accepted, the next release at Δ = 1
    with pytest.raises(AttributeError):
        object.__setattr__(WIDE, "kind", "one-bin")
    assert stream.neighbours == WIDE and _sensitivity_after(ledger, stream, 2) == 8.0


def test_a_secret_cannot_be_given_another_relation() -> None:
    """Assignment and object.__setattr__ of the secret's relation (a slot)."""
    ledger, stream = _bound()
    secret = stream.secret(2)
    weak = bc.Neighbours.one_bin()
    _attempt(lambda: setattr(secret, "_neighbours", weak))  # found: accepted
    _attempt(lambda: object.__setattr__(secret, "_neighbours", weak))
    _attempt(lambda: delattr(secret, "_neighbours"))
    assert _sensitivity_after(ledger, stream, 2) == 8.0  # found: 1.0


def test_the_stream_attribute_cannot_be_replaced_on_a_live_stream() -> None:
    """A live stream makes each secret from its relation when the row arrives: replacing the stream's
    attribute after binding would weaken every later row."""
    ledger = bc.WindowLedger(epsilon=4.0, w=4, sampler="numpy-laplace", keep_records=True)
    stream = bc.LiveStream(((t + 1, row) for t, row in enumerate(DATA)), dimensions=2, neighbours=WIDE)
    ledger.bind(stream)
    _attempt(lambda: object.__setattr__(stream, "_neighbours", bc.Neighbours.one_bin()))  # found: accepted
    for secret in stream:
        ledger.laplace(secret, 1.0)
    assert {r.sensitivity for r in ledger.records} == {8.0}  # found: {1.0}


def test_a_subclass_cannot_stand_in_for_the_relation() -> None:
    """A subclass of Neighbours whose property reports a bound of 1, swapped in under the relation."""
    ledger, stream = _bound()

    def swap() -> None:
        class Weak(bc.Neighbours):  # type: ignore[misc]  # refused: Neighbours cannot be subclassed
            __slots__ = ()

            @property
            def bound(self) -> int:  # type: ignore[override]
                return 1

        object.__setattr__(stream.neighbours, "__class__", Weak)  # found: accepted, Δ = 1 at the next release

    _attempt(swap)
    assert _sensitivity_after(ledger, stream, 2) == 8.0


def test_a_foreign_class_with_the_same_layout_is_refused() -> None:
    """__class__ pointed at an unrelated class of the same slots, which answers any bound."""
    ledger, stream = _bound()

    class Fake:
        __slots__ = ("__weakref__", "bound", "kind")

        def __getattribute__(self, name: str) -> object:
            return 1 if name == "bound" else object.__getattribute__(self, name)

    _attempt(lambda: object.__setattr__(stream.neighbours, "__class__", Fake))
    try:
        sensitivity = _sensitivity_after(ledger, stream, 2)
    except bc.InvalidArgument:  # refused before the charge: no release at a weakened sensitivity
        return
    assert sensitivity == 8.0


def test_a_bound_stream_cannot_be_constructed_again() -> None:
    """Rebinding: calling the constructor again on a bound live stream would give it a fresh, unbound claim
    and the default relation, to be bound again with Δ = 1."""
    ledger = bc.WindowLedger(epsilon=4.0, w=4, sampler="numpy-laplace", keep_records=True)
    rows = ((t + 1, row) for t, row in enumerate(DATA))
    stream = bc.LiveStream(rows, dimensions=2, neighbours=WIDE)
    ledger.bind(stream)

    def again() -> None:
        bc.LiveStream.__init__(stream, rows, dimensions=2)  # found: accepted
        ledger.bind(stream)

    _attempt(again)
    for secret in stream:
        ledger.laplace(secret, 1.0)
    assert {r.sensitivity for r in ledger.records} == {8.0}  # found: {1.0}


def test_a_stored_stream_cannot_be_constructed_again() -> None:
    """The same for a GuardedStream: a second __init__ would replace its secrets and relation."""
    ledger, stream = _bound()
    _attempt(lambda: bc.GuardedStream.__init__(stream, DATA))
    assert _sensitivity_after(ledger, stream, 3) == 8.0
    assert stream.neighbours == WIDE


def test_swellfish_policies_cannot_be_changed_under_the_ledger() -> None:
    """The Swellfish ledger derives Δ_Q^t from its policy collection: replacing the collection on the ledger,
    or the precomputed sensitivities inside it, would make a timestamp free and let release_exact publish
    the true counts."""
    policies = bc.PolicyCollection([bc.StreamPolicy(1, 4, (2.0,))])
    ledger = bc.SwellfishLedger(policies, epsilon=4.0, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(DATA)
    ledger.bind(stream)
    free = bc.PolicyCollection([bc.StreamPolicy(9, 9, (1.0,))])  # no policy relevant at t <= 8
    _attempt(lambda: object.__setattr__(ledger, "_policies", free))  # found: accepted
    _attempt(lambda: object.__setattr__(policies, "_sensitivity", (0.0,) * 5))  # found: accepted
    _attempt(lambda: object.__setattr__(policies, "_relevant", ((),) * 5))
    with pytest.raises(bc.InvalidArgument, match="release_exact"):
        ledger.release_exact(stream.secret(1))  # found: the true counts [3, 5], free
    assert ledger.temporal_sensitivity(2) == 2.0
    ledger.laplace(stream.secret(2), 1.0)
    assert ledger.records[-1].sensitivity == 2.0


def test_a_personalized_stream_cannot_drop_its_requirement_set() -> None:
    """A PersonalizedLedger refuses a stream of another requirement set by the set its claim carries;
    clearing it would let the ledger account a stream whose users it does not know."""
    mine = bc.RequirementSet.from_counts([((2, 1.0), 3)])
    theirs = bc.RequirementSet.from_counts([((2, 0.25), 3)])
    stream = bc.PersonalizedStream(theirs, np.zeros((2, 3), dtype=np.int64), dimensions=2)
    secret = stream.secret(1)
    _attempt(lambda: setattr(stream._claim, "requirements", None))  # found: accepted (the claim of every secret)
    ledger = bc.PersonalizedLedger(mine, sampler="numpy-laplace")
    with pytest.raises(bc.InvalidArgument, match="another requirement set"):
        ledger.sample_release(secret, 0.5)  # found: sampled and released under the other set's ε


def test_a_personalized_ledger_keeps_its_requirement_set() -> None:
    """Replacing the requirement set on the ledger would make it accept a stream of another set (whose users
    its windows do not hold) as its own."""
    mine = bc.RequirementSet.from_counts([((2, 1.0), 3)])
    theirs = bc.RequirementSet.from_counts([((2, 0.25), 3)])
    ledger = bc.PersonalizedLedger(mine, sampler="numpy-laplace")
    _attempt(lambda: object.__setattr__(ledger, "_requirements", theirs))  # found: accepted
    _attempt(lambda: object.__setattr__(mine, "_classes", theirs.classes))  # found: accepted
    assert ledger.requirements is mine and mine.classes != theirs.classes
    stream = bc.PersonalizedStream(theirs, np.zeros((2, 3), dtype=np.int64), dimensions=2)
    with pytest.raises(bc.InvalidArgument, match="another requirement set"):
        ledger.sample_release(stream.secret(1), 0.5)  # found: sampled and released under the other set's ε
