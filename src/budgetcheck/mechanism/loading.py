"""A mechanism by name: a built-in (looked up in :mod:`mechanisms` only when asked) or
``module:attr`` imported as ``python -m`` would find it. Used by verify, the benchmark, the
publisher and both studies."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.mechanism.execute import (
    PersonalizedMechanism,
    StreamMechanism,
    SwellfishMechanism,
    notion_of,
)


def load_mechanism(reference: str) -> Any:
    """A built-in name ('BD') or 'module:attr' (a mechanism, or a callable returning one)."""
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
        target: object = getattr(_import_user_module(reference, module_name), attr, _MISSING)
        if target is _MISSING:
            raise InvalidArgument(
                f"mechanism={reference!r} cannot be loaded: module {module_name!r} has no attribute {attr!r}"
            )
    else:
        from mechanisms import BUILTIN

        if reference not in BUILTIN:
            raise InvalidArgument(
                f"mechanism={reference!r} is not built in; choose one of {sorted(BUILTIN)} or use module:attr"
            )
        target = BUILTIN[reference]
    if isinstance(target, type) or (not isinstance(target, StreamMechanism) and callable(target)):
        try:
            target = target()
        except TypeError as exc:
            raise InvalidArgument(
                f"mechanism={reference!r} is not a StreamMechanism and cannot be built without arguments: {exc}"
            ) from exc
    if not isinstance(target, (StreamMechanism, PersonalizedMechanism, SwellfishMechanism)):
        raise InvalidArgument(
            f"mechanism={reference!r} is not a StreamMechanism (needs .name and .run(stream, ledger))"
        )
    try:
        notion_of(target)
    except InvalidArgument as exc:
        raise InvalidArgument(f"mechanism={reference!r} cannot be loaded: {exc}") from None
    return target


_MISSING = object()


def _import_user_module(reference: str, module_name: str) -> Any:
    """Import the user's module as ``python -m`` would find it (the working directory first); an
    error in it is reported with its file and line, not as a traceback of ours."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except SyntaxError as exc:
        raise InvalidArgument(
            f"mechanism={reference!r} cannot be loaded: {exc.filename}, line {exc.lineno}: {exc.msg}"
        ) from None
    except ImportError as exc:
        raise InvalidArgument(f"mechanism={reference!r} cannot be loaded: {exc}") from None
    except Exception as exc:  # the module's own code failed while importing: name where
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise InvalidArgument(
            f"mechanism={reference!r} cannot be loaded: {frame.filename}, line {frame.lineno}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
