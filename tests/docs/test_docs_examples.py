"""Every code block of README.md and docs/ runs as written, and so does every docstring example.

The blocks are read with Sybil and run by ``docs/_ext/runblocks.py``, the same code that runs them
while the site is built: python blocks in one namespace per page, captioned blocks written to the
file they name, console blocks run in bash with their printed output compared (doctest's ``...``).
The install lines (``sh`` blocks) are what CI runs: they must be the commands of ``.ci/run``.
"""

from __future__ import annotations

import doctest
import importlib
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer
from sybil.parsers.myst.lexers import DirectiveLexer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import runblocks  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNER = "_runblocks_page"


def _run(example: Example) -> None:
    runner: runblocks.PageRunner = example.namespace[RUNNER]
    kind, argument = example.parsed
    label = f"{Path(example.path).relative_to(ROOT)}:{example.line}"
    if kind == "console":
        runner.console(argument)
    elif kind == "file":
        runner.file(*argument.split("\0", 1))
    else:
        runner.python(argument, label)


def _blocks(document: Document) -> Iterator[Region]:
    """Regions of the blocks that run: ```python, ```console, ```{code-block} python with a caption
    (a file) and ```{literalinclude} of a .py file (also a file: the page shows and uses it)."""
    for region in FencedCodeBlockLexer(language=r"python|console")(document):
        language = region.lexemes["language"]
        kind = "console" if language == "console" else "python"
        yield Region(region.start, region.end, (kind, str(region.lexemes["source"])), _run)
    for region in DirectiveLexer(directive="code-block", arguments="python")(document):
        caption = region.lexemes["options"].get("caption")
        source = str(region.lexemes["source"])
        parsed = ("file", f"{caption}\0{source}") if caption else ("python", source)
        yield Region(region.start, region.end, parsed, _run)
    for region in DirectiveLexer(directive="literalinclude", arguments=r".+\.py")(document):
        included = (Path(document.path).parent / region.lexemes["arguments"].strip()).resolve()
        name = region.lexemes["options"].get("caption", included.name)
        yield Region(region.start, region.end, ("file", f"{name}\0{included.read_text(encoding='utf-8')}"), _run)


def _setup(namespace: dict[str, object]) -> None:
    namespace[RUNNER] = runblocks.PageRunner("pytest")


def _teardown(namespace: dict[str, object]) -> None:
    runner = namespace.pop(RUNNER)
    assert isinstance(runner, runblocks.PageRunner)
    runner.close()


SYBIL = Sybil(parsers=[_blocks])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_runs_as_written(page: Path) -> None:
    """The page's blocks run in order in one namespace and directory; the first failure fails it."""
    document = SYBIL.parse(page)
    examples = list(document)
    _setup(document.namespace)
    try:
        for example in examples:
            example.evaluate()
    finally:
        if RUNNER in document.namespace:
            _teardown(document.namespace)


def _shell_blocks(page: Path) -> list[str]:
    return re.findall(r"^```(?:sh|bash|shell|zsh)\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.M | re.S)


def test_the_readme_set_up_commands_are_the_ones_ci_runs() -> None:
    """README's two set-up commands are exactly what ``.ci/run`` does (the install, the main job, the tests)."""
    blocks = _shell_blocks(ROOT / "README.md")
    assert len(blocks) == 2, blocks
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    install_and_main, tests = (block.strip() for block in blocks)
    for command in install_and_main.split(" && "):
        command = command.replace("pip install '.[all]'", "pip install -q -e '.[dev]'")  # dev brings all
        assert command in ci or command + " --no-progress" in ci, command
    for command in tests.split(" && "):
        if command.startswith("pip install"):
            assert "pip install -q -e '.[dev]'" in ci
        elif command.startswith("python -m pytest"):
            assert shlex.split(command) == ["python", "-m", "pytest"]
            assert re.search(r"^python -m pytest ", ci, flags=re.M)
        else:
            assert command in ci, command


def test_no_other_page_has_commands_that_do_not_run() -> None:
    """Outside the README's set-up, a shell block (sh, bash) is only an install line (what CI's install does):
    a command to run goes in a ``console`` block, which the tests run and check."""
    for page in PAGES[1:]:
        for block in _shell_blocks(page):
            for line in block.strip().splitlines():
                assert line.startswith("pip install "), f"{page}: {line!r} is not run: write it as a console block"


def _modules_with_examples() -> list[str]:
    src = ROOT / "src"
    names = []
    for path in sorted((src / "budgetcheck").rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            parts = path.relative_to(src).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("module_name", _modules_with_examples())
def test_docstring_examples_run(module_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``>>>`` example in budgetcheck's docstrings prints what it shows (run in a fresh directory)."""
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(module_name)
    tests = [t for t in doctest.DocTestFinder().find(module, module_name) if t.examples]
    assert tests, f"{module_name} has '>>> ' in its text but no docstring example was found"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert not runner.failures, "".join(report)
