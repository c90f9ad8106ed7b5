"""Personalized w-event requirements (Du et al. 2025, Definition of (w, ε)-EPDP).

Every user i states (w_i, ε_i): any w_i consecutive timestamps may cost user i at most ε_i. Users
are grouped by distinct requirement, so a million users in five classes cost five checks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import final

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import check_epsilon, check_positive_int


def _window(value: object) -> int:
    return check_positive_int(value, "w")


@attrs.frozen(order=True)
class Requirement:
    """One privacy requirement (w, ε): a window length w >= 1 and a finite budget ε > 0."""

    w: int = attrs.field(converter=_window)
    epsilon: float = attrs.field(converter=check_epsilon)


def _as_requirement(value: object, where: str) -> Requirement:
    if isinstance(value, Requirement):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        w, eps = value
        try:
            return Requirement(w=w, epsilon=eps)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
    raise InvalidArgument(f"{where}={value!r} must be a Requirement or a pair (w, epsilon)")


@final
class RequirementSet:
    """The (w_i, ε_i) of every user, grouped into classes of equal requirement.

    Build from a sequence of pairs (users are 0..n−1), from a mapping user id -> pair, or with
    :meth:`from_counts` (n_c anonymous users per class, ids 0..n−1 in class order). Classes are
    sorted by (w, ε); ``user_classes[i]`` is the class of the i-th user.
    """

    __slots__ = ("_classes", "_counts", "_ids", "_index", "_ranges", "_user_classes")

    def __init__(self, requirements: Sequence[object] | Mapping[Hashable, object]) -> None:
        if isinstance(requirements, Mapping):
            ids: list[Hashable] | None = list(requirements)
            pairs = [_as_requirement(requirements[u], f"requirements[{u!r}]") for u in requirements]
        elif isinstance(requirements, Sequence) and not isinstance(requirements, str):
            ids = None
            pairs = [_as_requirement(r, f"requirements[{i}]") for i, r in enumerate(requirements)]
        else:
            raise InvalidArgument(
                f"requirements={requirements!r} must be a sequence of (w, epsilon) or a mapping user -> (w, epsilon)"
            )
        if not pairs:
            raise InvalidArgument("requirements is empty: a personalized ledger needs at least one user")
        classes = sorted(set(pairs))
        position = {req: c for c, req in enumerate(classes)}
        self._classes = tuple(classes)
        self._user_classes = np.array([position[p] for p in pairs], dtype=np.int64)
        self._user_classes.setflags(write=False)
        self._counts = tuple(int(n) for n in np.bincount(self._user_classes, minlength=len(classes)))
        self._ids = ids
        self._index = None if ids is None else {u: i for i, u in enumerate(ids)}
        self._ranges: list[tuple[tuple[int, int], ...] | None] = []  # see class_ranges (empty: not yet looked at)

    @classmethod
    def from_counts(cls, classes: Iterable[tuple[object, int]]) -> RequirementSet:
        """``[((w, ε), n_users), ...]``: anonymous users, numbered class by class (cheap for millions)."""
        self = cls.__new__(cls)
        merged: dict[Requirement, int] = {}
        for index, item in enumerate(classes):
            if not isinstance(item, Sequence) or len(item) != 2:
                raise InvalidArgument(f"classes[{index}]={item!r} must be ((w, epsilon), n_users)")
            req = _as_requirement(item[0], f"classes[{index}]")
            merged[req] = merged.get(req, 0) + check_positive_int(item[1], f"classes[{index}] n_users")
        if not merged:
            raise InvalidArgument("classes is empty: a personalized ledger needs at least one user")
        ordered = sorted(merged)
        self._classes = tuple(ordered)
        self._counts = tuple(merged[r] for r in ordered)
        self._user_classes = np.repeat(np.arange(len(ordered)), self._counts)
        self._user_classes.setflags(write=False)
        self._ids = None
        self._index = None
        self._ranges = []
        return self

    @property
    def classes(self) -> tuple[Requirement, ...]:
        return self._classes

    @property
    def counts(self) -> tuple[int, ...]:
        """n_c, the number of users of each class."""
        return self._counts

    @property
    def n_classes(self) -> int:
        return len(self._classes)

    @property
    def n_users(self) -> int:
        return int(self._user_classes.size)

    @property
    def user_classes(self) -> NDArray[np.int64]:
        return self._user_classes

    @property
    def class_ranges(self) -> tuple[tuple[int, int], ...] | None:
        """The columns [start, end) of each class when every class's users are adjacent in column order
        (:meth:`from_counts`, or users listed class by class), else None; found once, then kept."""
        if not self._ranges:
            classes = self._user_classes
            starts = np.flatnonzero(np.diff(classes, prepend=-1))  # the first column of each run of one class
            if starts.size != len(self._classes):  # some class comes back after another: not adjacent
                self._ranges.append(None)
            else:
                ends = [*starts[1:].tolist(), int(classes.size)]
                ranges = dict(zip(classes[starts].tolist(), zip(starts.tolist(), ends, strict=True), strict=True))
                self._ranges.append(tuple(ranges[c] for c in range(len(self._classes))))
        return self._ranges[0]

    @property
    def users(self) -> tuple[Hashable, ...]:
        """Every user id, in column order (0..n−1 unless built from a mapping)."""
        return tuple(range(self.n_users)) if self._ids is None else tuple(self._ids)

    def index_of(self, user: object) -> int:
        """The column of ``user`` (its id if built from a mapping, else its position)."""
        if self._index is not None:
            try:
                return self._index[user]
            except (KeyError, TypeError):
                raise InvalidArgument(f"user {user!r} is unknown: not in the requirement set") from None
        if isinstance(user, (int, np.integer)) and not isinstance(user, bool) and 0 <= user < self.n_users:
            return int(user)
        raise InvalidArgument(f"user {user!r} is unknown: users are numbered 0..{self.n_users - 1}")

    def class_of(self, user: object) -> Requirement:
        return self._classes[int(self._user_classes[self.index_of(user)])]

    def strictest(self) -> Requirement:
        """(max w_i, min ε_i): one requirement that implies every user's (Du et al.'s non-personalized baseline)."""
        return Requirement(w=max(r.w for r in self._classes), epsilon=min(r.epsilon for r in self._classes))

    def __repr__(self) -> str:
        parts = ", ".join(
            f"(w={r.w}, epsilon={r.epsilon!r}) x {n}" for r, n in zip(self._classes, self._counts, strict=True)
        )
        return f"RequirementSet({parts})"


# the classes and their users are fixed once made (issue 43, item 3); _ranges is a cache filled on first use
seal(RequirementSet, "_classes", "_counts", "_ids", "_index", "_user_classes")
