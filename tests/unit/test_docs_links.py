"""Every relative link and #anchor in the repository's markdown resolves, and every docs page is reachable.

The pages: README.md, CHANGELOG.md and every .md under docs/ (the evidence folder, docs/evidence/, included); the
bench templates are read from where their pages are written (docs/evidence/), since their links are relative to it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS]
#: Each template in bench/ and the page generated from it: its links resolve from the page's folder.
TEMPLATES = {
    ROOT / "bench" / "BENCHMARKS.template.md": ROOT / "docs" / "evidence" / "BENCHMARKS.md",
    ROOT / "bench" / "CHAOS.template.md": ROOT / "docs" / "evidence" / "CHAOS.md",
}
# A link with a scheme (https:, mailto:) leaves the repository: not checked offline.
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lowercase, all but word characters, spaces and hyphens dropped,
    spaces to hyphens (underscores stay: "max_duration" -> "max_duration")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def tokens(page: Path) -> list:
    return MarkdownIt("commonmark").enable("table").parse(page.read_text())


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives the page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    stream = tokens(page)
    for opening, inline in zip(stream, stream[1:], strict=False):
        if opening.type == "heading_open":
            anchor = slug("".join(child.content for child in inline.children or []))
            found.add(f"{anchor}-{seen[anchor]}" if seen[anchor] else anchor)
            seen[anchor] += 1
    return frozenset(found)


def links(page: Path) -> Iterator[str]:
    """Every link and image target on the page, outside code blocks and code spans."""
    for token in tokens(page):
        for child in token.children or []:
            target = child.attrGet("href") if child.type == "link_open" else child.attrGet("src")
            if isinstance(target, str):
                yield target


def broken(page: Path, written_as: Path | None = None) -> list[str]:
    """The page's relative links whose file or #anchor does not exist, each with the reason; ``written_as``: the
    path the page is written to (a template's generated page), which its links are relative to."""
    problems = []
    at = written_as or page
    for target in links(page):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        destination = (at.parent / path).resolve() if path else page
        if not destination.exists():
            problems.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{target}: no heading with anchor #{anchor} in {destination.relative_to(ROOT)}")
    return problems


def test_slug_matches_githubs_anchor_rule() -> None:
    """The anchors GitHub renders for headings of these pages, including code spans and underscores."""
    assert slug("The consumer runtime (python -m consumer run)") == "the-consumer-runtime-python--m-consumer-run"
    assert slug("Changing max_duration safely") == "changing-max_duration-safely"
    assert slug("8. The container as ECS runs it") == "8-the-container-as-ecs-runs-it"
    assert slug("Environment settings (cdk.json)") == "environment-settings-cdkjson"


def test_anchors_read_code_spans_and_number_repeated_headings(tmp_path: Path) -> None:
    """A heading's code span counts as text, and a repeated heading gets -1 as on GitHub."""
    page = tmp_path / "page.md"
    page.write_text("# Run (`python -m consumer run`)\n\n## Notes\n\n## Notes\n\n    # not a heading\n")
    assert anchors(page) == {"run-python--m-consumer-run", "notes", "notes-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    """Every relative link on the page names a file that exists and, with #anchor, a heading in it."""
    assert broken(page) == []


@pytest.mark.parametrize("template", sorted(TEMPLATES), ids=lambda p: str(p.relative_to(ROOT)))
def test_template_links_resolve_from_the_generated_page(template: Path) -> None:
    """A bench template's relative links resolve from the folder its page is generated into."""
    assert broken(template, written_as=TEMPLATES[template]) == []


def test_every_markdown_file_is_checked() -> None:
    """No tracked .md escapes the checks above: a page elsewhere is added to PAGES or TEMPLATES."""
    found = {p for p in ROOT.rglob("*.md") if not {"node_modules", ".venv", "cdk.out"} & set(p.relative_to(ROOT).parts)}
    found = {p for p in found if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)}
    assert sorted(str(p.relative_to(ROOT)) for p in found - set(PAGES) - set(TEMPLATES)) == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    """No page in docs/ is an orphan: following links from the README leads to each."""
    reached, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in reached or page.suffix != ".md" or not page.exists():
            continue
        reached.add(page)
        todo += [(page.parent / t.partition("#")[0]).resolve() for t in links(page) if not EXTERNAL.match(t)]
    assert [str(page.relative_to(ROOT)) for page in DOCS if page not in reached] == []
