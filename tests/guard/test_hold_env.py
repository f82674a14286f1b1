"""hold-env (scripts/image/hold-env.c), built static as install-epstack.sh builds it, reading the file
epstack.guard.environment writes: what it holds, what the guard rebuilds from that (given()), and what
--restore gives the command. The image's own start is in tests/image/test_docker_build.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from epstack.guard.environment import HELD, REFUSED, given, held_file_text, variable
from tests.guard.test_guard import compiler

SOURCE = Path(__file__).parents[2] / "scripts" / "image" / "hold-env.c"
ENV = shutil.which("env") or "/usr/bin/env"
BUILT = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/nvidia/lib", "PYTHONSAFEPATH": "1"}


@pytest.fixture(scope="module")
def hold_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """hold-env, and the file it reads (not written yet)."""
    folder = tmp_path_factory.mktemp("hold-env")
    held = folder / "held-variables"
    binary = folder / "hold-env"
    flags = ["-static", "-O2", "-Wall", "-Wextra", "-Werror", f'-DHELD_FILE="{held}"']
    subprocess.run([compiler("gcc"), *flags, "-o", str(binary), str(SOURCE)], check=True)
    return binary, held


def environment(*argv: str | Path, env: dict[str, str]) -> dict[str, str]:
    """What `argv` (ending in env -0) runs its last program with."""
    out = subprocess.run([*map(str, argv), ENV, "-0"], env=env, capture_output=True, check=True).stdout
    return dict(entry.split("=", 1) for entry in out.decode().split("\0") if entry)


@pytest.mark.parametrize(
    "started",
    [
        pytest.param({**BUILT, "HOME": "/root"}, id="as built"),
        pytest.param(
            {**BUILT, "LD_AUDIT": "/tmp/audit.so", "LD_LIBRARY_PATH": "/host/lib"}, id="set otherwise"
        ),
        pytest.param({"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""}, id="unset and empty"),
        pytest.param({**BUILT, "BASH_FUNC_epstack%%": "() { return 0; }"}, id="an exported function"),
    ],
)
def test_what_differs_from_the_build_is_held_and_given_back(
    hold_env: tuple[Path, Path], started: dict[str, str]
) -> None:
    binary, held = hold_env
    held.write_bytes(held_file_text(BUILT))
    during = environment(binary, ENV, env=started)
    unjudged = {k: v for k, v in started.items() if variable(k, REFUSED) is None}
    assert {k: v for k, v in during.items() if not k.startswith(HELD)} == {**unjudged, **BUILT}, (
        "the start runs with the build's values of every refused variable, the rest as given"
    )
    assert given(during) == started, "the guard sees what the start was given"
    assert environment(binary, ENV, binary, "--restore", env=started) == started, "and so does the command"


def test_nothing_is_held_without_the_builds_file(hold_env: tuple[Path, Path]) -> None:
    binary, held = hold_env
    held.unlink(missing_ok=True)
    started = {"PATH": "/usr/bin:/bin", "LD_AUDIT": "/tmp/audit.so"}
    assert environment(binary, ENV, env=started) == started


def test_a_program_that_cannot_run_is_one_line_and_127(hold_env: tuple[Path, Path], tmp_path: Path) -> None:
    binary, _held = hold_env
    result = subprocess.run([binary, tmp_path / "none"], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stderr) == (
        127,
        f"hold-env: cannot run {tmp_path / 'none'}: No such file or directory\n",
    )
    usage = subprocess.run([binary], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: hold-env PROGRAM")
