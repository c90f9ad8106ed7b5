"""The opaque secret: the true query result of one timestamp (benchmark requirement M-R4).

A :class:`Secret` carries only public metadata (its timestamp and shape). The values live in a
private vault keyed by the secret and are handed out only inside a charged ledger operation; every
other use (float(), comparison, numpy conversion, truthiness, iteration, indexing, arithmetic,
pickling, copying) raises :class:`SecretAccess`. The payload is an arbitrary array so that per-user
data (one row per user) fits the same type.

The vault is not a module attribute, a closure cell or a bound method's ``__self__``: it is a local
of a suspended generator (:func:`_vault`), so neither ``import``, a method's ``__globals__``, the
finalizer (``Secret.__del__`` notes the secret's id only, as :func:`_forget` does), nor
``gc.get_referents`` of a secret, of its class or of a module function reaches the payloads.

What a Python-level guard cannot stop: code in the same process can reach any object by introspection
that leaves Python's object model (``ctypes``, reading ``/proc/self/mem``), by walking the generator's
frame or ``gc.get_referents`` of it, by reading the caller's frames (``sys._getframe``, a traceback's
``tb_frame``: the array the user passed to ``execute`` is there), or by calling this module's own
functions as the ledger does. The guard is a guard against mistakes, not a sandbox. What catches a
mechanism that takes such a route is verify's non-interference check (stage (b),
:mod:`budgetcheck.verify.interference`): whatever it reads, it has to act on it, and then its releases or
its charges differ between two streams whose charged outputs are held equal; the generated pairs make
sure the route is met even when only some data opens it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator, Iterator
from typing import Any, NoReturn, final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument, SecretAccess
from budgetcheck.ledger.sealed import seal, writers
from budgetcheck.stream.neighbours import DEFAULT, usable


def _vault() -> Generator[NDArray[np.float64] | None, tuple[str, int, NDArray[np.float64] | None], None]:
    """The payloads, keyed by id() (a Secret refuses ==, so it cannot be a dict key itself), held
    as a local of this generator: ("put", id, payload), ("get", id, None), ("drop", id, None)."""
    store: dict[int, NDArray[np.float64]] = {}
    answer: NDArray[np.float64] | None = None
    while True:
        verb, key, payload = yield answer
        answer = None
        while _DEAD:  # finalized secrets (a finalizer may run while this generator runs: it only notes the id)
            store.pop(_DEAD.pop(), None)
        if verb == "put" and payload is not None:
            store[key] = payload
        elif verb == "get":
            answer = store[key]
        else:
            store.pop(key, None)


_PORT = _vault()
next(_PORT)
_LOCK = threading.Lock()  # a generator runs in one thread at a time: ledgers in several threads take turns


def _send(message: tuple[str, int, NDArray[np.float64] | None]) -> NDArray[np.float64] | None:
    with _LOCK:
        return _PORT.send(message)


_DEAD: list[int] = []  # ids of finalized secrets whose payloads leave the vault at its next operation


def _forget(key: int) -> None:
    """The finalizer of a secret: its payload leaves the vault at the vault's next operation."""
    _DEAD.append(key)


def _payload(secret: Secret) -> NDArray[np.float64]:
    payload = _send(("get", id(secret), None))
    assert payload is not None
    return payload


# ids of stand-ins: secrets of timestamps a restarted publisher replays from its ledger file.
_STAND_INS: set[int] = set()
# ids of the secrets whose charge has passed and whose values are being read right now.
_OPEN: list[int] = []


def _refuse(secret: Secret, what: str) -> NoReturn:
    raise SecretAccess(
        f"{what} on {secret!r}: the true values of a timestamp are a secret; read them only "
        "through a charged ledger operation (ledger.laplace, ledger.dissimilarity, ledger.measure)"
    )


