"""Argument errors a person reads once: one line on stderr naming the bad flag, command or value, the
near miss and where the help is, exit 2, nothing on stdout; options spelt whole; -q/-v anywhere; a
moved command still runs for one release, warned."""

from __future__ import annotations

import pytest

from epstack.commands.main import main, moved
from tests.conftest import PINS

RENDER = ["cluster", "render", "--platform", "k8s", "--job", "serve", "--nodes", "2"]


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    return line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            [*RENDER, "--gpu-per-node", "8"],
            "error: --gpu-per-node: not an option of epstack cluster render; fix: did you mean "
            "--gpus-per-node? (see epstack cluster render --help)",
        ),
        (
            ["clster", "render"],
            "error: 'clster': not a command of epstack; fix: did you mean cluster? (see epstack --help)",
        ),
        (
            ["pins", "chek"],
            "error: 'chek': not a command of epstack pins; fix: did you mean check? "
            "(see epstack pins --help)",
        ),
        (
            [*RENDER, "--gpus-per-node", "8", "--platform", "k9s"],
            "error: argument --platform: 'k9s' is not a choice; fix: did you mean k8s? "
            "(see epstack cluster render --help)",
        ),
        (
            ["pins", "check", "--pins", str(PINS), "stray"],
            "error: 'stray': an argument epstack pins check does not take; fix: drop it "
            "(see epstack pins check --help)",
        ),
    ],
    ids=["flag", "command", "subcommand", "choice", "stray argument"],
)
def test_a_typo_is_one_line_with_the_near_miss(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert one_line(capsys) == said


def test_an_unknown_flag_is_named_before_a_required_one_it_hides(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse alone says "required: --gpus-per-node", never naming the typo that caused it."""
    assert (
        main(
            [
                "cluster",
                "render",
                "--platform",
                "k8s",
                "--job",
                "serve",
                "--nodes",
                "2",
                "--gpu-per-node",
                "8",
            ]
        )
        == 2
    )
    assert "--gpu-per-node: not an option" in one_line(capsys)


@pytest.mark.parametrize(("short", "whole"), [("--plat", "--platform"), ("--gpus", "--gpus-per-node")])
def test_an_abbreviation_is_refused(short: str, whole: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--plat k8s --gpus 8` once ran: a later option would have changed what it meant."""
    argv = [
        "cluster",
        "render",
        "--job",
        "serve",
        "--nodes",
        "1",
        "--platform",
        "k8s",
        "--gpus-per-node",
        "8",
    ]
    assert main([short if arg == whole else arg for arg in argv]) == 2
    assert one_line(capsys) == (
        f"error: {short}: not an option of epstack cluster render (options are spelt whole); fix: write "
        f"{whole} (see epstack cluster render --help)"
    )


def test_global_flags_go_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["-q", "pins", "check"], ["pins", "-q", "check"], ["pins", "check", "-q"]):
        assert main([*argv, "--pins", str(PINS)]) == 0
        out, err = capsys.readouterr()
        assert "ok (4 targets" in out and err == "", argv


@pytest.mark.parametrize(
    ("old", "new", "warned"),
    [
        (["lock", "--check"], ["pins", "lock", "--check"], ("lock", "pins lock")),
        (
            ["-q", "sbom", "--layer", "base"],
            ["-q", "image", "sbom", "--layer", "base"],
            ("sbom", "image sbom"),
        ),
        (["jit", "install"], ["image", "jit-install"], ("jit install", "image jit-install")),
        (
            ["nccl", "check", "--loaded"],
            ["image", "nccl-check", "--loaded"],
            ("nccl check", "image nccl-check"),
        ),
        (["guard", "--at-start"], ["image", "guard", "--at-start"], ("guard", "image guard")),
        (
            ["ecr", "login", "127.0.0.1:5000"],
            ["publish", "login", "127.0.0.1:5000"],
            ("ecr login", "publish login"),
        ),
        (["guard", "--layer", "sglang"], ["guard", "--layer", "sglang"], None),
        (["jit", "probe"], ["jit", "probe"], None),
    ],
)
def test_a_moved_command_runs_its_new_path_warned(
    old: list[str], new: list[str], warned: tuple[str, str] | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert moved(old) == new
    said = "warning: epstack {} is deprecated and goes in the next release; fix: write epstack {}\n"
    assert capsys.readouterr().err == (said.format(*warned) if warned else "")


def test_an_old_path_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", "--check", "--pins", str(PINS)]) == 0
    out, err = capsys.readouterr()
    assert "every lock is fresh" in out
    assert (
        err
        == "warning: epstack lock is deprecated and goes in the next release; fix: write epstack pins lock\n"
    )
