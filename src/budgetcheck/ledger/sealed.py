"""Slots set once: values fixed at construction that no later route changes (issue 43, items 2-3).

A ledger's owner flags (``trusted_code``, ``allow_vouched``) and a stream's data model (its
neighbouring relation, its secrets' timestamp and shape, the claim that binds it to one ledger) are
what a mechanism running in the same process would want to change after the fact. :func:`seal`
replaces each named ``__slots__`` member of a class by a :class:`Once` descriptor: the slot can be
set once (by the constructor) and never again, neither by assignment, ``setattr``,
``object.__setattr__`` nor ``del`` (all refused with :class:`~budgetcheck.ledger.errors.Fixed`). The
classes have no ``__dict__``, and :func:`seal` also refuses subclasses (a subclass could override the
readers), so ``__class__`` cannot be pointed at one either.

The library reads a sealed value through the slot's own member descriptor that :func:`seal` returns
(:class:`Readers`), not through the class attribute: replacing the attribute on the class (``Secret._t
= property(...)``) then changes nothing the library derives. What no Python-level guard stops (code
that walks into these descriptors, ``gc`` or ``ctypes``) is said in :mod:`budgetcheck.stream.secret`.

>>> class Point:
...     __slots__ = ("_x",)
...     def __init__(self, x: int) -> None:
...         self._x = x
>>> readers = seal(Point, "_x")
>>> p = Point(3)
>>> object.__setattr__(p, "_x", 4)
Traceback (most recent call last):
...
budgetcheck.ledger.errors.Fixed: Point._x is fixed once set; it cannot be changed or deleted
>>> readers["_x"](p)
3
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, final

from budgetcheck.ledger.errors import Fixed

Readers = dict[str, Callable[[Any], Any]]
Writers = dict[str, Callable[[Any, Any], None]]


@final
class Once:
    """A data descriptor over a slot's member descriptor: the first set goes through, every later set
    or delete raises :class:`Fixed`."""

    __slots__ = ("_member", "_owner")

    def __init__(self, member: Any, owner: str) -> None:
        self._member = member
        self._owner = owner

    def __get__(self, obj: object, cls: type | None = None) -> Any:
        if obj is None:
            return self
        return self._member.__get__(obj, cls)

    def __set__(self, obj: object, value: object) -> None:
        try:
            self._member.__get__(obj)
        except AttributeError:  # not set yet: the constructor's one assignment
            self._member.__set__(obj, value)
            return
        self._refuse()

    def __delete__(self, obj: object) -> NoReturn:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise Fixed(f"{self._owner} is fixed once set; it cannot be changed or deleted")


def _no_subclass(cls: type) -> NoReturn:
    raise TypeError(f"{cls.__mro__[1].__name__} cannot be subclassed: its fixed values are read by the library")


def writers(readers: Readers) -> Writers:
    """Setters of the slots :func:`seal` returned ``readers`` for, for a constructor that makes many
    objects: they set the slot without :class:`Once`'s check (the object is new: nothing is set yet)."""
    return {name: read.__self__.__set__ for name, read in readers.items()}  # type: ignore[attr-defined]


def seal(cls: type, *names: str, final_class: bool = True) -> Readers:
    """Make the slots ``names`` of ``cls`` settable once (see the module docstring) and return, per
    name, a reader of the slot that does not go through the class attribute. ``final_class``: refuse
    subclasses of ``cls`` from now on (classes defined before the call are kept)."""
    readers: Readers = {}
    for name in names:
        member = cls.__dict__[name]
        if type(member).__name__ != "member_descriptor":
            raise TypeError(f"{cls.__name__}.{name} is not a slot")
        setattr(cls, name, Once(member, f"{cls.__name__}.{name}"))
        readers[name] = member.__get__
    if final_class:
        cls.__init_subclass__ = classmethod(_no_subclass)  # type: ignore[assignment,method-assign]
    return readers
