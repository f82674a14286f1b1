"""`epstack image jit-unpack` end to end, in-process: a verified export made for this install goes into a new
folder; a wrong digest, an export made for another install or arch, or a folder that exists is one
line, exit 2, and nothing written."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BAD_INPUT, OK
from epstack.jit.deepep import KIND, TOOL, CacheKey
from epstack.jit.shipped import manifest_beside
from tests.jit.test_deepep import KERNEL, export_of, fake_install, h200_kernels, sha256


def write_export(folder: Path, key: CacheKey) -> tuple[Path, str]:
    data, _ = export_of(h200_kernels(), key)
    path = folder / "deep_ep-kernels.tar.gz"
    path.write_bytes(data)
    return path, sha256(data)


@pytest.fixture
def image_archs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The image's layer pins file ($EPSTACK_PINS), for an H100/H200 image."""
    pins = tmp_path / "sglang.pins.env"
    pins.write_text("TORCH_CUDA_ARCH_LIST=9.0a\n")
    monkeypatch.setenv("EPSTACK_PINS", str(pins))
    return pins


def unpack(export: Path, sha: str, into: Path) -> int:
    return main(["image", "jit-unpack", str(export), "--sha256", sha, "--into", str(into)])


def refused(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refusal prints."""
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "; fix: " in line
    return line


@pytest.fixture
def install_here(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], CacheKey]:
    """Makes this Python an install whose nvcc is of the release given; the key of an export made here."""
    return lambda nvcc: fake_install(site, tmp_path, monkeypatch, nvcc=nvcc)


def test_an_export_made_for_this_install_unpacks_into_a_new_folder(
    install_here: Callable[[str], CacheKey],
    tmp_path: Path,
    image_archs: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    export, sha = write_export(tmp_path, install_here("13.0"))
    into = tmp_path / "jit" / TOOL
    assert unpack(export, sha, into) == OK
    assert {p: (into / p).read_bytes() for p in h200_kernels()} == h200_kernels()
    assert len([p for p in into.rglob("*") if p.is_file()]) == 26
    assert KIND.schema.read(manifest_beside(into)).key.sm_count == 132
    assert "jit unpack: 13 DeepEP kernels" in capsys.readouterr().err


@pytest.mark.parametrize("made_for", ["another digest", "another nvcc", "another arch", "an existing folder"])
def test_a_refused_export_writes_nothing(
    install_here: Callable[[str], CacheKey],
    tmp_path: Path,
    image_archs: Path,
    capsys: pytest.CaptureFixture[str],
    made_for: str,
) -> None:
    export, sha = write_export(tmp_path, install_here("12.9" if made_for == "another nvcc" else "13.0"))
    if made_for == "another arch":
        image_archs.write_text("TORCH_CUDA_ARCH_LIST=10.0a 12.0\n")  # a Blackwell image
    into = tmp_path / "jit" / TOOL
    if made_for == "an existing folder":
        into.mkdir(parents=True)
    asked = "0" * 64 if made_for == "another digest" else sha
    assert unpack(export, asked, into) == BAD_INPUT
    another_install = f"error: {export}: its kernels were made for another install"
    words = {
        "another digest": f"error: {export}: sha256 {sha}, not the {asked} asked for",
        "another nvcc": f"{another_install} (nvcc 13.0 != 12.9)",
        "another arch": f"{another_install} (arch 9.0 not in 10.0a 12.0)",
        "an existing folder": f"error: {into}: already holds kernels",
    }[made_for]
    assert refused(capsys).startswith(words)
    assert not manifest_beside(into).exists()
    if made_for == "an existing folder":
        assert list(into.iterdir()) == []
    else:
        assert not into.exists()


@pytest.mark.parametrize("digest", ["abc", "A" * 64, "0" * 63, "0" * 65, "g" * 64])
def test_a_sha256_that_is_not_64_lowercase_hex_is_refused_by_the_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], digest: str
) -> None:
    into = tmp_path / TOOL
    assert unpack(tmp_path / "absent.tar.gz", digest, into) == BAD_INPUT
    assert f"{digest!r} is not a sha256 (64 lowercase hex)" in capsys.readouterr().err
    assert not into.exists()


# Peak memory of `jit unpack` in a fresh Python, past what it held once epstack was imported (KiB).
_PEAK = """import resource, sys
from epstack.commands.main import main
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start)
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (tarfile.REGTYPE, f"'{TOOL}/{KERNEL}' unpacks to 209,715,200 bytes, over the 16,777,216"),
        (tarfile.XHDTYPE, "a tar header of over 16,777,216 bytes"),
    ],
    ids=["a member", "a pax header"],
)
def test_a_gzip_bomb_is_refused_in_one_line_before_it_is_read(
    tmp_path: Path, kind: bytes, words: str
) -> None:
    """200 MB of zeros in a 200 KB export: refused by the size its header gives, exit 2, nothing
    written, and the command's memory grows by a fraction of it."""
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        member = tarfile.TarInfo(f"{TOOL}/{KERNEL}")
        member.size, member.type = 200 << 20, kind
        with open("/dev/zero", "rb") as zeros:
            tar.addfile(member, zeros)
    into = tmp_path / "jit" / TOOL
    args = ["image", "jit-unpack", str(bomb), "--sha256", sha256(bomb.read_bytes()), "--into", str(into)]
    result = subprocess.run([sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, check=False)
    assert result.returncode == BAD_INPUT
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {bomb}: {words}") and "; fix: " in line
    assert int(result.stdout) < 64 << 10, "KiB: the 200 MB member was read"
    assert not into.exists() and not into.parent.exists()
