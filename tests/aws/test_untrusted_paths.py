"""Paths a buildspec names stay in their place (epstack/aws/places.py): artifacts, reports and batch
task buildspecs inside the source directory, what run-local writes inside --out, artifact
identifiers CodeBuild's. Named cases from issue 19 (class 1), then generated ones (Hypothesis)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epstack.aws import lint as lint_module
from epstack.aws.buildspec import Document, FileSet, load_buildspec, load_document
from epstack.aws.lint import lint
from epstack.aws.outputs import copy_artifacts
from epstack.aws.runner import run_local
from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.pins.load import load_pins
from epstack.pins.model import Pins
from tests.conftest import PINS

SECRET = "SECRET outside the source\n"
SOURCE_FIX = "fix: name a path inside the source directory"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/src (the source: a.txt, out/b.txt, out/sub/c.txt, out/in -> ../a.txt) beside tmp/outside
    (secret.txt, junit.xml, docker.yml: a buildspec that runs Docker)."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "out" / "sub").mkdir(parents=True)
    outside.mkdir()
    (src / "a.txt").write_text("a\n")
    (src / "out" / "b.txt").write_text("b\n")
    (src / "out" / "sub" / "c.txt").write_text("c\n")
    (src / "out" / "in").symlink_to("../a.txt")
    (outside / "secret.txt").write_text(SECRET)
    (outside / "junit.xml").write_text('<testsuite><testcase name="secret"/></testsuite>')
    (outside / "docker.yml").write_text(
        "version: 0.2\nphases:\n  build:\n    commands:\n      - docker build .\n"
    )
    return tmp_path.resolve()


def write(tree: Path, text: str) -> Path:
    path = tree / "src" / "buildspec.yml"
    path.write_text(text)
    return path


def run_cli(tree: Path, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["codebuild", "run-local", str(path), "--pins", str(PINS), "--source", str(tree / "src")]
    code = main([*argv, "--out-dir", str(tree / "run")])
    return code, capsys.readouterr().err


def lint_cli(tree: Path, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["codebuild", "lint", "--pins", str(PINS), "--source", str(tree / "src"), str(path)])
    return code, "".join(capsys.readouterr())  # the findings (stdout), the verdict (stderr)


def written(root: Path) -> Iterator[Path]:
    """Every file under root (none when root is missing)."""
    return (p for p in root.rglob("*") if p.is_file())


def inside(path: Path | str, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(root)


# ---- named: artifacts and reports read from outside the source ---------------------------------

BUILD = "version: 0.2\nphases:\n  build:\n    commands:\n      - touch ran\n"


@pytest.mark.parametrize(
    ("block", "line", "key"),
    [
        ("artifacts:\n  base-directory: ../outside\n  files: [secret.txt]\n", 7, "artifacts.base-directory"),
        ("artifacts:\n  files: [../outside/secret.txt]\n", 7, "artifacts.files"),
        ("artifacts:\n  base-directory: '{outside}'\n  files: ['*']\n", 7, "artifacts.base-directory"),
        ("artifacts:\n  files: ['{outside}/secret.txt']\n", 7, "artifacts.files"),
        ("artifacts:\n  base-directory: out\n  files: ['../../outside/*']\n", 8, "artifacts.files"),
        (
            "artifacts:\n  files: [a.txt]\n  secondary-artifacts:\n    leak:\n"
            "      base-directory: out/../../outside\n      files: ['*']\n",
            10,
            "artifacts.secondary-artifacts.leak.base-directory",
        ),
        ("reports:\n  guard:\n    base-directory: ../outside\n    files: [junit.xml]\n", 8, "reports.guard"),
    ],
)
def test_run_local_refuses_artifacts_and_reports_outside_the_source_before_running(
    tree: Path, block: str, line: int, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tree, BUILD + block.format(outside=tree / "outside"))
    code, err = run_cli(tree, path, capsys)
    assert code == 2, err
    assert f"{path}:{line}: [aws] {key}" in err and " leads to " in err
    assert SOURCE_FIX in err and "Traceback" not in err
    assert not (tree / "src" / "ran").exists() and not (tree / "run").exists()
    assert lint_cli(tree, path, capsys)[0] == 1


def test_run_local_refuses_a_symlink_the_build_points_out_of_the_source(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The build itself leaves out/leak -> ../../outside/secret.txt; lint could not see it coming."""
    path = write(
        tree,
        "version: 0.2\nphases:\n  build:\n    commands:\n      - ln -s ../../outside/secret.txt out/leak\n"
        "artifacts:\n  base-directory: out\n  files: ['**/*']\n",
    )
    code, err = run_cli(tree, path, capsys)
    assert code == 2, err
    assert f"{path}:6: artifacts.files: 'out/leak' leads to {tree / 'outside' / 'secret.txt'}" in err
    assert SOURCE_FIX in err
    assert not (tree / "run").exists()


