"""The guard over every distribution: a venv (real dist-info directories) against the layer's locks
(the committed ones), with the deep_ep wheel from its manifest; a summary row plus the failing ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.guard.distributions import check_closure
from epstack.python import closure
from epstack.python.lockfile import expected_distributions
from tests.conftest import REPO, write_deepep_manifest

LOCKS = REPO / "locks"
WHEEL = "deep_ep-2.0.0+local-cp312-cp312-linux_x86_64.whl"


def site(tmp_path: Path, versions: dict[str, str]) -> Path:
    """A site-packages holding one dist-info directory per distribution."""
    root = tmp_path / "site-packages"
    for name, version in versions.items():
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def manifest(tmp_path: Path) -> Path:
    return write_deepep_manifest(tmp_path / "deepep-source.json", wheel=WHEEL)


def locked(layer: str) -> dict[str, str]:
    versions, _ = expected_distributions(LOCKS, layer)
    return {name: version for name, (version, _) in versions.items()}


def test_a_venv_exactly_as_locked_is_one_ok_row(tmp_path: Path) -> None:
    want, files = closure.expected("sglang", LOCKS, manifest(tmp_path))
    assert want["deep-ep"] == ("2.0.0+local", "deepep-source.json")
    have = closure.installed([str(site(tmp_path, {**locked("sglang"), "deep-ep": "2.0.0+local"}))])
    distributions = closure.compare(want, have)
    assert {d.verdict for d in distributions} == {"ok"}
    (row,) = check_closure(distributions, files)
    count = len(locked("sglang")) + 1
    assert (row.expected, row.found, row.verdict) == (f"{count} locked", f"{count} installed", "ok")
    assert row.detail == "exactly base.txt, sglang.txt, deepep-source.json"


def test_missing_extra_and_moved_are_one_row_each_grouped(tmp_path: Path) -> None:
    versions = locked("base")
    versions.pop("sympy")
    versions["triton"] = "3.7.1"  # an unpinned transitive: pins.env names no triton
    versions["left-behind"] = "1.0"
    want, files = closure.expected("base", LOCKS, manifest(tmp_path))
    distributions = closure.compare(want, closure.installed([str(site(tmp_path, versions))]))
    rows = check_closure(distributions, files)
    assert [(r.component, r.expected, r.found, r.verdict, r.detail) for r in rows[1:]] == [
        ("sympy", locked("base")["sympy"], "not installed", "missing", "base.txt"),
        ("left-behind", "in no lock", "1.0", "extra", ""),
        ("triton", locked("base")["triton"], "3.7.1", "mismatch", "base.txt"),
    ]
    summary = rows[0]
    assert summary.verdict == "mismatch" and summary.detail.startswith("1 missing, 1 extra, 1 other version")
    assert len(distributions) == len(locked("base")) + 1, "the JSON keeps every distribution"


def test_without_a_manifest_deep_ep_is_taken_as_built(tmp_path: Path) -> None:
    """The guard's own deep_ep source row fails then; the closure does not count it twice."""
    want, _ = closure.expected("deepep", LOCKS, tmp_path / "absent.json")
    have = {**locked("deepep"), "deep-ep": "2.0.0+local"}
    assert {d.verdict for d in closure.compare(want, have)} == {"ok"}


def test_locks_that_disagree_are_bad_input(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    sglang = (locks / "sglang.txt").read_text()
    (locks / "sglang.txt").write_text(sglang.replace("\ntorch==2.14.1 ", "\ntorch==2.14.0 "))
    with pytest.raises(BadInput, match=r"torch==2.14.0, but base.txt has 2.14.1"):
        expected_distributions(locks, "sglang")
    (locks / "base.txt").unlink()
    with pytest.raises(BadInput, match="no such lock"):
        expected_distributions(locks, "base")


def test_only_the_venv_counts(tmp_path: Path) -> None:
    """Distributions elsewhere on sys.path (epstack's tool in imagepaths.TOOL) are not the venv's."""
    inside = site(tmp_path / "venv", {"torch": "2.14.1"})
    site(tmp_path / "tool", {"rich": "15.0.0"})
    assert closure.installed([str(inside)]) == {"torch": "2.14.1"}
