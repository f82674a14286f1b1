"""Hostile buildspecs, denial of service (issue 19, class 4): YAML that expands, nests or overflows;
on-failure retries without end or with patterns that backtrack; commands that close the output,
leave a child holding it, or never end. Each is one BadInput line naming file:line, or a run-local
that ends within its limits.

What could hang runs in a subprocess with a timeout (`python -m epstack`, memory capped), so a
regression fails the test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epstack.aws.buildspec import load_buildspec, load_document, schema_findings
from epstack.aws.lint import lint
from epstack.aws.runner import RunResult, run_local
from epstack.commands.main import main
from epstack.errors import BadInput
from epstack.pins.model import Pins
from tests.conftest import PINS, REPO

Write = Callable[..., Path]

# A billion laughs in nine levels (the is 538 bytes): 10^9 strings, aliases expanded.
BOMB = """\
version: 0.2
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def run_local_cli(path: Path, out: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`epstack codebuild run-local PATH` from PATH's folder into OUT, with the checkout's pins."""
    return epstack(
        "codebuild",
        "run-local",
        str(path),
        "--pins",
        str(PINS),
        "--source",
        str(path.parent),
        "--out-dir",
        str(out),
        *args,
        timeout=timeout,
    )


def epstack(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m epstack ARGS` under 4 GB of memory; fails the test past `timeout` seconds."""
    command = f'ulimit -v 4000000; exec {sys.executable} -m epstack "$@"'
    try:
        return subprocess.run(
            ["bash", "-c", command, "epstack", *args],
            capture_output=True,
            check=False,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"epstack {' '.join(args)} still running after {timeout} s")


def one_line_at(message: str, path: Path, line: int) -> None:
    assert message.startswith(f"{path}:{line}: "), message
    assert "; fix: " in message and "\n" not in message and "Traceback" not in message, message


def run(path: Path, tmp_path: Path, **options: float) -> tuple[RunResult, str]:
    out = tmp_path / "out"
    result = run_local(
        load_buildspec(path),
        source=path.parent,
        out=out,
        overrides={},
        secrets=None,
        echo=lambda _: None,
        **options,
    )
    return result, (out / "build.log").read_text()


def gone(pid: int) -> bool:
    """No such process, or only its zombie (a container's init may not reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# ---- YAML ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["lint", "run-local"])
def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound(
    buildspec: Write, tmp_path: Path, command: str
) -> None:
    path = buildspec(BOMB)
    assert len(BOMB) < 600
    options = ["--out-dir", str(tmp_path / "out")] if command == "run-local" else []
    done = epstack(
        "codebuild", command, str(path), "--pins", str(PINS), "--source", str(path.parent), *options
    )
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip().removeprefix("error: ")
    one_line_at(message, path, 6)  # e: 66430 nodes, over 10000
    assert "aliases expanded" in message
    assert not (tmp_path / "out").exists()


# 9000 aliases of one 8 KiB command (an 80 KB file): 72 MB of text for lint's secret scan, 87 s of it.
LONG_COMMAND = "echo " + " ".join(f"word{i}" for i in range(1300))[:7990]
WIDE = "version: 0.2\nphases:\n  build:\n    commands:\n      - &a " + json.dumps(LONG_COMMAND) + "\n"
WIDE += "      - *a\n" * 9000


def test_aliases_of_a_long_value_are_refused_before_lint_scans_them(buildspec: Write) -> None:
    path = buildspec(WIDE)
    assert len(WIDE) < 110_000
    start = time.monotonic()
    done = epstack("codebuild", "lint", str(path), "--pins", str(PINS), "--source", str(path.parent))
    assert done.returncode == 2 and time.monotonic() - start < 30, done.stderr
    message = done.stderr.strip().removeprefix("error: ")
    one_line_at(message, path, 136)  # the alias that passes 1,048,576 characters
    assert "characters of keys and values with aliases expanded" in message


def test_a_wide_buildspec_within_the_bounds_lints_in_seconds(buildspec: Write) -> None:
    path = buildspec(WIDE.replace("      - *a\n" * 9000, "      - *a\n" * 120))
    start = time.monotonic()
    assert lint([path], _no_pins, source=path.parent) == []
    assert time.monotonic() - start < 20


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "version: 0.2\nphases:\n  install: &common\n    commands: [make]\n    bogus: 1\n  build:\n"
            "    <<: *common\n    finally: [echo done]\n",
            5,
            "phases.build.bogus: unknown key 'bogus'",
        ),
        (
            "version: 0.2\nx-steps: &steps\n  commands:\n    - export TOKEN=ghp_" + "a" * 36 + "\n"
            "phases:\n  build:\n    <<: *steps\n    finally: [echo done]\n",
            4,
            "a GitHub token in plain text",
        ),
    ],
)
def test_a_merge_key_into_a_phase_is_linted_at_the_line_it_came_from(
    buildspec: Write, text: str, line: int, message: str
) -> None:
    path = buildspec(text)
    findings = lint([path], _no_pins, source=path.parent)
    assert any(f.line == line and f.message.startswith(message) for f in findings), findings


def test_keys_with_terminal_escapes_are_printed_escaped(buildspec: Write) -> None:
    path = buildspec('version: 0.2\nphases:\n  build:\n    commands: [make]\n  "\\e[2J\\e]0;owned\\a":\n'
                     "    commands: [x]\n")  # fmt: skip
    done = epstack("codebuild", "lint", str(path), "--pins", str(PINS), "--source", str(path.parent))
    assert done.returncode == 1 and "\x1b" not in done.stdout + done.stderr
    assert "phases.\\x1b[2J\\x1b]0;owned\\x07: unknown key" in done.stdout + done.stderr


def _no_pins() -> Pins:
    raise AssertionError("aws rules read no pins")


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("version: 0.2\nx: " + "[" * 500 + "]" * 500, 2, "nested over 64 levels deep"),
        ("version: 0.2\nx: " + "1" * 5000, 2, "cannot be read as !!int"),
        ("version: 0.2\nx: a\0b", 2, "character U+0000 is not allowed"),
        ("version: 0.2\nphases:\n  build:\n    commands:\n      - " + "a" * 9000, 5, "9000 characters"),
        ("version: 0.2\nx: &loop [1, *loop]", 2, "alias *loop is inside the node it names"),
        ("version: 0.2\nx: !!bool maybe", 2, "'maybe' cannot be read as !!bool"),
        ("version: 0.2\n\nx: 2026-13-45", 3, "cannot be read as !!timestamp"),
        ("version: 0.2\nx: 0x_", 2, "cannot be read as !!int"),
    ],
)
def test_nesting_numbers_and_special_characters_are_one_line_at_their_line(
    buildspec: Write, text: str, line: int, what: str
) -> None:
    path = buildspec(text)
    with pytest.raises(BadInput) as raised:
        load_document(path)
    one_line_at(str(raised.value), path, line)
    assert what in str(raised.value)


def test_a_buildspec_over_256_kib_is_refused_before_it_is_parsed(buildspec: Write) -> None:
    path = buildspec("version: 0.2\n" + "# padding\n" * 30_000)
    with pytest.raises(BadInput, match=r"over 262144 bytes, too large for a buildspec"):
        load_document(path)


SCALARS = st.sampled_from(
    [
        "1" * 5000,
        "0x_",
        "2026-13-45",
        "!!bool maybe",
        "!!int x",
        "!!float x",
        '"\\0"',
        "~",
        "yes",
        "1e999",
        "*a",
        "*b",
        "&a x",
        "&b [*a, *a, *a, *a]",
        "!!binary @",
        "!!set [1]",
        "!!omap [1]",
        "a" * 9000,
        "<<: 5",
        "? [a]",
        "'x'",
        "{",
        "]",
    ]
) | st.text(max_size=12)


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    """A document of hostile scalars, anchors, aliases, tags and nesting, in flow style."""
    node = draw(
        st.recursive(
            SCALARS,
            lambda inner: (
                st.lists(inner, max_size=5).map(lambda xs: "[" + ", ".join(xs) + "]")
                | st.lists(st.tuples(SCALARS, inner), max_size=4).map(
                    lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"
                )
                | st.tuples(st.sampled_from("ab"), inner).map(lambda av: f"&{av[0]} {av[1]}")
            ),
            max_leaves=25,
        )
    )
    depth = draw(st.sampled_from([0, 0, 63, 70, 500]))
    return f"version: 0.2\nx: {'[' * depth}{node}{']' * depth}\n"


@given(text=yaml_texts())
def test_any_yaml_loads_or_is_one_line_naming_file_and_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "buildspec.yml"
    path.write_text(text)
    started = time.monotonic()
    try:
        document = load_document(path)
    except BadInput as exc:
        assert str(exc).startswith(f"{path}:") and "; fix: " in str(exc) and "\n" not in str(exc), exc
    else:
        schema_findings(document)
        list(document.strings())
    assert time.monotonic() - started < 10


# ---- on-failure -----------------------------------------------------------------------------------


def on_failure(value: str) -> str:
    return f"version: 0.2\nphases:\n  build:\n    on-failure: '{value}'\n    commands: [make]\n"


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("RETRY-101", "retries 101 times, over CodeBuild's 100; fix: RETRY-100 or fewer"),
        ("RETRY-" + "9" * 5000, "times, over CodeBuild's 100"),
        ("RETRY-1-(a+)+$", "repeats a group that itself repeats"),
        ("RETRY-(x|xy*)*z", "repeats a group that itself repeats"),
        ("RETRY-1-(unclosed", "is not a regular expression (missing ), unterminated subpattern)"),
        # Python warns before it refuses this set ("Possible set difference"): a finding, not a warning
        ("RETRY-1-[0--", "is not a regular expression (bad character range 0--)"),
        ("RETRY-2-" + "a" * 300, "a retry pattern of 300 characters, over 256"),
    ],
)
def test_lint_and_run_local_refuse_retries_without_end_or_patterns_that_backtrack(
    buildspec: Write, pins: Pins, value: str, what: str
) -> None:
    path = buildspec(on_failure(value))
    findings = [f for f in lint([path], pins, source=path.parent) if "on-failure" in f.message]
    assert [(f.line, f.message.split(": ", 1)[0]) for f in findings] == [(4, "phases.build.on-failure")]
    assert what in findings[0].message
    with pytest.raises(BadInput) as raised:
        load_buildspec(path)
    one_line_at(str(raised.value), path, 4)


@pytest.mark.parametrize(
    ("value", "count", "pattern"),
    [
        ("RETRY", 3, ".*"),
        ("RETRY-0", 0, ".*"),
        ("RETRY-100", 100, ".*"),
        ("RETRY-.*Error: Unable to connect to database.*", 3, ".*Error: Unable to connect to database.*"),
        ("RETRY-4-invalid+", 4, "invalid+"),
    ],
)
def test_codebuild_s_own_retry_examples_still_load(
    buildspec: Write, pins: Pins, value: str, count: int, pattern: str
) -> None:
    path = buildspec(on_failure(value))
    assert not lint([path], pins, source=path.parent)
    retry = load_buildspec(path).phases[0].retry
    assert retry is not None and (retry.count, retry.pattern) == (count, pattern)


@given(
    count=st.integers(0, 10**40) | st.integers(95, 105),
    pattern=st.none() | st.text(alphabet="ab.*+?(){}[]|^$\\-0123456789", min_size=1, max_size=30),
)
def test_a_retry_count_over_100_is_always_a_finding_and_one_within_is_kept(
    tmp_path: Path, pins: Pins, count: int, pattern: str | None
) -> None:
    value = f"RETRY-{count}" + (f"-{pattern}" if pattern else "")
    path = tmp_path / "buildspec.yml"
    path.write_text(on_failure(value.replace("'", "''")))
    findings = [f for f in lint([path], pins, source=tmp_path) if "on-failure" in f.message]
    if count > 100:
        assert any(f.line == 4 and "over CodeBuild's 100" in f.message for f in findings), findings
        return
    try:
        retry = load_buildspec(path).phases[0].retry
    except BadInput as exc:
        assert findings and str(exc).startswith(f"{findings[0]}"), (exc, findings)
        return
    assert not findings and retry is not None
    assert (retry.count, retry.pattern) == (count, pattern or ".*")


def test_a_pattern_that_backtracks_for_hours_on_the_log_is_given_up_and_not_retried(
    buildspec: Write, tmp_path: Path
) -> None:
    """Quantifiers in a row are not nested, so lint lets them pass; searching 3000 characters with
    them takes Python's re hours. The search runs apart and is stopped: no retry."""
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    on-failure: RETRY-1-.*.*.*.*.*x\n"
        "    commands:\n      - head -c 3000 /dev/zero | tr '\\0' a; echo; false\n"
    )
    out = tmp_path / "out"
    started = time.monotonic()
    done = run_local_cli(path, out)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30
    result = json.loads((out / "run.json").read_text())
    assert [(p["status"], p["attempts"]) for p in result["phases"]] == [("FAILED", 1)]
    assert "on-failure pattern still searching after 2 s: no retry" in (out / "build.log").read_text()


