"""What epstack may replace or remove is proven its own by more than a name, and an output is never a
file the command reads (issue 19, classes 2 and 6).

render --out: another user's directory is refused even for root (the tests run as root: such a
directory is one chowned to OTHER_UID), and so is a directory whose marker does not list, by content,
everything it holds. smoke --run-dir: only files a smoke's marker lists are removed. guard, doctor,
sbom, cluster, build, publish: an output that is the pins file, the manifest or the report the
command reads (by its path, a symlink or a hard link) is refused before any work, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from epstack.commands.main import main
from epstack.errors import BAD_INPUT, OK, BadInput
from epstack.marker import MARKER
from epstack.output import check_output, replace_output
from epstack.smoke.__main__ import main as smoke_main
from tests.conftest import PINS

OTHER_UID = 65534  # nobody: a user that is not the one running the tests
SMOKE = ["elastic", "--gpus-per-node", "2", "--timeout", "20"]


def state(root: Path) -> list[tuple[str, int, int, bytes]]:
    """Every entry under root and root itself: path, owner, mode and content (links not followed)."""
    entries = [root, *sorted(root.rglob("*"))]
    return [
        (
            str(p.relative_to(root)),
            p.lstat().st_uid,
            p.lstat().st_mode,
            p.read_bytes() if p.is_file() and not p.is_symlink() else b"",
        )
        for p in entries
    ]


def others(root: Path, files: dict[str, str], mode: int = 0o755) -> Path:
    """A directory of OTHER_UID's holding `files`."""
    root.mkdir(mode=mode)
    root.chmod(mode)
    for name, text in files.items():
        (root / name).write_text(text)
    for path in (root, *root.rglob("*")):
        os.chown(path, OTHER_UID, OTHER_UID)
    return root


def render(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["render", "--pins", str(PINS), "--out-dir", str(out)])
    return code, capsys.readouterr().err


# render --out: ownership proven by the owner, the marker's content and what the directory holds.


@pytest.mark.parametrize(
    ("files", "mode"),
    [
        ({"epstack-render.json": "{}", "thesis.tex": "years of work"}, 0o755),
        ({"epstack-render.json": "{}"}, 0o755),
        ({}, 0o700),
    ],
    ids=["holding epstack-render.json", "only epstack-render.json", "empty 0700"],
)
def test_another_users_directory_is_refused_even_for_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], mode: int
) -> None:
    theirs = others(tmp_path / "theirs", files, mode)
    before = state(theirs)
    code, err = render(theirs, capsys)
    assert code == BAD_INPUT and f"belongs to uid {OTHER_UID}" in err and "fix:" in err
    assert len(err.strip().splitlines()) == 1
    assert state(theirs) == before, "nothing removed, nothing made root's"


@pytest.mark.parametrize(
    "marker",
    [
        "made by epstack; epstack may replace this directory\n",
        json.dumps({"schema": "epstack-output/1", "entries": {}}),
        json.dumps({"schema": "epstack-output/1", "entries": {"notes.txt": "sha256 " + "0" * 64}}),
        json.dumps({"schema": "epstack-output/0", "entries": {"notes.txt": "dir"}}),
        "{not json",
    ],
    ids=["earlier plain marker", "lists nothing", "another content", "another schema", "garbage"],
)
def test_a_marker_by_name_alone_proves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / MARKER).write_text(marker)
    (mine / "notes.txt").write_text("keep me")
    before = state(mine)
    code, err = render(mine, capsys)
    assert code == BAD_INPUT and "fix:" in err
    assert state(mine) == before


def _add_file(out: Path) -> None:
    (out / "notes.txt").write_text("mine")


def _change_file(out: Path) -> None:
    (out / "docker-bake.json").write_text("{}\n")


def _add_folder(out: Path) -> None:
    (out / "targets" / "mine").mkdir()


def _replace_by_link(out: Path) -> None:
    (out / "docker-bake.json").unlink()
    (out / "docker-bake.json").symlink_to("/etc/hostname")


@pytest.mark.parametrize("change", [_add_file, _change_file, _add_folder, _replace_by_link])
def test_what_was_added_or_changed_in_a_render_is_never_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Callable[[Path], None]
) -> None:
    out = tmp_path / "out"
    assert render(out, capsys)[0] == OK
    change(out)
    before = state(out)
    code, err = render(out, capsys)
    assert code == BAD_INPUT and "is not what epstack wrote there" in err and "fix:" in err
    assert state(out) == before


