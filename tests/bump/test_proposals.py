"""What `pins bump` asks upstream to propose: the digest a pinned tag points at now (a real registry,
Debian's docker-registry on 127.0.0.1, tests/registry.py), and a group's versions (uv against the
package index on 127.0.0.1); then checked as any bump. Without the network, one line and exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from epstack.bump.upstream import change_links
from epstack.commands.main import main
from epstack.pins.file import rewrite
from epstack.pins.load import load_pins
from tests.bump.conftest import snapshot
from tests.bump.test_outdated import push_image
from tests.conftest import PINS
from tests.registry import free_port, local_registry

pytestmark = pytest.mark.aws  # loopback only: the registry and the package index on 127.0.0.1

DEVEL, BASE = "nvidia/cuda:13.0.3-devel-ubuntu24.04", "nvidia/cuda:13.0.3-base-ubuntu24.04"


def bump(root: Path, *args: str) -> int:
    return main(["pins", "bump", "--pins", str(root / "pins.env"), "--locks", str(root / "locks"), *args])


def set_pins(root: Path, **values: str) -> None:
    path = root / "pins.env"
    path.write_text(rewrite(path.read_text(), values))


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("+ ")]


def test_a_moved_tag_is_bumped_to_its_digest_and_a_current_one_is_not(
    checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with local_registry(tmp_path / "registry") as registry:
        old = push_image(registry, "nvidia/cuda", DEVEL.split(":")[1], b'{"build": 1}')
        base = push_image(registry, "nvidia/cuda", BASE.split(":")[1], b'{"build": "base"}')
        devel_pin, base_pin = f"{registry}/{DEVEL}@{old}", f"{registry}/{BASE}@{base}"
        set_pins(checkout, CUDA_DEVEL_IMAGE=devel_pin, CUDA_RUNTIME_IMAGE=base_pin)
        new = push_image(registry, "nvidia/cuda", DEVEL.split(":")[1], b'{"build": 2}')  # the tag moves
        assert new != old
        before = (checkout / "pins.env").read_text()
        assert bump(checkout, "--all-digests", "--summary", str(tmp_path / "pr.md")) == 0
        err = capsys.readouterr().err
        assert (checkout / "pins.env").read_text() == before.replace(devel_pin, f"{registry}/{DEVEL}@{new}")
        assert f"CUDA_RUNTIME_IMAGE: {registry}/{BASE}@{base[:19]} is still where its tag points" in " ".join(
            err.split()
        )
        assert "## epstack pins bump CUDA_DEVEL_IMAGE=" in (tmp_path / "pr.md").read_text()

        unchanged = snapshot(checkout)
        assert bump(checkout, "--digest", "CUDA_DEVEL_IMAGE") == 0
        assert "nothing to bump; untouched" in capsys.readouterr().err
        assert snapshot(checkout) == unchanged


@pytest.mark.parametrize(
    "args", [["--digest", "CUDA_DEVEL_IMAGE"], ["--all-digests"], ["--group", "cuda-base"]]
)
def test_offline_the_real_pins_digest_is_one_line_exit_3(
    checkout: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped pins name Docker Hub, which a test may not reach: as a machine without the network."""
    before = snapshot(checkout)
    assert bump(checkout, *args) == 3
    (line,) = error_lines(capsys.readouterr().err)
    assert line.startswith("error: CUDA_DEVEL_IMAGE: HEAD https://registry-1.docker.io/v2/nvidia/cuda/"), line
    assert line.endswith("fix: run where the registry answers, or give CUDA_DEVEL_IMAGE=IMAGE:TAG@sha256:...")
    assert snapshot(checkout) == before