@final
class Secret:
    """The true query result of timestamp ``t``, readable only through a charged ledger operation."""

    # (t, claim, relation, shape, rows): what a charged operation checks (charge_view), one immutable tuple
    # in one slot sealed below (set once; the claim list is the binding, which changes; the list does not)
    __slots__ = ("__weakref__", "_view")

    def __new__(
        cls,
        t: int,
        values: NDArray[np.float64],
        claim: list[object] | None = None,
        *,
        stand_in: bool = False,
        rows: int = 0,
        neighbours: object = None,
        integer: bool = False,
    ) -> Secret:
        # Made in __new__, which makes a new object every time: there is no __init__ to call again on a
        # secret that exists (its one slot is sealed besides).
        self = object.__new__(cls)
        # integer: per-user bins (a PersonalizedStream's companion), kept in their own integer dtype
        frozen = np.array(values, dtype=None if integer else np.float64)
        frozen.setflags(write=False)
        # rows > 0: a stacked stream's timestamp, one payload row per stream (see GuardedStream.stacked); the
        # relation: its stream's
        shape = frozen.shape[1:] if rows else frozen.shape
        relation = DEFAULT if neighbours is None else neighbours
        _SET_VIEW(self, (t, [] if claim is None else claim, relation, shape, rows))
        with _LOCK:  # _send, in this frame
            _PORT.send(("put", id(self), frozen))
        if stand_in:
            _STAND_INS.add(id(self))
        return self

    def __del__(self) -> None:
        """Its payload leaves the vault at the vault's next operation (:func:`_forget`); a stand-in is forgotten."""
        try:
            key = id(self)
            _DEAD.append(key)  # _forget, in this frame
            if _STAND_INS:
                _STAND_INS.discard(key)
        except (AttributeError, TypeError, NameError):  # at interpreter exit the module's globals may be gone already
            pass

    @property
    def t(self) -> int:
        """The timestamp (1-based) whose data this is."""
        t: int = _VIEW(self)[0]
        return t

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one run's payload (public: d is a system parameter)."""
        shape: tuple[int, ...] = _VIEW(self)[3]
        return shape

    def __repr__(self) -> str:
        view = _VIEW(self)
        return f"Secret(t={view[0]}, shape={view[3]})"

    __hash__ = object.__hash__

    # Every way of looking inside is refused.
    def __float__(self) -> NoReturn:
        _refuse(self, "float()")

    def __int__(self) -> NoReturn:
        _refuse(self, "int()")

    def __index__(self) -> NoReturn:
        _refuse(self, "using it as an index")

    def __complex__(self) -> NoReturn:
        _refuse(self, "complex()")

    def __bool__(self) -> NoReturn:
        _refuse(self, "truth testing")

    def __len__(self) -> NoReturn:
        _refuse(self, "len()")

    def __iter__(self) -> Iterator[Any]:
        _refuse(self, "iteration")

    def __getitem__(self, key: object) -> NoReturn:
        _refuse(self, "indexing")

    def __contains__(self, item: object) -> NoReturn:
        _refuse(self, "'in'")

    def __array__(self, *args: object, **kwargs: object) -> NoReturn:
        _refuse(self, "numpy conversion")

    def __array_ufunc__(self, *args: object, **kwargs: object) -> NoReturn:
        _refuse(self, "a numpy ufunc")

    def __array_function__(self, *args: object, **kwargs: object) -> NoReturn:
        _refuse(self, "a numpy function")

    def __eq__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (==)")

    def __ne__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (!=)")

    def __lt__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (<)")

    def __le__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (<=)")

    def __gt__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (>)")

    def __ge__(self, other: object) -> NoReturn:
        _refuse(self, "comparison (>=)")

    def __add__(self, other: object) -> NoReturn:
        _refuse(self, "arithmetic (+)")

    __radd__ = __add__

    def __sub__(self, other: object) -> NoReturn:
        _refuse(self, "arithmetic (-)")

    __rsub__ = __sub__

    def __mul__(self, other: object) -> NoReturn:
        _refuse(self, "arithmetic (*)")

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> NoReturn:
        _refuse(self, "arithmetic (/)")

    __rtruediv__ = __truediv__

    def __neg__(self) -> NoReturn:
        _refuse(self, "arithmetic (unary -)")

    def __abs__(self) -> NoReturn:
        _refuse(self, "abs()")

    def __round__(self, ndigits: object = None) -> NoReturn:
        _refuse(self, "round()")

    def __format__(self, spec: str) -> str:
        if spec:
            _refuse(self, f"format(spec={spec!r})")
        return repr(self)

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        _refuse(self, "pickling")

    def __copy__(self) -> NoReturn:
        _refuse(self, "copy()")

    def __deepcopy__(self, memo: object) -> NoReturn:
        _refuse(self, "deepcopy()")


# What a secret says of its stream is fixed when it is made (issue 43, item 3): set once, read here through the
# slots themselves (an attribute put over them on the class changes nothing the ledger derives).
_SECRET = seal(Secret, "_view")
_VIEW = _SECRET["_view"]
_SET_VIEW = writers(_SECRET)["_view"]  # a new secret's view, set by its maker without Once's check