def test_a_report_the_build_points_out_of_the_source_is_not_read(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tree,
        "version: 0.2\nphases:\n  build:\n    commands:\n      - ln -s ../outside/junit.xml junit.xml\n"
        "reports:\n  guard:\n    files: [junit.xml]\n",
    )
    code, err = run_cli(tree, path, capsys)
    assert code == 2, err
    assert f"{path}:7: reports.guard.files: 'junit.xml' leads to {tree / 'outside' / 'junit.xml'}" in err


def test_symlinks_inside_the_source_are_still_collected(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tree, BUILD + "artifacts:\n  base-directory: out\n  files: ['**/*']\n")
    code, err = run_cli(tree, path, capsys)
    assert code == 0, err
    artifacts = tree / "run" / "artifacts"
    assert sorted(p.relative_to(artifacts).as_posix() for p in written(artifacts)) == [
        "b.txt",
        "in",
        "sub/c.txt",
    ]
    assert (artifacts / "in").read_text() == "a\n" and not (artifacts / "in").is_symlink()


# ---- named: secondary artifact identifiers and what run-local writes ---------------------------


SECONDARY = "artifacts:\n  files: [a.txt]\n  secondary-artifacts:\n    {}:\n      files: [a.txt]\n"


@pytest.mark.parametrize("identifier", ["{victim}", "../../../victim", "a/b", "a.b", "x" * 128])
def test_secondary_artifact_identifiers_are_codebuilds(
    tree: Path, identifier: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An identifier that is a path once overwrote the file it named (victim/a.txt)."""
    victim = tree / "victim"
    victim.mkdir()
    (victim / "a.txt").write_text("keep\n")
    name = identifier.format(victim=victim)
    path = write(
        tree,
        BUILD + SECONDARY.format(json.dumps(name)),
    )
    for (code, err), expected in ((run_cli(tree, path, capsys), 2), (lint_cli(tree, path, capsys), 1)):
        assert code == expected and f"{path}:9: [aws] artifacts.secondary-artifacts.{name}: " in err, err
        assert "fix: an artifact identifier is letters, digits and underscores" in err
    assert (victim / "a.txt").read_text() == "keep\n"
    assert not (tree / "run").exists() and not (tree / "src" / "ran").exists()


def test_run_local_writes_only_under_out_even_for_a_spec_that_skipped_the_schema(tree: Path) -> None:
    """The write side holds on its own: a spec built in code with a path for an identifier."""
    path = write(tree, BUILD + "artifacts:\n  files: [a.txt]\n")
    spec = dataclasses.replace(
        load_buildspec(path), secondary_artifacts={"../../escaped": FileSet(files=("a.txt",))}
    )
    with pytest.raises(
        BadInput, match=r"'\.\./\.\./escaped/a\.txt' leads to .*, outside the artifacts directory"
    ):
        run_local(
            spec, source=tree / "src", out=tree / "run", overrides={}, secrets=None, echo=lambda _: None
        )
    assert sorted(p.name for p in tree.iterdir()) == ["outside", "src"]


# ---- named: lint never reads a batch buildspec outside the source ------------------------------


def test_lint_never_reads_a_batch_buildspec_outside_the_source(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "src" / "link.yml").symlink_to("../outside/docker.yml")
    (tree / "src" / "docker.yml").write_text((tree / "outside" / "docker.yml").read_text())
    read: list[Path] = []

    def recording_load_document(path: Path) -> Document:
        read.append(path)
        return load_document(path)

    monkeypatch.setattr(lint_module, "load_document", recording_load_document)
    tasks = [
        "/etc/shadow",
        str(tree / "outside" / "docker.yml"),
        "../outside/docker.yml",
        "link.yml",
        "docker.yml",
    ]
    path = write(
        tree,
        "version: 0.2\nbatch:\n  build-list:\n"
        + "".join(f"    - identifier: t{i}\n      buildspec: {json.dumps(t)}\n" for i, t in enumerate(tasks)),
    )
    code, err = lint_cli(tree, path, capsys)
    assert code == 1
    for index, task in enumerate(tasks[:-1]):
        assert f"{path}:{5 + 2 * index}: [aws] batch.build-list.{index}.buildspec: {task!r} leads to" in err
    assert err.count("outside the source directory") == 4
    assert err.count("runs Docker") == 1 and "(" + str(tree / "src" / "docker.yml") in err
    assert all(inside(p, tree / "src") for p in read), read


# ---- generated --------------------------------------------------------------------------------

SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "*",
        "**",
        "out",
        "sub",
        "in",
        "a.txt",
        "b.txt",
        "src",
        "outside",
        "secret.txt",
        "junit.xml",
    ]
)


@st.composite
def globs(draw: st.DrawFn, tree: Path) -> str:
    """Relative or absolute paths and globs built from the tree's names, '..' and wildcards."""
    text = "/".join(draw(st.lists(SEGMENTS, min_size=1, max_size=5)))
    return draw(st.sampled_from([text, "/" + text, f"{tree}/{text}", f"{tree / 'src'}/{text}"]))


def snapshot(root: Path) -> dict[str, str]:
    return {str(p): p.read_text() for p in written(root) if not p.is_relative_to(root / "dest")}


@pytest.fixture
def pins() -> Pins:
    return load_pins(PINS)


@given(data=st.data(), discard=st.booleans())
def test_collected_artifacts_come_from_the_source_and_land_under_out(
    tree: Path, pins: Pins, data: st.DataObject, discard: bool
) -> None:
    """Whatever base-directory and files say: refused at the block's line with the fix, or every
    copy is a source file's content, written under the destination and nowhere else; lint flags
    what run-local refuses before the build."""
    base, pattern = data.draw(globs(tree) | st.just("")), data.draw(globs(tree))
    file_set = FileSet(files=(pattern,), base_directory=base, discard_paths=discard)
    destination = tree / "dest" / str(data.draw(st.integers(0, 10**9)))
    before = snapshot(tree)
    try:
        copied = copy_artifacts(file_set, tree / "src", destination, name="", at="spec.yml:3: artifacts")
    except BadInput as exc:
        assert str(exc).startswith("spec.yml:3: artifacts.") and "; fix: " in str(exc), exc
        copied = []
    assert snapshot(tree) == before
    assert SECRET not in {p.read_text() for p in written(destination)}
    assert all(inside(p, destination) for p in written(destination))
    spec = write(
        tree,
        BUILD
        + "artifacts:\n"
        + "".join(
            f"  {key}: {json.dumps(value)}\n"
            for key, value in (("base-directory", base), ("files", [pattern]))
        ),
    )
    flagged = [
        f
        for f in lint([spec], pins, source=tree / "src")
        if ".base-directory: " in f.message or ".files: " in f.message
    ]
    assert not (flagged and copied), (flagged, copied)


IDENTIFIERS = st.text(
    st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), min_size=1, max_size=130
) | st.from_regex(r"[A-Za-z0-9_]{1,127}", fullmatch=True)


