"""Click parameter types shared by the commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.paths import check_output_path


class FilePath(click.Path):
    """``click.Path`` that reports an unusable path (e.g. one holding a NUL byte) as a usage error."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except ValueError as exc:
            self.fail(f"{value!r} is not a usable path: {exc}", param, ctx)


class OutputPath(FilePath):
    """A file the command will write: its directory must exist, checked when the arguments are parsed
    (before any run, charge or benchmark), so a typo is a usage error (exit 2) naming the option."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        try:
            return check_output_path(path, "path")
        except InvalidArgument as exc:
            self.fail(str(exc).removeprefix("path="), param, ctx)


class LedgerTarget(FilePath):
    """A ledger file path, or a ``postgresql://`` URL kept as the text it is (a Path would fold its ``//``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith(("postgresql://", "postgres://")):
            return value
        if isinstance(value, str) and not value:  # click.Path would read '' as '.', the working directory
            self.fail("'' is empty: name a ledger file or a postgresql:// URL", param, ctx)
        return super().convert(value, param, ctx)


class Progress:
    """A one-line progress note on a terminal's stderr, overwritten in place and erased before the
    next table row; nothing at all when stderr is not a terminal (logs get plain lines only)."""

    def __init__(self, *, enabled: bool = True) -> None:
        self._enabled = enabled and sys.stderr.isatty()
        self._width = 0

    def show(self, text: str) -> None:
        if self._enabled:
            click.echo("\r" + text.ljust(self._width), err=True, nl=False)
            self._width = len(text)

    def clear(self) -> None:
        if self._enabled and self._width:
            click.echo("\r" + " " * self._width + "\r", err=True, nl=False)
            self._width = 0