_USERS: dict[int, Secret] = {}  # id(a per-class secret) -> the secret of the same t's per-user bins


def attach_users(secret: Secret, users: Secret) -> None:
    """Give a PersonalizedStream's secret the companion holding its per-user bins (read only by a
    charged grouped operation, through :func:`charged`)."""
    _USERS[id(secret)] = users
    weakref.finalize(secret, _USERS.pop, id(secret), None)


def users_of(secret: Secret) -> Secret | None:
    """The per-user companion of ``secret``, or None if its stream keeps only counts."""
    return _USERS.get(id(secret))


def neighbours_of(secret: Secret) -> object:
    """The neighbouring relation of the secret's stream (a ``Neighbours``; default one person, one bin), if a
    sensitivity can be derived from it (:func:`~budgetcheck.stream.neighbours.usable`)."""
    return usable(_VIEW(secret)[2])


def charged(secret: Secret) -> _Charged:
    """Open ``secret`` for the extent of a charged ledger operation (a ``with`` block) and give its payload.

    Only this secret is open: code running inside (e.g. the ``fn`` of ``ledger.measure``) cannot
    reveal the data of any other timestamp.
    """
    return _Charged(secret)


@final
class _Charged:
    """The context manager of :func:`charged` (a class: cheaper than a generator per operation)."""

    __slots__ = ("_secret",)

    def __init__(self, secret: Secret) -> None:
        self._secret = secret

    def __enter__(self) -> NDArray[np.float64]:
        key = id(self._secret)
        with _LOCK:  # _payload's lookup in this frame, before opening: a failed lookup leaves nothing open
            payload = _PORT.send(("get", key, None))
        assert payload is not None
        _OPEN.append(key)
        return payload

    def __exit__(self, *exc: object) -> None:
        _OPEN.pop()


def live_secret(t: int, frozen: NDArray[np.float64], claim: list[object], neighbours: object) -> Secret:
    """A live stream's secret of timestamp t, handed over with the row the stream has just checked and frozen.

    ``frozen`` must be a read-only float64 array that owns its memory and that the caller drops right
    after this call (the stream's own copy of the row): it goes into the vault as it is, without the
    second copy :class:`Secret` makes of an array someone else may still hold. Anything else is copied.
    """
    if (
        type(frozen) is not np.ndarray
        or frozen.dtype != np.float64
        or frozen.flags.writeable
        or frozen.base is not None
    ):
        return Secret(t, frozen, claim, neighbours=neighbours)
    secret = object.__new__(Secret)
    _SET_VIEW(secret, (t, claim, neighbours, frozen.shape, 0))
    with _LOCK:  # _send, in this frame
        _PORT.send(("put", id(secret), frozen))
    return secret


def charge_view(secret: Secret) -> tuple[int, list[object], object, tuple[int, ...], int]:
    """The public parts of a secret a charged operation checks, in one call: its timestamp, the claim of its
    stream (the ledger bound to it, if any: see :func:`claim`), its stream's neighbouring relation, its
    shape and its stacked rows (0 for a plain secret). Nothing of the payload."""
    view: tuple[int, list[object], object, tuple[int, ...], int] = _VIEW(secret)
    return view


def charged_payload(secret: Secret) -> NDArray[np.float64]:
    """The payload of ``secret`` for a charged operation whose charge has just passed and that runs no
    caller code while it reads (a one-run ``laplace`` or ``dissimilarity``): what :func:`charged` gives,
    without opening the secret to :func:`reveal` (nothing could call it)."""
    with _LOCK:  # _payload, in this frame
        payload = _PORT.send(("get", id(secret), None))
    assert payload is not None
    return payload


COMPANION, LIVE, STORED = "companion", "live", "stored"  # kinds of StreamClaim


