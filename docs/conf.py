"""Sphinx configuration of the budgetcheck documentation (MyST Markdown, furo).

Build: ``sphinx-build -W -b html docs docs/_build/html``. Every python and console block of every
page runs while the site is built (``docs/_ext/runblocks.py``); a block that fails fails the build.
``python -m pytest tests/docs`` runs the same blocks through Sybil and builds the site with
``-D runblocks_execute=0`` so that nothing runs twice.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "budgetcheck"
author = "the budgetcheck authors"
copyright = "2026, the budgetcheck authors"
try:
    from importlib.metadata import version as _version

    release = _version("budgetcheck")
except Exception:  # pragma: no cover - building from a source tree that is not installed
    release = "0.1.0"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx_click",
    "runblocks",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = f"budgetcheck {release}"
html_static_path: list[str] = []


# budgetcheck's docstrings are plain text with ``literals`` and :roles:, and their mathematics uses
# | and * as a reader expects (Σ_i |c_i − mean|, ε*w): neither is reST markup there.
_LITERAL = re.compile(r"(``.+?``|:\w+:`[^`]+`|`[^`]+`)")
_EMPHASIS = re.compile(r"(?<![\w*\\])\*[^\s*][^*]*?(?<![\s\\])\*(?![\w*])")


def _escape_markup(text: str) -> str:
    parts = _LITERAL.split(text)
    for i in range(0, len(parts), 2):
        kept = _EMPHASIS.findall(parts[i])
        plain = _EMPHASIS.split(parts[i])
        plain = [re.sub(r"(?<!\\)([|*])", r"\\\1", p) for p in plain]
        parts[i] = "".join(p + (kept[j] if j < len(kept) else "") for j, p in enumerate(plain))
    return "".join(parts)


def _process_docstring(app: object, what: str, name: str, obj: object, options: object, lines: list[str]) -> None:
    literal: int | None = None  # the indentation of the paragraph that opened a literal block ("::")
    doctest = False
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if doctest and stripped:
            continue
        doctest = stripped.startswith(">>>")
        if doctest:
            continue
        if literal is not None and (not stripped or indent > literal):
            continue
        literal = indent if line.rstrip().endswith("::") else None
        lines[i] = _escape_markup(line)


def setup(app: object) -> None:
    app.connect("autodoc-process-docstring", _process_docstring, priority=400)  # type: ignore[attr-defined]