# ---- commands -------------------------------------------------------------------------------------


@pytest.mark.parametrize("closing", ["exec >&-", "exec >&- 2>&-", "exec >/dev/null 2>&1"])
def test_a_command_that_closes_or_redirects_its_output_does_not_hold_the_build(
    buildspec: Write, tmp_path: Path, closing: str
) -> None:
    path = buildspec(
        f"version: 0.2\nphases:\n  build:\n    commands:\n      - echo before\n      - {closing}\n"
        "      - touch reached\n"
    )
    out = tmp_path / "out"
    done = run_local_cli(path, out, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (path.parent / "reached").exists()
    assert "before" in (out / "build.log").read_text().splitlines()


def test_a_child_left_holding_the_output_does_not_hold_the_build(buildspec: Write, tmp_path: Path) -> None:
    """The shell exits; a child in its own session keeps the pipe open for 30 s."""
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    commands:\n"
        "      - setsid sleep 30 & echo $! > daemon.pid; exit 3\n      - echo next\n"
    )
    started = time.monotonic()
    try:
        result, log = run(path, tmp_path)
    finally:
        os.kill(int((path.parent / "daemon.pid").read_text()), 9)
    assert time.monotonic() - started < 15
    assert result.phase("build").exit_code == 3 and "next" not in log.splitlines()


