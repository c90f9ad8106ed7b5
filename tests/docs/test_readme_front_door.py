"""The README is a short front door (issue 44): purpose, the short example, the two set-up commands,
the table of what it checks and links into the site, in at most 120 lines; the rest is on the site.
(Its code blocks run as written: ``test_docs_examples.py``.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_at_most_120_lines() -> None:
    assert len(README.splitlines()) <= 120, len(README.splitlines())


def test_the_readme_keeps_its_parts() -> None:
    assert re.search(r"^```python\n# file: every_kth\.py\n", README, flags=re.M)  # the short example
    assert len(re.findall(r"^```sh\n", README, flags=re.M)) == 2  # the two set-up commands
    assert "## What it checks" in README and README.count("\n| **") >= 4  # the table
    assert "docs/tutorials/first-mechanism.md" in README and "docs/reference/api.md" in README


def test_every_link_of_the_readme_leads_to_a_page_that_exists() -> None:
    """What moved to the site is linked from the README: each relative link names a file (and anchor) there."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert links
    for link in links:
        if "://" in link:
            continue
        path, _, anchor = link.partition("#")
        page = ROOT / path
        assert page.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, (link, sorted(slugs))


def test_what_left_the_readme_is_on_the_site() -> None:
    """The durability and threat model paragraphs it held are the site's pages (a sentence of each)."""
    durability = (ROOT / "docs" / "explanation" / "durability.md").read_text(encoding="utf-8")
    threats = (ROOT / "docs" / "explanation" / "threats.md").read_text(encoding="utf-8")
    assert "--durability full" in durability or "`full`" in durability
    assert "predictable transaction" in threats and "seccomp" in threats
