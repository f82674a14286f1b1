"""User text that lands in what epstack generates, runs, publishes or prints (issue 19, classes 3, 6
and 8): a newline or an option in a flag never becomes a command, a credential in a pin is refused
without being repeated, and console output prints user text as it is (no markup, no emoji codes)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from epstack.aws.checkout import revision
from epstack.cluster.image import parse_image
from epstack.cluster.slurm import squashfs_path
from epstack.commands.main import main
from epstack.errors import EXIT_CODES, BadInput
from epstack.guard.deepep import check_jit_prerequisites
from epstack.pins.load import load_pins, read_layer_pins
from tests.conftest import PINS, pins_variant

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack:sglang-0.5.23-test@sha256:" + "4f" * 32
PULL = ["cluster", "prepull", "--pins", str(PINS), "--platform", "slurm", "--image", IMAGE]
SERVE = ["cluster", "render", "--pins", str(PINS), "--job", "serve", "--nodes", "2", "--gpus-per-node", "8",
         "--fabric", "ib", "--image", IMAGE]  # fmt: skip

# One line of printable text: what a flag that lands in a generated script may hold.
PRINTABLE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Zl", "Zp", "Cs")), min_size=1
).filter(str.strip)
# What ends a line or a comment in a script, or hides in one.
LINE_BREAKERS = st.sampled_from(["\n", "\r", "\x1b", "\x00", "\x85", "\u2028", "\u2029", "\u202e", "\t"])


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """main(argv): an exit code from the one table, no traceback; its stdout and stderr."""
    code = main(argv)
    err = "".join(capsys.readouterr())  # results (stdout), then logs and errors
    assert code in EXIT_CODES, (argv, code, err)
    assert "Traceback" not in err, err
    return code, err


def fake_tool(folder: Path, name: str, log: Path) -> None:
    """An executable `name` in folder that appends its arguments, NUL-separated, to log."""
    tool = folder / name
    tool.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" >> {shlex.quote(str(log))}\nprintf "\\n" >> {log}\n')
    tool.chmod(0o755)


def calls(log: Path) -> list[list[str]]:
    """Each call's arguments, as fake_tool logged them."""
    return [call.split("\0") for call in log.read_text().split("\0\n") if call] if log.exists() else []


# ---- class 3: generated scripts and manifests ------------------------------------------------


