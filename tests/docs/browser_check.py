"""Open the built documentation site and a `verify --report` HTML page in a real browser (CI).

Run by .ci/run after the tests: ``python tests/docs/browser_check.py``. It builds the site with
``sphinx-build -W`` (the code blocks are run by ``python -m pytest``, not again here), writes the
HTML report of ``budgetcheck verify``, and opens every page in headless Chromium (the
distribution's package, ``chromium``, driven by Playwright with that executable; no browser is
downloaded). A page fails when it logs a console error or an uncaught exception, when an internal
link or its anchor does not resolve, or when an image is broken or drawn at zero size.
Exit status 0 when every page passes, 1 otherwise (each problem printed).
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
IMAGES = """() => Array.from(document.images)
    .filter(img => img.getClientRects().length > 0)
    .filter(img => !(img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 0))
    .map(img => img.currentSrc || img.src)"""


def build(out: Path) -> Path:
    """The site (sphinx-build -W) and the HTML report of one verify run, under ``out``."""
    site = out / "site"
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-D", "runblocks_execute=0"]
        + ["-d", str(out / "doctrees"), str(ROOT / "docs"), str(site)],
        check=True,
    )
    report = out / "report" / "report.html"
    report.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "budgetcheck", "verify", "Uniform", "--stages", "a", "--report", str(report)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not report.is_file():
        raise SystemExit(f"verify --report failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return site


_ids: dict[Path, set[str]] = {}


def ids(page: Path) -> set[str]:
    if page not in _ids:
        text = page.read_text(encoding="utf-8", errors="replace")
        _ids[page] = {html.unescape(i) for i in re.findall(r'\b(?:id|name)="([^"]+)"', text)}
    return _ids[page]


def broken_links(page: Path, hrefs: list[str]) -> list[str]:
    """Internal links of ``page`` whose file or anchor does not exist."""
    problems = []
    for href in hrefs:
        parts = urlsplit(href)
        if parts.scheme not in ("", "file") or href.startswith(("mailto:", "javascript:")):
            continue
        target = page if not parts.path else Path(unquote(parts.path))
        if not parts.scheme and parts.path:
            target = (page.parent / unquote(parts.path)).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"link {href!r}: no file {target}")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in ids(target):
            problems.append(f"link {href!r}: no anchor #{parts.fragment} in {target.name}")
    return problems


def check(pages: list[Path], executable: str) -> list[str]:
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        context = browser.new_context()
        for path in pages:
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda message, errors=errors: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_load_state("networkidle")
            hrefs = page.eval_on_selector_all("a[href]", "links => links.map(a => a.getAttribute('href'))")
            found = [f"console: {e}" for e in errors]
            found += broken_links(path, hrefs)
            found += [f"image not drawn: {src}" for src in page.evaluate(IMAGES)]
            problems += [f"{path}: {problem}" for problem in found]
            page.close()
        browser.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--browser", default=None, help="the Chromium executable (default: found on PATH)")
    args = parser.parse_args()
    executable = args.browser or next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if executable is None:
        print(f"no Chromium on PATH (looked for {', '.join(BROWSERS)}): apt-get install chromium", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="budgetcheck-browser-") as folder:
        site = build(Path(folder))
        pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)
        pages.append(Path(folder) / "report" / "report.html")
        problems = check(pages, executable)
    for problem in problems:
        print(problem)
    print(f"browser check: {len(pages)} pages opened in {executable}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