def test_a_render_replaces_its_own_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert render(out, capsys)[0] == OK
    (out / "epstack-render.json").unlink()  # removing what epstack wrote is fine
    assert render(out, capsys)[0] == OK
    assert (out / "epstack-render.json").is_file()


def test_staging_of_another_user_or_not_epstacks_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replace_output(out, {"a.txt": b"a"})
    theirs = tmp_path / ".out.epstack-staging-theirs"
    shutil.copytree(out, theirs)
    for path in (theirs, *theirs.rglob("*")):
        os.chown(path, OTHER_UID, OTHER_UID)
    mine = tmp_path / ".out.epstack-staging-mine"
    mine.mkdir()
    (mine / MARKER).write_text("made by epstack; epstack may replace this directory\n")
    (mine / "notes.txt").write_text("keep me")
    before = {path: state(path) for path in (theirs, mine)}
    replace_output(out, {"b.txt": b"b"})
    assert {path: state(path) for path in (theirs, mine)} == before
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b.txt"]


SEGMENT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="/\0"), min_size=1, max_size=10
).filter(lambda s: s not in (".", "..", MARKER) and len(s.encode()) < 200)
RELATIVE = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join)


@given(files=st.dictionaries(RELATIVE, st.binary(max_size=32), min_size=1, max_size=4), extra=RELATIVE)
def test_epstack_replaces_exactly_the_trees_it_wrote(
    files: dict[str, bytes], extra: str, tmp_path: Path
) -> None:
    """Any tree replace_output wrote may be replaced; the same tree with one entry more may not."""
    names = set(files)
    assume(not any(a != b and b.startswith(a + "/") for a in names for b in names))  # no file is a folder
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        out = Path(scratch) / "out"
        replace_output(out, files)
        assert check_output(str(out), checkout=tmp_path / "checkout", inputs=[]) == out
        target = out / extra
        assume(not target.exists() and not any(p.is_file() for p in target.parents if out in p.parents))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"the user's")
        with pytest.raises(BadInput, match="is not what epstack wrote there"):
            check_output(str(out), checkout=tmp_path / "checkout", inputs=[])


# smoke --run-dir: only files the smoke's own marker lists are removed.


@pytest.mark.parametrize("foreign", ["config.json", "rank0.log", "rank7.log", "upstream/rank0.log"])
def test_a_file_the_smoke_did_not_write_makes_it_refuse(
    stub_cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], foreign: str
) -> None:
    model = tmp_path / "model"
    (model / foreign).parent.mkdir(parents=True)
    (model / foreign).write_text('{"architectures": ["DeepseekV3ForCausalLM"]}')
    (model / "weights.safetensors").write_bytes(b"\0" * 16)
    before = state(model)
    assert smoke_main([*SMOKE, "--run-dir", str(model), "--json", str(tmp_path / "r.json")]) == BAD_INPUT
    err = capsys.readouterr().err
    assert f"holds {foreign}, which the smoke did not write" in err and "another --run-dir" in err
    assert state(model) == before and not (tmp_path / "r.json").exists()


