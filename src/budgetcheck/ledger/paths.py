"""Files the library writes (an export, a publisher's output, a report): the path is checked before any
work is done, so a typo in a directory name is an InvalidArgument naming it, never a FileNotFoundError
after a charge, a run or a benchmark."""

from __future__ import annotations

import os
from pathlib import Path

from budgetcheck.ledger.errors import InvalidArgument


def check_output_path(value: object, name: str) -> Path:
    """``value`` as a Path to a file that can be created or replaced: a str or path-like, not a
    directory, in a directory that exists (InvalidArgument naming ``name`` and the value)."""
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidArgument(f"{name}={value!r} must be a file path (str or pathlib.Path), not {type(value).__name__}")
    path = Path(value)
    if not str(value) or path.is_dir():
        raise InvalidArgument(f"{name}={str(value)!r} is a directory, not a file to write")
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise InvalidArgument(
            f"{name}={str(value)!r}: the directory {str(parent)!r} {what}; create it first or choose another path"
        )
    return path