@given(identifier=IDENTIFIERS)
def test_lint_and_run_local_hold_codebuilds_identifier_rule(tree: Path, pins: Pins, identifier: str) -> None:
    spec = write(
        tree,
        BUILD + SECONDARY.format(json.dumps(identifier)),
    )
    at = [
        f
        for f in lint([spec], pins, source=tree / "src")
        if f.message.startswith("artifacts.secondary-artifacts.")
    ]
    codebuilds = len(identifier) < 128 and identifier.isascii() and identifier.replace("_", "a").isalnum()
    assert (not at) == codebuilds, at
    assert all(f.line == 9 and "letters, digits and underscores" in f.message for f in at)


@given(data=st.data())
def test_lint_reads_no_batch_buildspec_outside_the_source(
    tree: Path, pins: Pins, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "src" / "docker.yml").unlink(missing_ok=True)
    (tree / "src" / "docker.yml").symlink_to("../outside/docker.yml")
    read: list[Path] = []

    def recording_load_document(path: Path) -> Document:
        read.append(path)
        return load_document(path)

    monkeypatch.setattr(lint_module, "load_document", recording_load_document)
    task = data.draw(globs(tree) | st.sampled_from(["docker.yml", "../outside/docker.yml", "buildspec.yml"]))
    spec = write(
        tree,
        f"version: 0.2\nbatch:\n  build-list:\n    - identifier: t\n      buildspec: {json.dumps(task)}\n",
    )
    try:
        findings = lint([spec], pins, source=tree / "src")
    except BadInput as exc:  # a file of the source that is no buildspec (a.txt)
        assert inside(str(exc).split(":")[0], tree / "src"), exc
        findings = []
    assert all(inside(p, tree / "src") for p in read), read
    if not inside(tree / "src" / task, tree / "src"):
        assert any(f.line == 5 and "outside the source directory" in f.message for f in findings), findings