def test_the_build_s_time_limit_stops_a_command_and_everything_it_started(
    buildspec: Write, tmp_path: Path
) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    commands:\n"
        "      - sleep 120 & echo $! > child.pid; wait\n    finally:\n      - touch finally-ran\n"
        "  post_build:\n    commands: [touch post-ran]\n"
    )
    out = tmp_path / "out"
    started = time.monotonic()
    done = run_local_cli(path, out, "--timeout", "2")
    child = int((path.parent / "child.pid").read_text())
    try:
        assert done.returncode == 1, done.stderr
        assert time.monotonic() - started < 30
        assert "build TIMED_OUT" in done.stdout
        result = json.loads((out / "run.json").read_text())
        assert result["status"] == "TIMED_OUT"
        assert [(p["name"], p["status"]) for p in result["phases"]] == [
            ("build", "TIMED_OUT"),
            ("post_build", "SKIPPED"),
        ]
        assert not (path.parent / "finally-ran").exists() and not (path.parent / "post-ran").exists()
        deadline = time.monotonic() + 5
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(child)
    finally:
        if not gone(child):
            os.kill(child, 9)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_the_time_limit_is_a_positive_number_of_seconds(
    buildspec: Write, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = buildspec("version: 0.2\nphases:\n  build:\n    commands: [true]\n")
    assert main(["codebuild", "run-local", str(path), "--pins", str(PINS), f"--timeout={value}"]) == 2
    assert "--timeout: " in capsys.readouterr().err


def test_a_line_without_end_is_logged_in_pieces(buildspec: Write, tmp_path: Path) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  build:\n    commands:\n"
        "      - head -c 200000 /dev/zero | tr '\\0' a; echo; echo done\n"
    )
    result, log = run(path, tmp_path)
    lines = log.splitlines()
    assert result.status == "SUCCEEDED" and "done" in lines
    pieces = [line for line in lines if line.startswith("a")]
    assert max(map(len, pieces)) <= 65536 and sum(map(len, pieces)) == 200000
