"""MkDocs hooks: the pages link into the repository the way GitHub reads them, and the site follows.

The same Markdown is read on GitHub and built by MkDocs (``mkdocs.yml``). On GitHub a page may
link to any file of the checkout (``../leoflow/model/limits.py``, ``../bench/results/x.png``,
``../helm/leoflow/README.md``); MkDocs only knows ``docs/``, and ``--strict`` fails on such a link.
These hooks close the gap without a network fetch and without changing the Markdown on disk:

- the project README and the chart README become the pages ``overview.md`` and ``chart.md``
  (listed in the nav), their links rewritten;
- every other repository file a page links to is copied into the site under ``repo/``;
- each link that leaves ``docs/`` is rewritten to one of those. A link to a file that does not
  exist is left alone, so MkDocs still reports it as broken.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: Pages that live outside ``docs/`` but belong to the site, by repository path.
PAGES_OUTSIDE = {"README.md": "overview.md", "helm/leoflow/README.md": "chart.md"}
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)


def _source(src_uri: str) -> Path:
    outside = {v: k for k, v in PAGES_OUTSIDE.items()}
    return ROOT / outside[src_uri] if src_uri in outside else DOCS / src_uri


def _site_path(repo_file: Path) -> str | None:
    """Where ``repo_file`` is in the site (a path under ``docs/``), or None when it is not a file."""
    if not repo_file.is_file():
        return None
    rel = repo_file.relative_to(ROOT).as_posix()
    if repo_file.is_relative_to(DOCS):
        return repo_file.relative_to(DOCS).as_posix()
    return PAGES_OUTSIDE.get(rel, f"repo/{rel}")


def _targets(page_source: Path, markdown: str) -> list[tuple[str, Path]]:
    prose = _FENCE.sub("", markdown)
    found = []
    for match in _LINK.finditer(prose):
        target = match.group(2)
        if "://" not in target and not target.startswith("mailto:"):
            found.append((target, (page_source.parent / target).resolve()))
    return found


def on_files(files: Files, config: Any) -> Files:
    for repo_path, src_uri in PAGES_OUTSIDE.items():
        files.append(File.generated(config, src_uri, abs_src_path=str(ROOT / repo_path)))
    wanted: set[Path] = set()
    sources = [*DOCS.rglob("*.md"), *(ROOT / p for p in PAGES_OUTSIDE)]
    for source in sources:
        for _, resolved in _targets(source, source.read_text(encoding="utf-8")):
            if resolved.is_file() and not resolved.is_relative_to(DOCS) and resolved.suffix != ".md":
                wanted.add(resolved)
    for path in sorted(wanted):
        files.append(File.generated(config, f"repo/{path.relative_to(ROOT).as_posix()}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    source = _source(page.file.src_uri)
    here = Path(page.file.src_uri).parent

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        resolved = (source.parent / target).resolve()
        in_docs = resolved.is_relative_to(DOCS) and source.is_relative_to(DOCS)
        site = None if in_docs else _site_path(resolved)
        if site is None:
            return match.group(0)
        relative = Path(*([".."] * len(here.parts)), site).as_posix()
        return f"{match.group(1)}{relative}{match.group(3) or ''}{match.group(4)}"

    # Rewrite prose only: a link inside a code block is an example.
    out, last = [], 0
    for fence in _FENCE.finditer(markdown):
        out.append(_LINK.sub(rewrite, markdown[last:fence.start()]))
        out.append(fence.group(0))
        last = fence.end()
    out.append(_LINK.sub(rewrite, markdown[last:]))
    return "".join(out)
