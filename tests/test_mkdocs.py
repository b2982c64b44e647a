"""The documentation site builds with no warning: ``mkdocs build --strict`` as a reader would run it.

Strict mode (with ``validation`` in ``mkdocs.yml``) fails on a broken link, a page missing from
the nav and a nav entry with no page; the build runs offline (no fonts or plugins that fetch)
and writes into a temporary directory, never into the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "mkdocs.yml"


def nav_pages() -> set[str]:
    return set(re.findall(r"^\s+- (?:[^\n]*?: )?([\w./-]+\.md)$", CONFIG.read_text(), re.M))


def test_every_page_is_in_the_nav() -> None:
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - nav_pages() == set(), "add these pages to the nav of mkdocs.yml"
    assert {"overview.md", "chart.md"} <= nav_pages()  # the README and the chart README (tools/mkdocs_hooks.py)


@pytest.mark.timeout(300)
def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(CONFIG),
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True, timeout=280, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file() and (site / "overview" / "index.html").is_file()
    assert (site / "chart" / "index.html").is_file()
    assert not (ROOT / "site").exists()
    # The architecture picture renders as a Mermaid diagram on the site, as it does on GitHub.
    assert 'class="mermaid"' in (site / "overview" / "index.html").read_text()