@given(directory=PRINTABLE)
@example(directory="/x ; touch /tmp/epstack-pwned")
@example(directory="-rf")
@example(directory="$(touch pwned) `id` '\"")
def test_any_squashfs_dir_reaches_the_pull_script_as_one_word(
    directory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run the generated pull script with srun faked: mkdir and the import get exactly the directory."""
    with tempfile.TemporaryDirectory() as work:
        out, log, bin_dir = Path(work) / "pull.sbatch", Path(work) / "srun.log", Path(work)
        code, _ = run([*PULL, f"--squashfs-dir={directory}", "--out", str(out)], capsys)
        assert code == 0
        fake_tool(bin_dir, "srun", log)
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        subprocess.run(["bash", str(out)], check=True, env=env, cwd=work, timeout=30)
        target = squashfs_path(directory, parse_image(IMAGE))
        mkdir, importing = calls(log)
        assert mkdir == ["--ntasks-per-node=1", "mkdir", "-p", "--", directory]
        assert importing[-2:] == [target, f"docker://{IMAGE}"]


@given(before=PRINTABLE, breaker=LINE_BREAKERS, after=st.sampled_from(["", "touch /tmp/pwned", "x"]))
@example(before="/tmp/x", breaker="\n", after="touch /tmp/pwned")
def test_a_line_break_in_a_squashfs_dir_is_refused_at_the_flag(
    before: str, breaker: str, after: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "pull.sbatch"
        code, err = run([*PULL, f"--squashfs-dir={before}{breaker}{after}", "--out", str(out)], capsys)
        assert code == 2 and "--squashfs-dir" in err and "fix:" in err
        assert not out.exists()


TEXT_FLAGS = {
    "--arch": [*SERVE, "--platform", "k8s"],
    "--image": [*SERVE[:-2], "--platform", "k8s"],
    "--squashfs-dir": [*SERVE, "--platform", "slurm"],
    "--model-path": [*SERVE, "--platform", "slurm"],
    "--name": [*SERVE, "--platform", "slurm"],
    "--rdma-resource": [*SERVE, "--platform", "k8s"],
    "--shm-size": [*SERVE, "--platform", "k8s"],
    "--memory": [*SERVE, "--platform", "k8s"],
    "--node-selector": [*PULL[:5], "k8s", *PULL[6:]],
}


@given(flag=st.sampled_from(sorted(TEXT_FLAGS)), breaker=LINE_BREAKERS)
def test_every_cluster_text_flag_refuses_line_breaks_and_controls(
    flag: str, breaker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    value = f"a=b{breaker}rm -rf ~"
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "out"
        code, err = run([*TEXT_FLAGS[flag], f"{flag}={value}", "--out", str(out)], capsys)
        assert code == 2 and f"{flag}: " in err and "fix: one line of printable text" in err
        assert not out.exists()


def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet passes for one of args: $$ is $, $(VAR) the variable when it is set."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


@given(model=PRINTABLE)
@example(model="/models/$(HOME)")
@example(model="/models/$$x")
def test_any_model_path_reaches_sglang_as_written_on_kubernetes(
    model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "serve.yaml"
        argv = [*SERVE, "--platform", "k8s", "--k8s-kind", "lws", f"--model-path={model}", "--out", str(out)]
        code, _ = run(argv, capsys)
        assert code == 0
        lws = next(doc for doc in yaml.safe_load_all(out.read_text()) if doc["kind"] == "LeaderWorkerSet")
        args = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
        env = {"HOME": "/root", "x": "y", "LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "leader"}
        expanded = [kubernetes_expand(arg, env) for arg in args]
        assert expanded[expanded.index("--model-path") + 1] == model
        assert expanded[expanded.index("--node-rank") + 1] == "1"
        assert expanded[expanded.index("--dist-init-addr") + 1] == "leader:5000"


@given(model=PRINTABLE)
@example(model="/models/@RANK@")
@example(model="/models/$SLURM_NODEID '\"")
def test_any_model_path_reaches_sglang_as_written_on_slurm(
    model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task's `bash -c` script run with sglang faked: the model path as given, the rank expanded."""
    with tempfile.TemporaryDirectory() as work:
        out, log = Path(work) / "serve.sbatch", Path(work) / "sglang.log"
        code, _ = run([*SERVE, "--platform", "slurm", f"--model-path={model}", "--out", str(out)], capsys)
        assert code == 0
        lines = out.read_text().replace("\\\n", " ").splitlines()
        (srun,) = [line for line in lines if line.startswith("srun ") and " bash -c " in line]
        words = shlex.split(srun)  # the server step's line alone: comments elsewhere hold any text
        script = words[words.index("-c") + 1]
        fake_tool(Path(work), "sglang", log)
        env = {"PATH": f"{work}:/usr/bin:/bin", "SLURM_NODEID": "1", "MASTER_ADDR": "node0"}
        subprocess.run(["bash", "-c", script], check=True, env=env, timeout=30)
        (argv,) = calls(log)
        assert argv[argv.index("--model-path") + 1] == model
        assert argv[argv.index("--node-rank") + 1] == "1"
        assert argv[argv.index("--dist-init-addr") + 1] == "node0:5000"


def git_checkout(folder: Path) -> str:
    """A one-commit checkout; its commit."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    subprocess.run(["git", "init", "--quiet", str(folder)], check=True)
    (folder / "pins.env").write_text(PINS.read_text())
    subprocess.run(["git", "-C", str(folder), "add", "pins.env"], check=True)
    subprocess.run(["git", "-C", str(folder), "commit", "--quiet", "-m", "pins"], check=True, env=env)
    head = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    return head.stdout.strip()


@pytest.mark.parametrize("option", ["--output={file}", "--output={file}:x"])
def test_a_source_version_is_never_an_option_of_git(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "checkout"
    git_checkout(checkout)
    written = tmp_path / "written"
    version = option.format(file=written)
    monkeypatch.chdir(checkout)
    argv = ["codebuild", "start", "--project", "p", "--pins", "pins.env", f"--source-version={version}"]
    code, err = run(argv, capsys)
    assert code == 2 and "--source-version" in err and "fix:" in err
    assert list(tmp_path.iterdir()) == [checkout]


def test_a_source_version_becomes_the_full_commit_it_names(tmp_path: Path) -> None:
    commit = git_checkout(tmp_path)
    assert revision(tmp_path, None) == commit
    assert revision(tmp_path, commit[:10]) == commit
    assert revision(tmp_path, "HEAD") == commit
    with pytest.raises(BadInput, match="not a commit"):
        revision(tmp_path, "no-such-branch")


# ---- class 6: credentials in pins ------------------------------------------------------------

SECRET = st.from_regex(r"[a-z0-9]{12,40}", fullmatch=True)
TOKENS = st.one_of(
    st.from_regex(r"gh[pousr]_[A-Za-z0-9]{36}", fullmatch=True),
    st.from_regex(r"github_pat_[A-Za-z0-9_]{82}", fullmatch=True),
    st.from_regex(r"glpat-[A-Za-z0-9_-]{20}", fullmatch=True),
    st.from_regex(r"(AKIA|ASIA)[A-Z0-9]{16}", fullmatch=True),
    st.from_regex(r"xox[bpas]-[0-9]{10}-[A-Za-z0-9]{24}", fullmatch=True),
)
USERINFO = st.one_of(
    st.builds(lambda user, secret: f"{user}:{secret}", SECRET, SECRET),
    st.builds(lambda token: f"x-access-token:{token}", TOKENS),
    TOKENS,
    SECRET,
)
PIN_KEYS = [line.split("=", 1)[0] for line in PINS.read_text().splitlines() if "=" in line and line[0] != "#"]


def secret_of(value: str) -> str:
    """The part of a credential that must never be printed."""
    return value.rsplit(":", 1)[-1]


@given(userinfo=USERINFO)
@example(userinfo="x-access-token:ghp_0123456789abcdefghijABCDEFGHIJ012345")
def test_a_credential_in_deepep_repo_is_refused_without_repeating_it(
    userinfo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as work:
        pins = pins_variant(Path(work), DEEPEP_REPO=f"https://{userinfo}@github.com/deepseek-ai/DeepEP.git")
        code, err = run(["pins", "check", "--pins", str(pins)], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "DEEPEP_REPO holds" in line and "credential helper" in line and "BuildKit secret" in line
    assert secret_of(userinfo) not in err


@given(key=st.sampled_from(PIN_KEYS), token=TOKENS, quoted=st.booleans())
def test_a_token_in_any_pin_value_is_refused_without_repeating_it(
    key: str, token: str, quoted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    value = f'"{token}"' if quoted else token
    with tempfile.TemporaryDirectory() as work:
        pins = pins_variant(Path(work), **{key: value})
        with pytest.raises(BadInput) as caught:
            load_pins(pins)
    assert f"{key} holds" in str(caught.value) and token not in str(caught.value)


@given(token=TOKENS, secret=SECRET)
def test_a_token_in_a_layer_pins_file_is_refused_without_repeating_it(token: str, secret: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        layer = Path(work) / "deepep.pins.env"
        layer.write_text(
            f"DEEPEP_REPO=https://github.com/{token}/DeepEP.git\nDEEPEP_PATCHES_EFA=Bearer {secret}\n"
        )
        with pytest.raises(BadInput) as caught:
            read_layer_pins(layer)
    message = str(caught.value)
    assert "DEEPEP_REPO holds" in message and "DEEPEP_PATCHES_EFA holds a bearer token" in message
    assert token not in message and secret not in message


def test_the_shipped_pins_hold_no_credential() -> None:
    load_pins(PINS)


# ---- class 8: console output prints user text as it is ---------------------------------------

MARKUP = st.lists(
    st.sampled_from(
        [":fire:", ":thumbs_up:", "[/x]", "[bold]", "[/]", "[link=file:///etc]", "\\[", "x", " ", "]"]
    ),
    min_size=1,
    max_size=5,
).map("".join)


@given(name=MARKUP)
@example(name="[/x].yaml")
@example(name=":fire:.yaml")
def test_any_out_path_is_printed_as_it_is(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / name
        code, err = run([*SERVE, "--platform", "k8s", "--out", str(out)], capsys)
        assert code == 0 and out.is_file()
    assert f"wrote {out}: serve" in err


@given(name=MARKUP)
@example(name=":fire:.env")
def test_a_path_in_an_error_is_printed_as_it_is(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = Path(tempfile.gettempdir()) / "epstack-absent" / name
    code, err = run(["pins", "check", "--pins", str(missing)], capsys)
    assert code == 2 and str(missing) in err


@given(
    cache=st.one_of(
        st.builds(lambda n: "/" + "a" * n, st.integers(250, 400)),
        st.builds(
            lambda n, m: f"{tempfile.gettempdir()}/{'b' * n}/{'c' * m}",
            st.integers(1, 255),
            st.integers(200, 600),
        ),
        st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), max_size=300),
    )
)
@example(cache="/" + "a" * 300)
def test_any_jit_cache_dir_is_a_guard_row(cache: str) -> None:
    row = check_jit_prerequisites({"EP_JIT_CACHE_DIR": cache, "PATH": ""}, None)[-1]
    assert row.component == "EP_JIT_CACHE_DIR" and row.verdict in ("ok", "mismatch")
    if any(len(os.fsencode(name)) > 255 for name in Path(cache).parts):
        assert row.verdict == "mismatch" and "bytes, over the" in row.detail


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
CYCLONEDX = st.fixed_dictionaries(
    {"bomFormat": st.just("CycloneDX"), "specVersion": st.just("1.6")},
    optional={
        "components": st.lists(st.dictionaries(st.sampled_from(["name", "type", "version", "x"]), JSON))
    },
)
GARBAGE = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["[" * 5000, "{" * 3000 + "}" * 3000, '{"a": ' + "9" * 5000 + "}", '{"a\x00": 1}']),
)


@given(document=st.one_of(JSON.map(json.dumps), CYCLONEDX.map(json.dumps), GARBAGE))
@example(document="{}")
@example(document="garbage")
def test_sbom_validate_says_what_is_wrong_in_one_line_each(
    document: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "sbom.cdx.json"
        path.write_text(document)
        code, err = run(["image", "sbom", "--validate", str(path)], capsys)
    lines = err.strip().splitlines()
    assert code in (0, 1, 2) and lines
    assert all(line.startswith((f"{path}: ", f"error: {path}: ")) for line in lines), err
    assert all(len(line) < 600 for line in lines) and "Failed validating" not in err
    if code == 2:
        assert len(lines) == 1 and "fix:" in lines[0]


def test_sbom_validate_of_an_empty_object_names_the_missing_keys(capsys: pytest.CaptureFixture[str]) -> None:
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "empty.cdx.json"
        path.write_text("{}")
        code, err = run(["image", "sbom", "--validate", str(path)], capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        f"{path}: $: 'bomFormat' is a required property",
        f"{path}: $: 'specVersion' is a required property",
    ]
