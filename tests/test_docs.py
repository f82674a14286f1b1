"""The docs site (mkdocs.yml, docs/) builds with `mkdocs build --strict` (a broken link or anchor, a page
left out of the nav fail it); the command-line reference is the parsers' own; the README stays short,
every docs page it names there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    pictures = ("serve-sweep.png", "cold-start.png", "first-calls.png")  # drawn from the JSON by the hook
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
