"""Every JSON file a command reads goes through epstack.inputs.parse_json (issue 46): nested 100,000
deep, an Infinity or a 5000-digit number is one line naming the file, exit 2, never a RecursionError
or ValueError traceback."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BAD_INPUT
from tests.conftest import PINS

DEEP = "[" * 100_000 + "]" * 100_000
INFINITE = '{"schema": "guard-report/1", "ok": true, "checks": [], "x": Infinity}'
LONG = '{"schema": "build-manifest/1", "n": ' + "1" * 5000 + "}"


def jit_export(folder: Path, manifest: str) -> tuple[Path, str]:
    """A tar.gz holding only manifest.json, and its sha256."""
    data = manifest.encode()
    member = tarfile.TarInfo("manifest.json")
    member.size = len(data)
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        tar.addfile(member, io.BytesIO(data))
    path = folder / "export.tar.gz"
    path.write_bytes(packed.getvalue())
    return path, hashlib.sha256(packed.getvalue()).hexdigest()


def argv(case: str, document: Path, tmp_path: Path) -> list[str]:
    render = ["cluster", "render", "--pins", str(PINS), "--platform", "k8s", "--job", "elastic-smoke",
              "--nodes", "1", "--gpus-per-node", "8"]  # fmt: skip
    pins = tmp_path / "pins.env"
    pins.write_text(PINS.read_text())
    return {
        "cluster render --manifest": [*render, "--manifest", str(document)],
        "cluster metrics --report": ["cluster", "metrics", "--pins", str(PINS), "--report", str(document)],
        "pins bump --build-report": ["pins", "bump", "--pins", str(pins), "--locks", str(tmp_path / "locks"),
                                     "SGLANG_VERSION=0.5.24", "--build-report", str(document)],
    }[case]  # fmt: skip


CASES = ["cluster render --manifest", "cluster metrics --report", "pins bump --build-report"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (DEEP, "JSON nested deeper than 64"),
        (INFINITE, "JSON with Infinity"),
        (LONG, "JSON with a number of 5,000 characters"),
    ],
)
def test_a_json_input_out_of_bounds_is_one_line_exit_2(
    case: str, text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "input.json"
    document.write_text(text)
    assert main(argv(case, document, tmp_path)) == BAD_INPUT
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {document}: {problem}"), line
    assert "fix: " in line


@pytest.mark.parametrize(
    ("text", "problem"), [(DEEP, "JSON nested deeper than 64"), (INFINITE, "JSON with Infinity")]
)
def test_a_jit_export_manifest_out_of_bounds_is_one_line_exit_2(
    text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, digest = jit_export(tmp_path, text)
    code = main(
        ["image", "jit-unpack", str(archive), "--sha256", digest, "--into", str(tmp_path / "kernels")]
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == BAD_INPUT and line.startswith(f"error: {archive}:manifest.json: {problem}"), line
    assert not (tmp_path / "kernels").exists()
