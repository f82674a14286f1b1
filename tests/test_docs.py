"""The docs site (mkdocs.yml, docs/) builds with `mkdocs build --strict` (a broken link or anchor, a page
left out of the nav fail it); the command-line reference is the parsers' own; the README stays short,
every docs page it names there."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from epstack.commands import clireference, jit
from tests.conftest import REPO


def mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )


def test_the_site_builds_strict(tmp_path: Path) -> None:
    result = mkdocs_build(REPO, tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "guides" / "jit-caches" / "index.html").is_file()
    # drawn from the JSON by the hook
    pictures = ("serve-sweep.png", "cold-start.png", "cold-start-h100.png", "first-calls.png")
    assert all((tmp_path / "site" / "images" / name).read_bytes()[:4] == b"\x89PNG" for name in pictures)


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The control: the same build over a copy with one link to a page that is not there."""
    copy = tmp_path / "repo"
    (copy / "docs").mkdir(parents=True)
    for path in (REPO / "docs").rglob("*"):
        if path.is_file():
            target = copy / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    hook = "scripts/dev/docs_plots.py"
    (copy / "mkdocs.yml").write_text((REPO / "mkdocs.yml").read_text().replace(hook, str(REPO / hook)))
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](guides/missing.md).\n")
    result = mkdocs_build(copy, tmp_path / "site")
    assert result.returncode != 0 and "guides/missing.md" in result.stderr


def test_the_readme_is_short_and_every_page_it_links_exists() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    missing = [link for link in links if not (REPO / link).is_file()]
    assert links and not missing, missing


def test_the_readmes_commands_table_is_the_parsers() -> None:
    text = (REPO / "README.md").read_text()
    assert clireference.readme(text) == text, "the commands changed: run `make reference`, commit README.md"
    assert "| `epstack pins check|get|predict|bump|outdated|lock` |" in text.replace("\\|", "|")


def test_a_new_command_changes_the_readmes_table(monkeypatch: pytest.MonkeyPatch) -> None:
    register = jit.register

    def with_one_more(subparsers: object) -> None:
        register(subparsers)  # type: ignore[arg-type]
        group = next(a for a in subparsers.choices["jit"]._actions if a.choices)  # type: ignore[attr-defined]
        group.add_parser("brand-new", help="a command the table does not have")

    monkeypatch.setattr(jit, "register", with_one_more)
    text = (REPO / "README.md").read_text()
    assert "jit probe\\|export\\|layer\\|brand-new`" in clireference.readme(text)


@pytest.mark.parametrize("name", sorted(clireference.PAGES))
def test_each_reference_page_is_the_codes_own(name: str) -> None:
    assert (REPO / "docs" / "reference" / name).read_text() == clireference.PAGES[name](), (
        f"the code changed: run `make reference` and commit docs/reference/{name}"
    )


def test_an_option_added_to_a_parser_changes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    register = jit.register

    def with_one_more(subparsers: object) -> None:
        register(subparsers)  # type: ignore[arg-type]
        jit_parser = subparsers.choices["jit"]  # type: ignore[attr-defined]
        jit_parser.add_argument("--brand-new", help="an option the page does not have")

    monkeypatch.setattr(jit, "register", with_one_more)
    assert "`--brand-new` | an option the page does not have |" in clireference.page()


DOCS_PAGE = re.compile(r"docs/([\w/.-]+\.md)(?:#([\w-]+))?")


def anchors(page: Path) -> set[str]:
    """The heading anchors mkdocs gives `page` (its toc's slugs), fenced code left out."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return {slugify(heading, "-") for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def messages(source: Path) -> Iterator[str]:
    """The string literals of a module that are not docstrings: what it prints."""
    tree = ast.parse(source.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


SOURCES = sorted((REPO / "epstack").rglob("*.py"))


def test_every_docs_page_and_anchor_the_package_names_exists() -> None:
    named = {match for source in SOURCES for match in DOCS_PAGE.findall(source.read_text())}
    assert named, "the scan found no docs reference"
    missing = [
        f"docs/{page}#{anchor}"
        for page, anchor in sorted(named)
        if not (REPO / "docs" / page).is_file() or (anchor and anchor not in anchors(REPO / "docs" / page))
    ]
    assert missing == []


def test_every_message_that_sends_to_the_docs_names_the_section() -> None:
    pageonly = [
        f"{source.relative_to(REPO)}: {text!r}"
        for source in SOURCES
        for text in messages(source)
        for _, anchor in DOCS_PAGE.findall(text)
        if not anchor
    ]
    assert pageonly == []


def test_a_missing_anchor_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Sources offline\n\n```\n# not a heading\n```\n")
    assert anchors(page) == {"title", "sources-offline"}
