"""The documentation site builds with no warning, and its reference misses no public name or command.

The site is built once per test session with ``sphinx-build -W`` (in a subprocess, into a temporary
directory). Its code blocks are run by ``test_docs_examples.py``, so this build passes
``-D runblocks_execute=0`` rather than run them a second time.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import budgetcheck
from budgetcheck.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("rounding", "ops", "kernels", "proving", "strategies")  # the modules a mechanism author imports


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-D",
            "runblocks_execute=0",
            "-d",
            str(out / ".doctrees"),
            str(ROOT / "docs"),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stdout}\n{done.stderr}"
    return out


def _ids(page: Path) -> set[str]:
    return {html.unescape(i) for i in re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8"))}


def test_every_public_name_has_its_reference_entry(site: Path) -> None:
    """Each name of ``budgetcheck.__all__`` (and each public module) is described in the API reference."""
    ids: set[str] = set()
    for page in (site / "reference" / "generated").glob("*.html"):
        ids |= _ids(page)
    missing = [
        name
        for name in budgetcheck.__all__
        if f"budgetcheck.{name}" not in ids and f"module-budgetcheck.{name}" not in ids
    ]
    missing += [name for name in MODULES if f"module-budgetcheck.{name}" not in ids]
    assert not missing, f"not in the built API reference: {missing}"
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert all(f"budgetcheck.{name}.html" in api for name in budgetcheck.__all__)


def _commands(group: click.Group, prefix: str) -> list[str]:
    found = []
    for name, command in group.commands.items():
        found.append(f"{prefix}-{name}")
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}-{name}")
    return found


def test_every_cli_command_and_option_has_its_reference_entry(site: Path) -> None:
    """Every command (``bench report`` too) and every option of it is in the CLI reference."""
    ids = _ids(site / "reference" / "cli.html")
    commands = _commands(main, "budgetcheck")
    assert len(commands) >= 8
    missing = [c for c in commands if c not in ids]
    assert not missing, f"commands not in the built CLI reference: {missing}"
    ctx = click.Context(main)
    options = []
    for name, command in main.commands.items():
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                options += [
                    f"cmdoption-budgetcheck-{name}-{opt[2:]}" for opt in param.opts if opt[2:] and opt != "--help"
                ]
    assert options
    missing = [o for o in options if o not in ids]
    assert not missing, f"options not in the built CLI reference: {missing}"


def test_every_page_is_built(site: Path) -> None:
    """Every Markdown page under docs/ (the ones other work drops into howto/ and explanation/ too) is built."""
    for page in (ROOT / "docs").rglob("*.md"):
        built = site / page.relative_to(ROOT / "docs").with_suffix(".html")
        assert built.is_file(), f"{page} was not built"