def test_a_run_dir_of_the_smokes_own_is_reused(
    stub_cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, report = tmp_path / "run", tmp_path / "r.json"
    for _ in range(2):
        assert smoke_main([*SMOKE, "--run-dir", str(run_dir), "--json", str(report)]) == OK
    os.chown(run_dir / ".epstack-smoke", OTHER_UID, OTHER_UID)  # a marker, but not this user's
    before = state(run_dir)
    assert smoke_main([*SMOKE, "--run-dir", str(run_dir), "--json", str(report)]) == BAD_INPUT
    assert "not a list of a smoke's files written by this user" in capsys.readouterr().err
    assert state(run_dir) == before


def test_the_smokes_report_is_none_of_its_run_files(
    stub_cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    report = run_dir / "config.json"
    assert smoke_main([*SMOKE, "--run-dir", str(run_dir), "--json", str(report)]) == BAD_INPUT
    assert "which this command reads" in capsys.readouterr().err
    assert not run_dir.exists()


# Outputs are never a file the command reads.


def _same(pins: Path) -> Path:
    return pins


def _symlink(pins: Path) -> Path:
    link = pins.parent / "link.json"
    link.symlink_to(pins)
    return link


def _hard_link(pins: Path) -> Path:
    link = pins.parent / "hard.json"
    os.link(pins, link)
    return link


def _dotted(pins: Path) -> Path:
    (pins.parent / "sub").mkdir()
    return pins.parent / "sub" / ".." / "." / pins.name


SPELLINGS = [_same, _symlink, _hard_link, _dotted]
IMAGE = "registry.local:5000/epstack:sglang-test@sha256:" + "4f" * 32
CLUSTER_RENDER = "cluster render --job elastic-smoke --nodes 2 --gpus-per-node 8 --pins {pins}"
COMMANDS = {
    "guard --json": "guard --pins {pins} --json {out}",
    "doctor --json": "doctor --pins {pins} --json {out}",
    "image sbom --out": "image sbom --layer base --pins {pins} --out {out}",
    "cluster render --out": f"{CLUSTER_RENDER} --platform k8s --image {IMAGE} --out {{out}}",
    "cluster prepull --out": f"cluster prepull --platform slurm --image {IMAGE} --pins {{pins}} "
    "--out {out}",
    "build --report": "build --pins {pins} --out-dir {tmp}/render --report {out}",
}


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_an_output_that_is_the_pins_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, spelling: Callable[[Path], Path]
) -> None:
    pins = tmp_path / "pins.env"
    shutil.copy(PINS, pins)
    out = spelling(pins)
    values = {"pins": str(pins), "out": str(out), "tmp": str(tmp_path)}
    assert main([arg.format(**values) for arg in command.split()]) == BAD_INPUT
    err = capsys.readouterr().err
    assert "which this command reads; fix: write" in err and len(err.strip().splitlines()) == 1
    assert pins.read_bytes() == PINS.read_bytes()
    assert not (tmp_path / "render").exists(), "nothing done before the refusal"


def test_cluster_out_is_not_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "build-manifest.json"
    manifest.write_text("{}")
    command = f"{CLUSTER_RENDER} --platform slurm --manifest {manifest} --out {manifest}"
    assert main(command.format(pins=PINS).split()) == BAD_INPUT
    assert "which this command reads" in capsys.readouterr().err and manifest.read_text() == "{}"


@pytest.mark.parametrize("name", ["image.env", "guard-junit.xml", "build-manifest.json"])
def test_publish_writes_over_neither_its_report_nor_its_pins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    report = tmp_path / name
    report.write_text("the build report")
    argv = ["publish", "push", str(report), "--registry", "127.0.0.1:5000", "--out-dir", str(tmp_path)]
    assert main([*argv, "--pins", str(PINS)]) == BAD_INPUT
    assert "which this command reads" in capsys.readouterr().err and report.read_text() == "the build report"


def test_publish_pull_writes_not_over_its_pins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = tmp_path / "image.env"
    shutil.copy(PINS, pins)
    argv = [
        "publish",
        "pull",
        "--registry",
        "127.0.0.1:5000",
        "--pins",
        str(pins),
        "--out-dir",
        str(tmp_path),
    ]
    assert main(argv) == BAD_INPUT
    assert "which this command reads" in capsys.readouterr().err and pins.read_bytes() == PINS.read_bytes()


@given(inner_dots=st.integers(0, 3), dots=st.integers(0, 3), through_link=st.booleans())
def test_any_spelling_of_the_pins_file_is_refused_as_guard_json(
    inner_dots: int, dots: int, through_link: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        root = Path(scratch)
        pins = root / "a" / "pins.env"
        pins.parent.mkdir()
        shutil.copy(PINS, pins)
        (root / "b" / "c" / "d").mkdir(parents=True)
        if through_link:
            (root / "link").symlink_to(root / "a")
        segments = [
            *(["..", *["."] * dots] * 3),
            "link" if through_link else "a",
            *["."] * inner_dots,
            "pins.env",
        ]
        spelled = "/".join([str(root / "b" / "c" / "d"), *segments])
        assert main(["guard", "--pins", str(pins), "--json", spelled]) == BAD_INPUT
        assert "which this command reads" in capsys.readouterr().err
        assert pins.read_bytes() == PINS.read_bytes()
