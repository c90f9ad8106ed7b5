"""Run the code blocks of a page as written, while the site is built and under pytest (Sybil).

A page's blocks run in order, in one namespace and one fresh working directory per page:

- a ``python`` block is executed; one made of ``>>>`` prompts is a doctest, its output as written;
- a ``python`` block with a caption (MyST ``{code-block} python`` with ``:caption: name.py``), or
  whose first line is ``# file: name.py`` (the form the README uses: GitHub shows no captions), is
  written to that file in the page's directory, so that later blocks import it or name it on the
  command line (``budgetcheck verify name:Class``);
- a ``console`` block is a sequence of ``$ command`` lines, each followed by the output it must print
  (blank lines aside; a line ``...`` stands for any lines, ``...`` in a line for any text, as in
  doctest); the command runs in ``bash`` in the page's directory with this interpreter's ``bin``
  first on ``PATH``.

Any other language (``sh`` for the install lines, ``text``, ``toml``, ...) is shown, not run. In the
Sphinx build a failing block is a warning at its line, so ``sphinx-build -W`` fails; under pytest it
is a failing test (``tests/docs/test_examples.py``).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CONSOLE_TIMEOUT_S = 600
FILE_LINE = re.compile(r"# file: (\S+\.py)\n")
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class BlockFailed(AssertionError):
    """A block did not run as written: the message says which command or line and what happened."""


class PageRunner:
    """One page's working directory and namespace; blocks are run in the order of the page."""

    def __init__(self, name: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"budgetcheck-docs-{name.replace('/', '-')}-"))
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def python(self, source: str, label: str) -> None:
        """Execute ``source`` in the page's namespace, with the page's directory as working directory;
        a block of ``>>>`` prompts is a doctest (its output and exceptions must be as written), and one
        that starts with ``# file: name.py`` is written to that file."""
        named = FILE_LINE.match(source)
        if named:
            self.file(named.group(1), source)
            return
        previous = os.getcwd()
        os.chdir(self.directory)
        sys.path.insert(0, str(self.directory))
        try:
            if source.lstrip().startswith(">>>"):
                test = doctest.DocTestParser().get_doctest(source, self.namespace, label, label, 0)
                report: list[str] = []
                runner = doctest.DocTestRunner(optionflags=_FLAGS)
                runner.run(test, out=report.append, clear_globs=False)
                self.namespace.update(test.globs)  # a DocTest runs in a copy of the namespace it is given
                if runner.failures:
                    raise BlockFailed("".join(report))
            else:
                with contextlib.redirect_stdout(io.StringIO()):  # what a block prints is for its reader
                    exec(compile(source, label, "exec"), self.namespace)
        finally:
            sys.path.remove(str(self.directory))
            os.chdir(previous)

    def file(self, name: str, source: str) -> None:
        """Write a captioned block to the file it names (a module the later blocks use)."""
        target = self.directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
        for module in [m for m in sys.modules if m == Path(name).stem]:
            del sys.modules[module]  # a page that rewrites a module imports the new one

    def console(self, text: str) -> None:
        """Run each ``$ command`` and compare what it prints (stdout and stderr) with the lines below it."""
        for command, expected in parse_console(text):
            env = dict(os.environ)
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
            env["COLUMNS"] = "200"
            env.pop("PYTHONPATH", None)
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.directory,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=CONSOLE_TIMEOUT_S,
                check=False,
            )
            if not matches(expected, done.stdout):
                raise BlockFailed(f"$ {command}\nexpected:\n{expected}printed (exit {done.returncode}):\n{done.stdout}")


def matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` is what ``expected`` shows: line by line, a line ``...`` stands for any lines
    (none too), ``...`` inside a line for any text, and runs of spaces for any spaces."""
    pattern = []
    for line in expected.strip("\n").splitlines():
        if line.strip() == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            parts = [r"\s+".join(re.escape(word) for word in chunk.split()) for chunk in line.strip().split("...")]
            pattern.append(r"[ \t]*" + r"[^\n]*?".join(parts) + r"[ \t]*\n")
    lines = [line.rstrip() for line in printed.splitlines() if line.strip()]
    text = "".join(f"{line}\n" for line in lines)
    return re.fullmatch("".join(pattern), text) is not None


def parse_console(text: str) -> list[tuple[str, str]]:
    """``[(command, expected output)]`` of a console block (a command continued with ``\\`` is one)."""
    pairs: list[tuple[str, list[str]]] = []
    continued = False
    for line in text.splitlines():
        if continued:
            command, out = pairs[-1]
            pairs[-1] = (command + "\n" + line, out)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            pairs.append((line[2:], []))
            continued = line.endswith("\\")
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            raise BlockFailed(f"a console block starts with a `$ command` line, not {line!r}")
    return [
        (command, "".join(f"{line}\n" for line in out).rstrip("\n") + "\n" if out else "") for command, out in pairs
    ]


def caption_of(node: Any) -> str | None:
    """The caption of a literal block (MyST ``:caption:``), which Sphinx puts in a container around it."""
    from docutils import nodes

    parent = node.parent
    if isinstance(parent, nodes.container) and parent.get("literal_block"):
        for child in parent.children:
            if isinstance(child, nodes.caption):
                return str(child.astext())
    return None


def _run_page(app: Any, doctree: Any) -> None:
    from docutils import nodes
    from sphinx.util import logging

    if not app.config.runblocks_execute:
        return
    logger = logging.getLogger(__name__)
    docname = app.env.docname
    blocks = [n for n in doctree.findall(nodes.literal_block) if n.get("language") in ("python", "console")]
    if not blocks:
        return
    runner = PageRunner(docname)
    try:
        for node in blocks:
            source = node.astext()
            try:
                if node["language"] == "console":
                    runner.console(source + "\n")
                elif (caption := caption_of(node)) is not None:
                    runner.file(caption, source + "\n")
                else:
                    runner.python(source + "\n", f"{docname}:{node.line}")
            except BaseException as exc:  # noqa: BLE001 - any failure of a block fails the build
                logger.warning("code block failed: %s: %s", type(exc).__name__, exc, location=node)
                return
    finally:
        runner.close()


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("runblocks_execute", True, "env", types=[bool, int])
    app.connect("doctree-read", _run_page)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