def test_a_registry_that_does_not_answer_is_exit_3(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    set_pins(checkout, CUDA_DEVEL_IMAGE=f"127.0.0.1:{port}/{DEVEL}@sha256:{'a' * 64}")
    before = snapshot(checkout)
    assert bump(checkout, "--digest", "CUDA_DEVEL_IMAGE") == 3
    (line,) = error_lines(capsys.readouterr().err)
    assert f"HEAD http://127.0.0.1:{port}/v2/nvidia/cuda/manifests/" in line and "no answer" in line
    assert snapshot(checkout) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--digest", "TORCH_VERSION"],
            "--digest TORCH_VERSION: not a pin of an image by digest; fix: name one of",
        ),
        (["--digest", "CUDA_DEVEL_IMAGES"], "fix: did you mean CUDA_DEVEL_IMAGE?"),
        (["--group", "sglangs"], "--group sglangs: no such group; fix: did you mean sglang?"),
        ([], "nothing to move; fix: give KEY=VALUE, --digest KEY, --all-digests or --group NAME"),
    ],
)
def test_bad_requests_are_one_line_exit_2(
    checkout: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(checkout)
    assert bump(checkout, *args) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert message in line, line
    assert snapshot(checkout) == before


def test_the_sglang_group_moves_torch_and_nccl_with_it(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sglang 0.6.0 requires torch 2.15.0, which requires nvidia-nccl-cu13==2.33.1: alone it is refused
    (tests/bump/test_bump.py); as a group it holds, NCCL at torch 2.15.0's own pin (newer than the
    pinned 2.32.6), NVSHMEM kept."""
    assert bump(checkout, "--group", "sglang") == 0
    err = "".join(capsys.readouterr())
    assert "holds: every pins rule" in err
    pins = load_pins(checkout / "pins.env")
    moved = (pins.sglang_version, pins.torch_version, pins.nccl_version, pins.nvshmem_version)
    assert moved == ("0.6.0", "2.15.0", "2.33.1", "3.4.5")
    assert (
        main(
            [
                "pins",
                "lock",
                "--check",
                "--pins",
                str(checkout / "pins.env"),
                "--locks",
                str(checkout / "locks"),
            ]
        )
        == 0
    )


def test_the_nccl_group_moves_nccl_over_torchs_pin_to_the_newest_the_rules_allow(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch 2.14.1 pins NCCL 2.30.7 exactly, NCCL 3.0.0 is another major: 2.33.1, the lock's override."""
    assert bump(checkout, "--group", "nccl") == 0
    err = " ".join("".join(capsys.readouterr()).split())
    assert "holds: every pins rule" in err
    pins = load_pins(checkout / "pins.env")
    assert (pins.torch_version, pins.nccl_version) == ("2.14.1", "2.33.1")
    base = (checkout / "locks" / "base.txt").read_text()
    assert "# overrides: torch==2.14.1 nvidia-nccl-cu13==2.33.1 nvidia-nvshmem-cu13==3.4.5\n" in base
    assert "\nnvidia-nccl-cu13==2.33.1 \\\n" in base
    predict = ["pins", "predict", "--pins", str(checkout / "pins.env"), "--locks", str(checkout / "locks")]
    assert main(predict) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "nvidia-nccl-cu13: a plain install takes 2.30.7 (torch==2.14.1); the images install 2.33.1" in said


def test_a_group_held_back_by_a_pin_outside_it_names_the_wider_group(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(checkout)
    assert bump(checkout, "--group", "torch") == 1
    (line,) = error_lines(capsys.readouterr().err)
    assert (
        "--group torch: none of the 1 newer torch tried resolves with SGLANG_VERSION, UV_VERSION, "
        "NIXL_VERSION held" in line
    )
    assert line.endswith("fix: --group sglang, which moves more pins with it"), line
    assert snapshot(checkout) == before


def test_links_name_the_release_notes_and_the_compare_view() -> None:
    pinned = load_pins(PINS).as_env()
    old, new = pinned["DEEPEP_REF"], "0" * 40
    links = change_links(
        {**pinned, "DEEPEP_REF": new}, {"DEEPEP_REF": (old, new), "SGLANG_VERSION": ("0.5.23", "0.6.0")}
    )
    assert links == (
        ("SGLANG_VERSION 0.6.0: release notes", "https://github.com/sgl-project/sglang/releases/tag/v0.6.0"),
        (
            f"DeepEP {old[:12]}...{new[:12]}: compare",
            f"https://github.com/deepseek-ai/DeepEP/compare/{old}...{new}",
        ),
    )


def test_offline_a_group_of_the_real_pins_is_one_line_exit_3(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    index = f"http://127.0.0.1:{free_port()}/simple"
    monkeypatch.setenv("UV_DEFAULT_INDEX", index)
    before = snapshot(checkout)
    assert bump(checkout, "--group", "sglang") == 3
    (line,) = error_lines(capsys.readouterr().err)
    assert line.startswith(f"error: --group sglang: GET {index}/sglang/: no answer"), line
    assert line.endswith(
        "fix: run where the package index answers, or point UV_DEFAULT_INDEX at a mirror of it"
    )
    assert snapshot(checkout) == before
