"""Hostile and careless input, generated (Hypothesis) and named: pins files, paths, flag values,
environment variables, special files and signals. For every input: an exit code from the one table,
no traceback, and nothing changed outside the output directory.

The commands run in-process (main(argv)) inside a sandbox: a copy of the checkout's inputs that
render refuses to write over, as the current directory, so no generated path can reach the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from epstack.commands import pins as pinscli
from epstack.commands.main import main
from epstack.errors import EXIT_CODES
from tests.conftest import PINS, REPO, copy_checkout, tree_digest

PIN_LINES = [line for line in PINS.read_text().splitlines() if "=" in line and not line.startswith("#")]
KEYS = [line.split("=", 1)[0] for line in PIN_LINES]


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the checkout's inputs as the current directory (tests.conftest.copy_checkout)."""
    root = copy_checkout(tmp_path / "checkout", monkeypatch)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764374400")
    monkeypatch.delenv("EPSTACK_PINS", raising=False)
    monkeypatch.chdir(root)
    yield root


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """main(argv), with the table and no-traceback checks every input must pass."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code in EXIT_CODES, (argv, code, err)
    assert "Traceback" not in err, err
    return code, err


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root (files by content digest), to show what a command changed."""
    return {
        str(p.relative_to(root)): tree_digest(p) if p.is_dir() else p.read_bytes().hex()[:64]
        for p in sorted(root.rglob("*"))
        if not p.is_dir() or not any(p.iterdir())
    }


def changed_outside(before: dict[str, str], after: dict[str, str], out: Path, root: Path) -> list[str]:
    """Paths under root that changed and are neither the output directory, inside it, nor above it."""
    inside = Path(os.path.abspath(out))
    changed = [path for path in set(before) | set(after) if before.get(path) != after.get(path)]
    return [
        path
        for path in changed
        if not Path(os.path.abspath(root / path)).is_relative_to(inside)
        and not inside.is_relative_to(os.path.abspath(root / path))
    ]


# ---- generated: pins files -------------------------------------------------------------------

HOSTILE_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    max_size=40,
)
MUTATIONS = st.sampled_from(
    ["export {line}", "{key}='{value}'", '{key}="{value}"', "{key}=>={value}", "{key}=$({value})",
     "{key}={value} # ok", "{key}=", "{key}", "{key}={value}\\", "{lower}={value}", "{key}_VER={value}",
     "{key}=v{value}", "{key}={value}.0", "{key}={value},{value}", "{key}=[/x]{value}", "{key}={text}",
     "{text}={value}", "{text}", "", "# {text}", "{key}={value}\n{key}={value}"]
)  # fmt: skip


