"""The neighbouring relation a stream carries: how one person can change one timestamp's counts.

w-event privacy (Kellaris et al. 2014, Def. 2-3) compares streams whose timestamps differ in
neighbouring databases; what "neighbouring" means is a property of the data, not of a release,
so the stream states it and the ledger derives every sensitivity from it (never the caller).
Writing x, x' for one timestamp's histograms of d bins and Δ = x' − x:

- ``one_bin(k)``: a person is added or removed and contributes up to k to ONE bin
  (Δ = c·e_j, 0 < |c| <= k). The default, k = 1: one person, one bin per timestamp.
- ``across_bins(k)``: a person is added or removed and contributes up to k in total across
  bins (Δ >= 0 or Δ <= 0 entrywise, ‖Δ‖₁ <= k).
- ``replace_one()``: a person moves from one bin to another (bounded DP: Δ = e_i − e_j, i ≠ j;
  ‖Δ‖₁ = 2, at most 1 per bin).

The identity release's L1 sensitivity max ‖Δ‖₁ is k, k and 2 respectively.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Literal

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.sealed import seal

Kind = Literal["one-bin", "across-bins", "replace-one"]
KINDS: tuple[Kind, ...] = ("one-bin", "across-bins", "replace-one")


def _check_bound(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{attribute.name}={value!r} must be an integer >= 1 (a person's largest contribution)")


def _check_kind(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in KINDS:
        raise InvalidArgument(f"{attribute.name}={value!r} must be one of {list(KINDS)}")


@attrs.frozen
class Neighbours:
    """One timestamp's neighbouring relation (see the module docstring); build it with the class methods."""

    kind: Kind = attrs.field(validator=_check_kind)
    bound: int = attrs.field(default=1, validator=_check_bound)

    @classmethod
    def one_bin(cls, k: int = 1) -> Neighbours:
        """A person is added or removed, contributing up to ``k`` to one bin (default k = 1)."""
        return cls("one-bin", k)

    @classmethod
    def across_bins(cls, k: int) -> Neighbours:
        """A person is added or removed, contributing up to ``k`` in total across bins (L1 bound k)."""
        return cls("across-bins", k)

    @classmethod
    def replace_one(cls) -> Neighbours:
        """A person moves from one bin to another (Δ = e_i − e_j: L1 norm 2, at most 1 per bin)."""
        return cls("replace-one", 1)

    @property
    def identity_sensitivity(self) -> float:
        """max ‖x' − x‖₁ over neighbours: the L1 sensitivity of releasing the counts themselves."""
        return 2.0 if self.kind == "replace-one" else float(self.bound)

    @property
    def per_bin(self) -> int:
        """max |x'_j − x_j|: the most one bin can change."""
        return 1 if self.kind == "replace-one" else self.bound

    def changes(self, d: int) -> Iterator[NDArray[np.int64]]:
        """Every integer change Δ = x' − x the relation allows on d bins (the relation itself, for
        brute-force checks; whether x + Δ >= 0 is the caller's to test)."""
        if self.kind == "one-bin":
            for j, c in itertools.product(range(d), range(1, self.bound + 1)):
                for sign in (1, -1):
                    delta = np.zeros(d, dtype=np.int64)
                    delta[j] = sign * c
                    yield delta
        elif self.kind == "across-bins":
            for v in itertools.product(range(self.bound + 1), repeat=d):
                if 0 < sum(v) <= self.bound:
                    yield np.array(v, dtype=np.int64)
                    yield -np.array(v, dtype=np.int64)
        else:
            for i, j in itertools.permutations(range(d), 2):
                delta = np.zeros(d, dtype=np.int64)
                delta[i], delta[j] = 1, -1
                yield delta

    def __str__(self) -> str:
        if self.kind == "replace-one":
            return "replace-one (a person moves between bins)"
        where = " to one bin" if self.kind == "one-bin" else " across bins"
        return f"{self.kind} (a person added or removed, contributing up to {self.bound}{where})"


# A relation is fixed once made (issue 43, item 3): attrs' frozen check is only __setattr__, so the fields are
# sealed against object.__setattr__ too, and no subclass can report other fields (ledger.sealed).
seal(Neighbours, "kind", "bound")

DEFAULT = Neighbours.one_bin()
MOST_BOUND = 2**53  # the largest bound a sensitivity is derived from: every integer up to it is a double


def usable(relation: object) -> object:
    """``relation``, refused where no sensitivity can be derived from it exactly: a bound above 2^53 rounds
    (2^53 + 1 to nearest: down) or passes every double (2^1100). A Neighbours accepts any integer bound, so
    the refusal comes at the first charged operation that derives one, as an InvalidArgument before the charge."""
    if type(relation) is not Neighbours:  # a class of the same layout put under it (__class__) reports anything
        raise InvalidArgument(
            f"the stream's relation is a {type(relation).__name__}, not a Neighbours: no sensitivity is derived from it"
        )
    if relation.bound > MOST_BOUND:
        bits = relation.bound.bit_length()
        shown = repr(relation.bound) if bits <= 64 else f"an integer of {bits} bits"
        raise InvalidArgument(
            f"neighbours={relation.kind}, bound={shown}: a sensitivity is derived from bounds up to "
            f"2^53 = {MOST_BOUND} (every larger one rounds or passes the largest double)"
        )
    return relation


def check_neighbours(value: object) -> Neighbours:
    """A stream's ``neighbours=`` argument."""
    if not isinstance(value, Neighbours):
        raise InvalidArgument(
            f"neighbours={value!r} must be a Neighbours (Neighbours.one_bin(), .across_bins(k), .replace_one())"
        )
    return value
