"""Click parameter types shared by the commands."""

from __future__ import annotations

from typing import Any

import click


class FilePath(click.Path):
    """``click.Path`` that reports an unusable path (e.g. one holding a NUL byte) as a usage error."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except ValueError as exc:
            self.fail(f"{value!r} is not a usable path: {exc}", param, ctx)