@st.composite
def pins_files(draw: st.DrawFn) -> str:
    """pins.env with some lines dropped and some mutated the ways people break them."""
    lines = []
    for line in PIN_LINES:
        if draw(st.integers(0, 9)) == 0:
            continue  # a missing key
        if draw(st.integers(0, 4)) == 0:
            key, value = line.split("=", 1)
            text = draw(HOSTILE_TEXT)
            lines.append(
                draw(MUTATIONS).format(line=line, key=key, value=value, lower=key.lower(), text=text)
            )
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@given(text=pins_files())
def test_any_pins_file_is_ok_or_bad_input(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostile.env"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, err = run(["pins", "check", "--pins", str(path)], capsys)
    assert code in (0, 2)
    if code == 2:
        assert all(line.startswith("error: ") and "fix:" in line for line in err.splitlines() if line.strip())


@given(key=st.sampled_from(KEYS), value=HOSTILE_TEXT)
def test_any_value_of_any_key(
    key: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "value.env"
    lines = [
        f"{key}={value}" if line.startswith(f"{key}=") else line for line in PINS.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    code, _ = run(["pins", "check", "--pins", str(path)], capsys)
    assert code in (0, 2)


@given(data=st.binary(max_size=200))
def test_any_bytes_as_a_pins_file(data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bytes.env"
    path.write_bytes(data)
    assert run(["pins", "check", "--pins", str(path)], capsys)[0] == 2


# ---- generated: output paths -----------------------------------------------------------------

COMPONENT = st.text(alphabet=st.characters(exclude_characters="/\0", codec="utf-8"), min_size=1, max_size=12)
SPECIAL_OUTS = ["", ".", "..", "/", "/dev/null", "/proc", "images", "images/base", "pins.env", "epstack",
                "scripts/image/x", " ", "[/x]", "new/[red]out[/]", "~", "-", "--", "build/render", "x" * 300,
                "a/" + "b" * 300 + "/c"]  # fmt: skip


@given(
    out=st.one_of(
        st.sampled_from(SPECIAL_OUTS),
        st.lists(COMPONENT, min_size=1, max_size=3).map("/".join),
        st.builds(lambda up, rest: "../" * up + rest, st.integers(0, 1), COMPONENT),
    )
)
def test_any_render_out(out: str, sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sandbox.parent
    before = snapshot(root)
    code, _ = run(["render", "--pins", "pins.env", f"--out={out}"], capsys)
    assert code in (0, 2)
    assert changed_outside(before, snapshot(root), Path(out), root) == []
    if code == 0:
        shutil.rmtree(out)


# ---- generated: flag values and environment variables ----------------------------------------

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["nan", "inf", "-inf", "0", "-0", "1e309", "0x10", "1_000", " 3", "٣", ""]),
    HOSTILE_TEXT,
)


@given(nodes=NUMBERS, gpus=NUMBERS)
def test_any_cluster_counts(nodes: str, gpus: str, capsys: pytest.CaptureFixture[str]) -> None:
    image = "registry.example/epstack:t@sha256:" + "0" * 64
    argv = ["cluster", "render", "--pins", str(PINS), "--platform", "slurm", "--job", "elastic-smoke",
            f"--nodes={nodes}", f"--gpus-per-node={gpus}", "--fabric", "ib", "--image", image]  # fmt: skip
    code, _ = run(argv, capsys)
    assert code in (0, 2)


@given(timeout=NUMBERS, nproc=NUMBERS, port=NUMBERS)
def test_any_smoke_numbers_are_checked_before_work(
    timeout: str, nproc: str, port: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No preflight and no rank may start: a sound set of numbers ends at the (stubbed) preflight."""
    from epstack.smoke import preflight  # noqa: PLC0415 (the module is patched per example)

    monkeypatch.setattr(preflight, "PROBE", (sys.executable, "-c", 'print(\'{"python": "stub"}\')'))
    argv = ["smoke", "elastic", f"--timeout={timeout}", f"--gpus-per-node={nproc}", f"--master-port={port}"]
    code, _ = run(argv, capsys)
    assert code in (2, 3)  # 3: the stub preflight (no torch); nothing else can start


@given(epoch=st.one_of(NUMBERS, st.integers(-(2**63), 2**64).map(str)))
def test_any_source_date_epoch(
    epoch: str, sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assume("\0" not in epoch)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
    code, _ = run(["render", "--pins", "pins.env", "--out-dir", "out"], capsys)
    assert code in (0, 2)
    shutil.rmtree("out", ignore_errors=True)


# ---- named cases -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    argv: list[str]
    code: int
    env: dict[str, str] = field(default_factory=dict)
    says: str = ""


def special_files(root: Path) -> dict[str, str]:
    """FIFO, a sparse 2 GiB file, non-UTF-8 bytes, a directory, a file of markup."""
    fifo = root / "fifo"
    os.mkfifo(fifo)
    huge = root / "huge.env"
    with huge.open("wb") as file:
        file.truncate(2 << 30)
    (root / "latin1.env").write_bytes("NCCL_VERSION=2.30.7 # caf\xe9\n".encode("latin-1"))
    (root / "dir.env").mkdir()
    (root / "markup.env").write_text(
        PINS.read_text().replace("SGLANG_VERSION=0.5.23", "SGLANG_VERSION=[/x]0.5.23[bold]")
    )
    return {
        "fifo": str(fifo),
        "huge": str(huge),
        "latin1": str(root / "latin1.env"),
        "dir": str(root / "dir.env"),
        "markup": str(root / "markup.env"),
    }


CLUSTER = ["cluster", "render", "--platform", "k8s", "--job", "serve"]
SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "MASTER_ADDR": "h"}
NAMED = [
    Case(
        name="EPSTACK_PINS is a FIFO",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": "{fifo}"},
        code=2,
        says="a FIFO",
    ),
    Case(
        name="EPSTACK_PINS is /dev/zero",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": "/dev/zero"},
        code=2,
        says="a device",
    ),
    Case(
        name="EPSTACK_PINS is 2 GiB",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": "{huge}"},
        code=2,
        says="too large",
    ),
    Case(
        name="EPSTACK_PINS is a directory",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": "{dir}"},
        code=2,
        says="a directory",
    ),
    Case(
        name="EPSTACK_PINS is not UTF-8",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": "{latin1}"},
        code=2,
        says="not UTF-8",
    ),
    Case(
        name="EPSTACK_PINS is empty",
        argv=["pins", "check"],
        env={"EPSTACK_PINS": ""},
        code=2,
        says="set but empty",
    ),
    Case(name="guard reads a FIFO", argv=["guard", "--pins", "{fifo}"], code=2, says="a FIFO"),
    Case(name="doctor reads /dev/zero", argv=["doctor", "--pins", "/dev/zero"], code=2, says="a device"),
    Case(
        name="markup in a pin value",
        argv=["pins", "check", "--pins", "{markup}"],
        code=2,
        says="[/x]0.5.23[bold]",
    ),
    Case(
        name="markup in a path",
        argv=["pins", "check", "--pins", "[/x]/[red]p[/red]"],
        code=2,
        says="[/x]/[red]p[/red]",
    ),
    Case(
        name="--json is a directory",
        argv=["guard", "--pins", str(PINS), "--json", "{dir}"],
        code=2,
        says="is a directory",
    ),
    Case(
        name="--json under a file", argv=["doctor", "--pins", str(PINS), "--json", "/dev/null/x.json"], code=2
    ),
    Case(
        name="build --report is a directory",
        argv=["build", "--pins", str(PINS), "--out-dir", "out", "--report", "{dir}"],
        code=2,
        says="is a directory",
    ),
    Case(
        name="run-local --out is /",
        argv=["codebuild", "run-local", str(REPO / "buildspecs" / "build.yml"), "--out-dir", "/"],
        code=2,
        says="the checkout or a directory above it",
    ),
    Case(
        name="--out-dir is /dev/null",
        argv=["render", "--out-dir", "/dev/null"],
        code=2,
        says="not a directory",
    ),
    Case(name="--out-dir is empty", argv=["render", "--out-dir", ""], code=2, says="--out-dir is empty"),
    Case(
        name="SOURCE_DATE_EPOCH garbage",
        argv=["render", "--out-dir", "out"],
        env={"SOURCE_DATE_EPOCH": "1e9"},
        code=2,
        says="SOURCE_DATE_EPOCH",
    ),
    Case(
        name="SOURCE_DATE_EPOCH past year 9999",
        argv=["render", "--out-dir", "out"],
        env={"SOURCE_DATE_EPOCH": "99999999999999"},
        code=2,
    ),
    Case(name="a NUL in a path", argv=["pins", "check", "--pins", "a\0b"], code=2),
    Case(name="an unknown command", argv=["pins", "chekc"], code=2),
    Case(name="no command", argv=[], code=2),
    Case(name="--help", argv=["--help"], code=0),
    Case(name="--version", argv=["--version"], code=0),
    Case(name="smoke timeout NaN", argv=["smoke", "elastic", "--timeout", "nan"], code=2),
    Case(name="cluster nodes 0", argv=[*CLUSTER, "--nodes", "0", "--gpus-per-node", "8"], code=2),
    Case(
        name="MASTER_PORT out of range",
        argv=["smoke", "elastic"],
        env=SLURM | {"MASTER_PORT": "99999"},
        code=2,
    ),
    Case(
        name="RANK not a number",
        argv=["smoke", "elastic"],
        env={"RANK": "zero", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        code=2,
    ),
    Case(name="nccl check nothing", argv=["image", "nccl-check", "--pins", str(PINS)], code=2),
]


@pytest.mark.parametrize("case", NAMED, ids=[case.name for case in NAMED])
def test_named_case(
    case: Case, sandbox: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = special_files(sandbox.parent)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.format(**files))
    before = snapshot(sandbox)
    code, err = run(
        [arg.format(**files) if "{" in arg and "}" in arg and "[" not in arg else arg for arg in case.argv],
        capsys,
    )
    assert code == case.code, err
    assert case.says in err
    assert snapshot(sandbox) == before


def test_ctrl_c_is_130_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pinscli, "load_pins", interrupted)
    code, err = run(["pins", "check", "--pins", str(PINS)], capsys)
    assert code == 130 and err.strip().startswith("interrupted:") and len(err.strip().splitlines()) == 1


SIGTERM_MID_COMMAND = """
import os, signal, sys, time
import epstack.commands.pins as pinscli
pinscli.load_pins = lambda path: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30))
from epstack.commands.main import main
sys.exit(main(["pins", "check"]))
"""


def test_sigterm_is_130_as_a_real_process() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SIGTERM_MID_COMMAND], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 130 and "interrupted:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["pins", "check", "--pins", "/dev/zero"], 2),
        (["render", "--out-dir", "/"], 2),
        (["smoke", "elastic", "--iters", "0"], 2),
        (["guard", "--layer", "nope"], 2),
        (["pins", "check", "--pins", str(PINS)], 0),
    ],
)
def test_as_subprocesses(argv: list[str], code: int, tmp_path: Path) -> None:
    """The installed entry points, as a shell runs them: python -m epstack and python -m epstack.smoke."""
    module = ["-m", "epstack.smoke", *argv[1:]] if argv[0] == "smoke" else ["-m", "epstack", *argv]
    result = subprocess.run(
        [sys.executable, *module], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
