"""The guard reports broken installs instead of crashing: real .dist-info directories on sys.path with
no METADATA, a version that is not PEP 440, a malformed Requires-Dist, a missing or malformed RECORD.
Each becomes a row that says so; the whole command exits 1 with its table, never a traceback."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.guard.deepep import check_deep_ep_owner, deep_ep_owners, unreadable_deep_ep_records
from epstack.guard.distributions import check_distribution, check_requirements, check_torch_cuda
from epstack.guard.expected import load_expected
from tests.conftest import PINS, write_dist


def dist_info(site: Path, name: str, version: str, *, metadata: str | None, record: str | None) -> Path:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    if metadata is not None:
        (info / "METADATA").write_text(metadata)
    if record is not None:
        (info / "RECORD").write_text(record)
    return info


def test_a_distribution_without_metadata(site: Path) -> None:
    info = dist_info(site, "nvidia-nccl-cu13", "2.30.7", metadata=None, record="")
    row = check_distribution("nvidia-nccl-cu13", "2.30.7")
    assert (row.verdict, row.found) == ("mismatch", "unreadable metadata")
    assert str(info) in row.detail and "no METADATA" in row.detail


def test_a_version_that_is_not_pep_440(site: Path) -> None:
    dist_info(
        site,
        "sglang",
        "0.5.23",
        metadata="Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23-final!!\n",
        record=None,
    )
    row = check_distribution("sglang", "0.5.23")
    assert row.verdict == "mismatch" and "is not a PEP 440 version" in row.detail


def test_torch_with_an_unparsable_version_has_a_torch_cuda_row(site: Path) -> None:
    dist_info(site, "torch", "2", metadata="Metadata-Version: 2.1\nName: torch\nVersion: two\n", record=None)
    row = check_torch_cuda(load_expected(PINS, ["python", "base"]), None, "not imported")
    assert row.verdict == "mismatch" and "not a PEP 440 version" in row.detail


def test_a_malformed_requires_dist_is_a_row(site: Path) -> None:
    write_dist(
        site, "torch", "2.14.1+cu130", ("torch/__init__.py",), ("nvidia-nccl-cu13 (>=2.28", "filelock")
    )
    rows = check_requirements("torch", {"nvidia-nccl-cu13": "2.30.7"})
    assert [(r.found, r.verdict) for r in rows] == [("malformed", "mismatch")]
    assert "nvidia-nccl-cu13 (>=2.28" in rows[0].detail


def test_an_unevaluable_marker_counts_as_applying(site: Path) -> None:
    write_dist(
        site,
        "torch",
        "2.14.1",
        ("torch/__init__.py",),
        ('nvidia-nccl-cu13==2.28.9; python_version ~= "3"',),  # ~= needs two parts: packaging raises
    )
    rows = check_requirements("torch", {"nvidia-nccl-cu13": "2.30.7"})
    assert [r.verdict for r in rows] == ["override (pinned)"]


def test_a_deep_ep_distribution_with_a_broken_record(site: Path) -> None:
    dist_info(
        site,
        "deep-ep",
        "1.0",
        metadata="Metadata-Version: 2.1\nName: deep-ep\nVersion: 1.0\n",
        record="deep_ep/__init__.py,,\n\n",
    )
    dist_info(
        site,
        "sgl-deep-ep",
        "0.1.2",
        metadata="Metadata-Version: 2.1\nName: sgl-deep-ep\nVersion: 0.1.2\n",
        record=None,
    )
    distributions = list(metadata.distributions(path=[str(site)]))
    row = check_deep_ep_owner(deep_ep_owners(distributions), unreadable_deep_ep_records(distributions))
    assert row.verdict == "mismatch"
    assert "deep-ep: malformed RECORD" in row.detail and "sgl-deep-ep: no RECORD" in row.detail


def test_the_command_exits_1_with_a_table_not_a_traceback(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dist_info(site, "nvidia-nccl-cu13", "2.30.7", metadata=None, record="\n")
    dist_info(
        site,
        "nvidia-nvshmem-cu13",
        "3.4.5",
        metadata="Name: nvidia-nvshmem-cu13\nVersion: [3.4.5]\n",
        record=None,
    )
    layer = tmp_path / "python.pins.env"
    layer.write_text("CUDA_VERSION=13.0.3\nNCCL_VERSION=2.30.7\nNVSHMEM_VERSION=3.4.5\n")
    assert main(["guard", "--pins", str(layer), "--layer", "python", "--json", str(tmp_path / "g.json")]) == 1
    err = "".join(capsys.readouterr())
    assert "Traceback" not in err and "unreadable metadata" in err and "[3.4.5]" in err
