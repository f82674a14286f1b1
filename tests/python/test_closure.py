"""The guard over every distribution: a venv (real dist-info directories) against the layer's locks
(the committed ones), with the deep_ep wheel from its manifest; a summary row plus the failing ones."""

from __future__ import annotations

import shutil
import sysconfig
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


@pytest.mark.parametrize(
    ("locked_version", "installed_version", "verdict"),
    [
        ("2.0", "2.0.0", "ok"),  # one version, two spellings (PEP 440)
        ("2.0", "2.0.1", "other version"),
        ("not.a-version!", "not.a-version!", "ok"),  # no PEP 440 version: the text decides
        ("not.a-version!", "other-text!", "other version"),
        ("1.0", "", "missing"),
        ("", "1.0", "extra"),
    ],
)
def test_a_distribution_is_judged_by_its_version_not_its_spelling(
    locked_version: str, installed_version: str, verdict: str
) -> None:
    distribution = closure.Distribution(
        name="torch", locked=locked_version, installed=installed_version, source="base.txt"
    )
    assert distribution.verdict == verdict


def test_compare_keeps_an_absent_side_empty_for_the_json() -> None:
    """A missing distribution has no installed version and an extra one no lock: "" in --json."""
    rows = closure.compare({"torch": ("2.14.1", "base.txt")}, {"left-behind": "1.0"})
    assert rows == [
        closure.Distribution(name="left-behind", locked="", installed="1.0", source=""),
        closure.Distribution(name="torch", locked="2.14.1", installed="", source="base.txt"),
    ]


def test_a_deep_ep_other_than_its_manifest_is_another_version(tmp_path: Path) -> None:
    want, _ = closure.expected("deepep", LOCKS, manifest(tmp_path))
    have = {**locked("deepep"), "deep-ep": "1.0.0"}
    (row,) = [d for d in closure.compare(want, have) if d.name == "deep-ep"]
    assert (row.locked, row.installed, row.verdict) == ("2.0.0+local", "1.0.0", "other version")


def test_without_a_manifest_a_missing_deep_ep_is_still_missing(tmp_path: Path) -> None:
    want, _ = closure.expected("deepep", LOCKS, tmp_path / "absent.json")
    (row,) = [d for d in closure.compare(want, locked("deepep")) if d.name == "deep-ep"]
    assert (row.locked, row.installed, row.verdict) == ("as built", "", "missing")


@pytest.mark.parametrize(
    ("purelib", "platlib", "paths"),
    [("/venv/lib", "/venv/lib64", ["/venv/lib", "/venv/lib64"]), ("/venv/lib", "/venv/lib", ["/venv/lib"])],
)
def test_the_venv_is_its_purelib_and_platlib_once_each(
    monkeypatch: pytest.MonkeyPatch, purelib: str, platlib: str, paths: list[str]
) -> None:
    monkeypatch.setattr(
        sysconfig, "get_paths", lambda: {"purelib": purelib, "platlib": platlib, "data": "/venv"}
    )
    assert closure.venv_paths() == paths


def test_a_distribution_is_found_by_its_metadata_name_first_one_wins(tmp_path: Path) -> None:
    first = site(tmp_path / "a", {"Torch_Stuff": "2.0"})
    second = site(tmp_path / "b", {"torch-stuff": "1.0"})
    nameless = second / "nameless-1.0.dist-info"
    nameless.mkdir()
    (nameless / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    assert closure.installed([str(first), str(second)]) == {"torch-stuff": "2.0"}
