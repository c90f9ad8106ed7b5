"""The guarded stream: hands a mechanism one opaque :class:`Secret` per timestamp."""

from __future__ import annotations

from collections.abc import Iterator
from typing import final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck._errors import InvalidArgument, SecretAccess
from budgetcheck._secret import Secret
from budgetcheck._validation import check_stream


@final
class GuardedStream:
    """A finite stream of d-dimensional true query results Q(D_1), ..., Q(D_T).

    ``data`` has shape (T, d) (or (T,) for d = 1), finite values only; ragged rows, NaN and
    infinities are refused. Iterating yields ``Secret`` objects for t = 1..T in order; the
    length T and dimension d are public system parameters.
    """

    __slots__ = ("_claim", "_dimensions", "_length", "_secrets")

    def __init__(self, data: ArrayLike) -> None:
        values: NDArray[np.float64] = check_stream(data)
        self._length, self._dimensions = (int(n) for n in values.shape)
        self._claim: list[object] = []
        self._secrets = tuple(Secret(t + 1, values[t], self._claim) for t in range(self._length))

    @property
    def length(self) -> int:
        """T, the number of timestamps."""
        return self._length

    @property
    def dimensions(self) -> int:
        """d, the number of counts released per timestamp."""
        return self._dimensions

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Secret]:
        return iter(self._secrets)

    def secret(self, t: int) -> Secret:
        """The secret of timestamp t (1-based)."""
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= self._length:
            raise InvalidArgument(f"t={t!r} must be an integer timestamp in [1, {self._length}]")
        return self._secrets[t - 1]

    def _bind(self, ledger: object) -> None:
        """Bind every secret of this stream to ``ledger`` (see ``WindowLedger.bind``)."""
        if not self._claim:
            self._claim.append(ledger)
        elif self._claim[0] is not ledger:
            raise SecretAccess(f"{self!r} is already accounted by another ledger")

    def __repr__(self) -> str:
        return f"GuardedStream(length={self._length}, dimensions={self._dimensions})"

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        raise SecretAccess("a GuardedStream cannot be pickled: it holds the true stream")
