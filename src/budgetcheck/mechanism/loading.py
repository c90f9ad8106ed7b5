"""A mechanism by name: a built-in (looked up in :mod:`mechanisms` only when asked) or
``module:attr`` imported as ``python -m`` would find it. Used by verify, the benchmark, the
publisher and both studies."""

from __future__ import annotations

import contextvars
import difflib
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
        if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
            raise InvalidArgument(f"mechanism={reference!r} names a file: {_module_advice(module_name, attr)}")
        target: object = getattr(_import_user_module(reference, module_name), attr, _MISSING)
        if target is _MISSING:
            names = [n for n in dir(sys.modules[module_name]) if not n.startswith("_")]
            raise InvalidArgument(
                f"mechanism={reference!r} cannot be loaded: module {module_name!r} has no attribute {attr!r}"
                + (f"; {_did_you_mean(attr, names)}".removesuffix(" ") if _did_you_mean(attr, names) else "")
            )
    else:
        from mechanisms import BUILTIN

        if reference not in BUILTIN:
            raise InvalidArgument(f"mechanism={reference!r} {_advice(reference, sorted(BUILTIN))}")
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
        # in a copy of the caller's context: what the module's top level sets in context variables (e.g. a
        # grid_sessions() block entered and left open) ends with the import, not in the caller's process
        return contextvars.copy_context().run(importlib.import_module, module_name)
    except SyntaxError as exc:
        raise InvalidArgument(
            f"mechanism={reference!r} cannot be loaded: {exc.filename}, line {exc.lineno}: {exc.msg}"
        ) from None
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and _is_prefix(exc.name, module_name):
            raise InvalidArgument(
                f"mechanism={reference!r} cannot be loaded: no module named {exc.name!r} in the working directory "
                f"{os.getcwd()} or on the module search path (PYTHONPATH, the installed packages); run from the "
                f"directory that holds {exc.name.replace('.', '/')}.py, or add that directory to PYTHONPATH"
            ) from None
        raise InvalidArgument(f"mechanism={reference!r} cannot be loaded: {_where(exc)}{exc}") from None
    except Exception as exc:  # the module's own code failed while importing: name where
        raise InvalidArgument(
            f"mechanism={reference!r} cannot be loaded: {_where(exc)}{type(exc).__name__}: {exc}"
        ) from None


def _is_prefix(missing: str, module_name: str) -> bool:
    """Whether the module not found is the one named (or a package on its way), not one it imports."""
    return module_name == missing or module_name.startswith(missing + ".")


def _where(exc: BaseException) -> str:
    """'file, line N: ' of the innermost frame in the user's code (not importlib's machinery)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen ")]
    if not frames:
        return ""
    return f"{frames[-1].filename}, line {frames[-1].lineno}: "


def _module_advice(module_name: str, attr: str) -> str:
    """How to name the module of a file path such as 'pkg/every_kth.py'."""
    path = module_name.removesuffix(".py")
    folder, _, stem = path.replace(os.sep, "/").rpartition("/")
    where = f" from the directory {folder!r} (or with it on PYTHONPATH)" if folder else ""
    return f"name its module and the mechanism in it as '{stem}:{attr or 'ClassName'}'{where}, as python -m would"


def _advice(reference: str, builtin: list[str]) -> str:
    """What to write instead of a reference that is neither a built-in name nor module:attr."""
    if reference.endswith(".py") or "/" in reference or os.sep in reference:
        return f"names a file: {_module_advice(reference, '')}"
    if "." in reference:
        module_name, _, attr = reference.rpartition(".")
        return f"is not built in; did you mean {module_name + ':' + attr!r}? a mechanism of your own is module:attr"
    return f"is not built in; {_did_you_mean(reference, builtin)}choose one of {builtin} or use module:attr"


def _did_you_mean(name: str, choices: list[str]) -> str:
    """'did you mean 'BD'? ' for the choices close to ``name`` (letter case ignored), or ''."""
    folded = {choice.casefold(): choice for choice in choices}
    close = difflib.get_close_matches(name.casefold(), list(folded), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(folded[c]) for c in close)}? " if close else ""
