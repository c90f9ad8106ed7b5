"""The command line (``budgetcheck …``): thin click commands over every layer below; nothing
imports it. :mod:`.commands` holds the commands, :mod:`.publish` the publisher's and the file audit's,
:mod:`.types` the argument types."""

from __future__ import annotations

from budgetcheck.cli.commands import main as main

__all__ = ["main"]