@final
class StreamClaim(list[object]):
    """The claim of a stream's secrets: empty until a ledger binds the stream (then that ledger), with
    what binding checks. ``kind``: a stored stream (``STORED``: whether it holds integers only, how
    many streams it stacks), a live one (``LIVE``: its rows are checked for the ledger as they are
    handed out, so it must be bound before it is iterated) or a PersonalizedStream's per-user
    companions (``COMPANION``: never bound, read only by the grouped report of its class counts). A
    ledger's first charged read of a stream never bound binds it here, with ``ledger.bind``'s checks,
    before anything is charged (:func:`claim`)."""

    __slots__ = ("_described", "integral", "kind", "requirements", "rows")

    def __init__(
        self, stream: object, *, kind: str = STORED, integral: bool = False, rows: int = 0, requirements: object = None
    ) -> None:
        super().__init__()
        self.kind = kind
        self.requirements = requirements  # a PersonalizedStream's RequirementSet (None: not per-class counts)
        self.integral = integral  # every value an integer (what the discrete sampler publishes)
        self.rows = rows  # streams stacked (0: a plain stream)
        self._described = weakref.ref(stream)  # for messages only: a secret may outlive its stream

    def bind(self, ledger: object, *, integral: bool, runs: int, stacking: bool) -> None:
        """Bind the stream to ``ledger`` (``integral``: its sampler publishes integer counts only;
        ``stacking``: it reads stacked streams, run r from stream r // (runs / streams)); a second ledger is refused."""
        stream = self._described() or "the stream"
        if self.kind == COMPANION:
            raise SecretAccess(
                f"the per-user bins of {stream!r} are read only by PersonalizedLedger.local_report_groups on "
                "the stream's own secret (a release of them would be charged at the wrong sensitivity)"
            )
        if self.kind == LIVE:
            raise InvalidArgument(
                f"bind the ledger before iterating {stream!r}: its rows are checked for the ledger when handed out"
            )
        if self.rows and not stacking:
            raise InvalidArgument(
                f"{stream!r} is stacked: only a WindowLedger reads stacked streams, not a {type(ledger).__name__}"
            )
        if self.rows and runs % self.rows:
            raise InvalidArgument(
                f"{stream!r} stacks {self.rows} streams: the ledger's runs={runs} must be a multiple of {self.rows}"
            )
        if integral and not self.integral:
            raise InvalidArgument(
                f"{stream!r} holds values that are not integers: the discrete-laplace sampler publishes "
                "integer counts (use sampler='numpy-laplace', or round the stream first)"
            )
        take(self, ledger, stream)


# what a claim checks at binding is fixed when the stream is made (issue 43, item 3)
seal(StreamClaim, "_described", "integral", "kind", "requirements", "rows")

_TAKING = threading.Lock()  # two ledgers (each under its own lock) binding one stream at once: one wins


def take(owner: list[object], ledger: object, stream: object = "the stream") -> None:
    """Make ``ledger`` the owner of a stream's claim ``owner`` if it has none, atomically across threads;
    a claim owned by another ledger is refused (SecretAccess)."""
    with _TAKING:
        if not owner:
            owner.append(ledger)
            return
        if owner[0] is not ledger:
            raise SecretAccess(f"{stream!r} is already accounted by another ledger")


def claim(secret: Secret, ledger: object) -> None:
    """Bind the secret's stream to one ledger: reading it through a second ledger would hide spends.
    A stream never bound is bound by the ledger here, with ``ledger.bind``'s checks (:class:`StreamClaim`)."""
    owner = _VIEW(secret)[1]
    if not owner:
        ledger._bind_claim(owner)  # type: ignore[attr-defined]  # a Ledger (this layer does not import it)
    elif owner[0] is not ledger:
        raise SecretAccess(
            f"{secret!r} belongs to a stream already accounted by another ledger; a stream is read "
            "through exactly one ledger so that every spend on it is in one record"
        )


def requirements_of(secret: Secret) -> object:
    """The RequirementSet of the PersonalizedStream the secret belongs to (None for other streams)."""
    owner = _VIEW(secret)[1]
    return owner.requirements if type(owner) is StreamClaim else None


def stacked_rows(secret: Secret) -> int:
    """How many streams a stacked secret holds (one payload row each); 0 for a plain secret."""
    rows: int = _VIEW(secret)[4]
    return rows


def is_placeholder(secret: Secret) -> bool:
    """Whether the secret stands in for a timestamp replayed from a ledger file (it holds no data)."""
    return id(secret) in _STAND_INS


def reveal(secret: object) -> NDArray[np.float64]:
    """The payload of a secret; only while :func:`charged` has that very secret open."""
    if not isinstance(secret, Secret):
        raise SecretAccess(f"expected a Secret from a GuardedStream, got {type(secret).__name__}")
    if id(secret) not in _OPEN:
        _refuse(secret, "reading the values outside a charged ledger operation")
    return _payload(secret)
