"""One meaning per option name: every parser agrees with epstack.commands.meanings, a second meaning
fails the check, and each renamed option still works for one release, warning with its new name."""

from __future__ import annotations

import argparse

import pytest

from epstack.commands import clireference, jit
from epstack.commands.common import parse, rename
from epstack.commands.main import build_parser
from epstack.commands.meanings import MEANINGS, conflicts


def test_every_option_name_has_its_one_meaning() -> None:
    assert conflicts(clireference.uses()) == []


def test_every_meaning_is_used() -> None:
    used = {name for _, action in clireference.uses() for name in action.option_strings}
    assert set(MEANINGS) - used == set()


@pytest.mark.parametrize(
    ("name", "kwargs", "broken"),
    [
        ("--target", {"choices": ("k8s", "slurm")}, "takes a choice, its meaning a value"),
        ("--json", {"action": "store_true"}, "takes a flag, its meaning a value"),
        ("--profile", {}, "takes a value, its meaning a choice"),
        ("--arch", {"metavar": "LIST"}, "metavar LIST, its meaning's ARCH"),
        ("--brand-new", {}, "no meaning in epstack.commands.meanings"),
        ("--nnodes", {}, "a retired name, one name per concept"),
        ("--out", {"metavar": "DIR"}, "metavar DIR, its meaning's FILE"),
    ],
)
def test_a_second_meaning_fails(
    monkeypatch: pytest.MonkeyPatch, name: str, kwargs: dict[str, object], broken: str
) -> None:
    register = jit.register

    def with_one_more(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        register(subparsers)
        subparsers.choices["jit"].add_argument(name, help="an option with another meaning", **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jit, "register", with_one_more)
    fix = "; fix: add one" if "no meaning" in broken else "; fix: --nodes" if "retired" in broken else ""
    assert f"epstack jit {name}: {broken}{fix}" in conflicts(clireference.uses())


IMAGE = "registry.example/sglang@sha256:" + "a" * 64
RENAMED = [
    (["cluster", "prepull", "--target", "k8s", "--image", IMAGE], "--target", "--platform"),
    (["image", "deepep-build", "--wheel-dir", "w", "--arch", "9.0"], "--arch", "--cuda-arch"),
    (["jit", "probe", "--arch", "9.0a", "--arch", "10.0a"], "--arch", "--cuda-arch"),
    (["image", "sbom", "--version", "base-1"], "--version", "--image-tag"),
    (["image", "nccl-check", "--version", "2.30.7"], "--version", "--nccl-version"),
    (["smoke", "elastic", "--preset", "tiny"], "--preset", "--profile"),
    (["codebuild", "batchspec", "--no-smoke", "--check", "batch.yml"], "--check", "--compare"),
    (["smoke", "elastic", "--nproc-per-node", "8"], "--nproc-per-node", "--gpus-per-node"),
    (["smoke", "elastic", "--nnodes", "2"], "--nnodes", "--nodes"),
    (["smoke", "serve", "--gpus", "2"], "--gpus", "--gpus-per-node"),
    (["render", "--out", "build/r"], "--out", "--out-dir"),
    (["build", "--out", "build/r"], "--out", "--out-dir"),
    (["publish", "push", "report.json", "--registry", "r.example", "--out", "o"], "--out", "--out-dir"),
    (["publish", "pull", "--registry", "r.example", "--out", "o"], "--out", "--out-dir"),
    (["codebuild", "run-local", "build.yml", "--out", "o"], "--out", "--out-dir"),
]


@pytest.mark.parametrize(("argv", "old", "new"), RENAMED)
def test_an_old_name_works_and_warns_with_the_new_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], old: str, new: str
) -> None:
    with_old = parse(build_parser(argv[0]), argv)
    assert capsys.readouterr().err == (
        f"warning: {old} is deprecated and goes in the next release; fix: write {new}\n" * argv.count(old)
    )
    with_new = parse(build_parser(argv[0]), [new if arg == old else arg for arg in argv])
    assert capsys.readouterr().err == ""
    assert isinstance(with_old, argparse.Namespace) and vars(with_old) == vars(with_new)


def test_an_old_name_is_not_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(build_parser("cluster"), ["cluster", "prepull", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--platform {k8s,slurm}" in out and "--target" not in out


def test_a_required_option_is_given_by_its_old_name_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(build_parser("cluster"), ["cluster", "prepull"]) == 2
    assert "the following arguments are required: --platform" in capsys.readouterr().err


def test_an_old_name_cannot_take_another_options_place() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--platform")
    parser.add_argument("--target")
    with pytest.raises(ValueError, match="--target is another option"):
        rename(parser, "--platform", "--target")
