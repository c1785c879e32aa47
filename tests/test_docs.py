"""The manual in ``docs/`` builds with ``mkdocs build --strict`` and lists every page; README.md stays a front door."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 200

# [text](target) and ![alt](target); a target ends at whitespace (a title may follow) or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[^)]*)?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _nav_pages(entry: Any) -> Iterator[str]:
    """Every page path of a mkdocs ``nav`` entry: a path, a ``{title: entry}`` or a list of entries."""
    if isinstance(entry, str):
        yield entry
    elif isinstance(entry, list):
        for item in entry:
            yield from _nav_pages(item)
    elif isinstance(entry, dict):
        for value in entry.values():
            yield from _nav_pages(value)


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    assert mkdocs.exists(), f"{mkdocs} is missing: install requirements-test.txt (make setup-test)"
    site = tmp_path / "site"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed (exit {done.returncode}):\n{done.stderr}"
    # docs/architecture.md is a symlink to the root ARCHITECTURE.md; the build must follow it.
    assert (DOCS / "architecture.md").is_symlink()
    assert os.readlink(DOCS / "architecture.md") == "../ARCHITECTURE.md"
    assert (site / "architecture" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = list(_nav_pages(config["nav"]))
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}

    assert len(nav) == len(set(nav)), f"pages listed twice in the nav: {sorted(p for p in nav if nav.count(p) > 1)}"
    assert sorted(set(nav) - pages) == [], "nav entries without a page in docs/"
    assert sorted(pages - set(nav)) == [], "pages in docs/ missing from the nav in mkdocs.yml"


def test_readme_is_short_and_links_only_to_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, over {README_MAX_LINES}: move detail to docs/"

    targets = LINK.findall(FENCE.sub("", text))
    assert targets, "README.md links to nothing: it should point at the manual in docs/"
    local = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    missing = [t for t in local if not (REPO / t.split("#", 1)[0]).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"
