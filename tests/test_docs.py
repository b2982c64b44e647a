"""The user documentation holds together: links resolve, anchors exist, no tracker jargon.

Pages link README sections instead of copying them, so a renamed heading must break a test,
not a reader's click.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "helm" / "leoflow" / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: Internal tracker references ("issue 8", "issue #8", "#12") mean nothing to a user.
ISSUE = re.compile(r"\bissues? #?\d+|(?<![\w/&])#\d+\b", re.I)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text()
    found = {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


def links(page: Path) -> list[str]:
    # Links inside code blocks are examples, not links.
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.relative_to(ROOT)}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.relative_to(ROOT)}: no anchor #{anchor} in {path or 'itself'}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(page: Path) -> None:
    found = ISSUE.findall(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} mentions {found}: say what the thing is instead"


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "README.md":
            assert f"({page.name}" in index, f"docs/README.md does not link {page.name}"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert ISSUE.findall("as issue 8 asked; see #12") == ["issue 8", "#12"]
    assert not ISSUE.findall("an issue tracker; `[0-9a-f]{40}` and C# 7 and <a href='#x'>")
    assert slug("Running N replicas against your own PostgreSQL") == "running-n-replicas-against-your-own-postgresql"
    assert slug("Sources: who owns a DAG") == "sources-who-owns-a-dag"
    page = tmp_path / "p.md"
    page.write_text("# Title\n[a](missing.md) [b](#nowhere)\n```\n[c](ignored.md)\n```\n")
    assert links(page) == ["missing.md", "#nowhere"] and anchors(page) == {"title"}
