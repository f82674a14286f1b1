"""epstack pins outdated: the package index on 127.0.0.1 (tests/python/localindex.py) with uv resolving
for real, git answering from local repositories (GitHub's URLs rewritten by git's own url.insteadOf),
and sources made unreachable by closed ports on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from epstack.bump.outdated import OUTDATED, Outdated, Row, _image_row, _search
from epstack.bump.upstream import DOCKER_HUB_API
from epstack.commands.common import parse
from epstack.commands.main import build_parser, main
from epstack.commands.pins import next_commands
from epstack.errors import BadInput, EnvironmentProblem
from epstack.pins.load import load_pins
from tests.conftest import pins_variant
from tests.python.localindex import RELEASES, build_index, served, use_index
from tests.python.loopback import loopback_only
from tests.registry import local_registry

CLOSED = "127.0.0.1:1"  # nothing listens on port 1
# sglang 0.5.25 keeps torch 2.14.1 but needs a newer uv than the pinned 0.13.9.
EXTRA = (("sglang", "0.5.25", ("torch==2.14.1", "tinydep>=2", "uv>=0.14")),)
CUDA_IMAGES = {
    "CUDA_DEVEL_IMAGE": f"{CLOSED}/nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:{'b' * 64}",
    "CUDA_RUNTIME_IMAGE": f"{CLOSED}/nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:{'c' * 64}",
}


@pytest.fixture(autouse=True)
def _loopback(_no_accidental_io: None, monkeypatch: pytest.MonkeyPatch) -> None:
    loopback_only(monkeypatch)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(build_index(tmp_path_factory.mktemp("index"), (*RELEASES, *EXTRA))) as url:
        yield url


def git(*args: str | Path) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *map(str, args)]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def repository(path: Path, *tags: str, annotated: tuple[str, ...] = ()) -> dict[str, str]:
    """A repository with one commit per tag (annotated ones by `git tag -a`); tag -> commit."""
    git("init", "-q", "-b", "main", path)
    commits = {}
    for tag in (*tags, *annotated):
        git("-C", path, "commit", "-q", "--allow-empty", "-m", tag)
        git("-C", path, "tag", *(("-a", "-m", tag) if tag in annotated else ()), tag)
        commits[tag] = git("-C", path, "rev-parse", "HEAD")
    return commits


def github_at(monkeypatch: pytest.MonkeyPatch, base: str) -> None:
    """git reads https://github.com/OWNER/REPO.git from `base`/OWNER/REPO.git."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{base}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")


def outdated(pins: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, Outdated, str]:
    code = main(["pins", "outdated", "--pins", str(pins), "--json", str(report)])
    return code, OUTDATED.read(report), "".join(capsys.readouterr())


def rows(report: Outdated) -> dict[tuple[str, str], Row]:
    return {(row.key, row.source.split()[0] if row.source.startswith("git") else row.source): row
            for row in report.rows}  # fmt: skip


def test_rows_newer_newest_and_a_newer_one_that_does_not_resolve(
    tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_index(monkeypatch, index, tmp_path / "uv-cache")
    mirrors = tmp_path / "github"
    repository(mirrors / "deepseek-ai/DeepEP.git", "later")
    repository(mirrors / "fmtlib/fmt.git", "12.0.0", "12.1.0")
    gdrcopy = repository(mirrors / "NVIDIA/gdrcopy.git", "v2.5.2", annotated=("v2.6.0",))
    repository(mirrors / "NVIDIA/nccl.git", "v2.28.9-1", "v2.30.7-1")
    github_at(monkeypatch, f"{mirrors}/")
    code, report, err = outdated(pins_variant(tmp_path, **CUDA_IMAGES), tmp_path / "out.json", capsys)
    assert code == 0, err
    found = rows(report)

    sglang = found["SGLANG_VERSION", "index sglang"]
    assert (sglang.status, sglang.newest, sglang.resolves) == ("newer", "0.6.0", "0.5.24")
    assert [(r.version, "torch==2.15.0" in r.reason, "uv>=0.14" in r.reason) for r in sglang.refused] == [
        ("0.6.0", True, False),
        ("0.5.25", False, True),
    ]
    inverse = found["SGLANG_VERSION", "index sglang, keeping torch"]
    assert (inverse.resolves, inverse.held) == ("0.5.25", "TORCH_VERSION"), "only torch is held"
    torch = found["TORCH_VERSION", "index torch"]
    assert (torch.status, torch.newest, torch.resolves) == ("held back", "2.15.0", "2.14.1")
    assert "sglang" in torch.note and "torch==2.14.1" in torch.note
    nccl = found["NCCL_VERSION", "index nvidia-nccl-cu13"]
    assert (nccl.status, nccl.newest, nccl.resolves) == ("newer", "3.0.0", "2.33.1"), (
        "NCCL is the base lock's override: movable over torch's exact pin, within its major"
    )
    assert [(r.version, r.reason) for r in nccl.refused] == [
        (
            "3.0.0",
            "NCCL 3.0.0 is another major than the 2.30.7 torch 2.14.1 requires: another ABI; "
            "fix: set NCCL_VERSION to an NCCL 2.x release, 2.30.7 or newer",
        )
    ]
    nvshmem = found["NVSHMEM_VERSION", "index nvidia-nvshmem-cu13"]
    assert (nvshmem.status, nvshmem.newest, nvshmem.resolves) == ("current", "3.4.5", "3.4.5")
    assert found["UV_VERSION", "index uv"].resolves == "0.14.0"
    assert report.sglang_bump == "0.5.24"
    assert "next: epstack pins bump SGLANG_VERSION=0.5.24 --dry-run" in err

    for key, value in CUDA_IMAGES.items():
        image = found[key, "registry 127.0.0.1:1/nvidia/cuda"]
        assert (
            image.status == "unreachable"
            and "GET http://127.0.0.1:1/v2/nvidia/cuda/tags/list: no answer" in image.note
        )
        assert image.check == f"docker buildx imagetools inspect {value.split('@')[0]}"
    assert found["DEEPEP_REF", "git"].status == "newer"
    assert found["DEEPEP_FMT_REF", "git"].newest.startswith("12.1.0 (")
    gdr = found["GDRCOPY_REF", "git"]
    assert (gdr.status, gdr.newest) == ("newer", f"v2.6.0 ({gdrcopy['v2.6.0'][:12]})"), "the tag's commit"
    assert found["NCCL_VERSION", "git"].status == "current"


def test_nothing_answers_is_exit_3_with_a_row_and_a_check_for_each_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_index(monkeypatch, f"http://{CLOSED}/simple", tmp_path / "uv-cache")
    github_at(monkeypatch, f"http://{CLOSED}/")
    code, report, err = outdated(pins_variant(tmp_path, **CUDA_IMAGES), tmp_path / "out.json", capsys)
    assert code == 3
    assert {row.status for row in report.rows} == {"unreachable"}
    assert all(row.check for row in report.rows)
    found = rows(report)
    assert found["SGLANG_VERSION", "index sglang"].check == (
        f"curl -sS -H 'Accept: application/vnd.pypi.simple.v1+json' http://{CLOSED}/simple/sglang/"
    )
    assert found["NCCL_VERSION", "git"].check == "git ls-remote --tags -- https://github.com/NVIDIA/nccl.git"
    assert found["DEEPEP_REF", "git"].check.endswith("DeepEP.git HEAD")
    assert "error: no upstream source answered" in err


def test_the_next_commands_bump_sglang_and_each_moved_image_digest() -> None:
    rows = (
        Row(key="CUDA_DEVEL_IMAGE", source="registry nvidia/cuda", pinned="a", status="current"),
        Row(key="CUDA_RUNTIME_IMAGE", source="registry nvidia/cuda", pinned="b", status="moved"),
    )
    report = Outdated(pins="p", index="i", candidates=1, rows=rows, sglang_bump="0.5.24", seconds=1.0)
    assert next_commands(report) == [
        "epstack pins bump SGLANG_VERSION=0.5.24 --dry-run",
        "epstack pins bump --digest CUDA_RUNTIME_IMAGE --dry-run",
    ]
    assert next_commands(replace(report, rows=rows[:1], sglang_bump="")) == []
    for command in next_commands(report):  # each one parses as the command line it names
        assert not isinstance(parse(build_parser("pins"), command.split()[1:]), int), command


def test_the_report_is_read_back_only_whole() -> None:
    document = {"schema": "pins-outdated/1", "pins": "p", "index": "i", "candidates": 1, "sglang_bump": ""}
    row = {"key": "K", "source": "s", "pinned": "1"}
    with pytest.raises(BadInput, match=r"rows\.0\.status: field required"):
        OUTDATED.loads(json.dumps({**document, "seconds": 1.0, "rows": [row]}), "out.json")
    with pytest.raises(BadInput, match="schema 'pins-outdated/2' unknown"):
        OUTDATED.loads(json.dumps({**document, "schema": "pins-outdated/2"}), "out.json")


def _attempt(refusing: set[str], tried: list[str], failing: str = "") -> Callable[[str], str | None]:
    def attempt(version: str) -> str | None:
        tried.append(version)
        if version == failing:
            raise EnvironmentProblem("the index went away")
        return f"{version} conflicts" if version in refusing else None

    return attempt


@pytest.mark.parametrize(
    ("listed", "refusing", "limit", "expected", "tried"),
    [
        (["3", "2", "1"], {"3"}, 5, ("newer", "2"), ["3", "2"]),
        (["3", "2", "1"], {"3", "2"}, 5, ("held back", "1"), ["3", "2"]),
        (["4", "3", "2", "1"], {"4", "3", "2"}, 2, ("unknown", ""), ["4", "3"]),
        (["1"], set(), 5, ("current", "1"), []),
    ],
)
def test_the_search_tries_newest_first_and_at_most_limit(
    listed: list[str], refusing: set[str], limit: int, expected: tuple[str, str], tried: list[str]
) -> None:
    seen: list[str] = []
    row = _search(key="K", source="s", pinned="1", listed=listed, held="H",
                  attempt=_attempt(refusing, seen), limit=limit)  # fmt: skip
    assert ((row.status, row.resolves), seen) == (expected, tried)
    assert [r.version for r in row.refused] == [v for v in tried if v in refusing]


def test_a_failure_to_ask_stops_the_search_as_unknown() -> None:
    row = _search(key="K", source="s", pinned="1", listed=["3", "2", "1"], held="H",
                  attempt=_attempt({"3"}, [], failing="2"), limit=5)  # fmt: skip
    assert (row.status, row.resolves, row.note) == ("unknown", "", "could not resolve 2: the index went away")


def push_image(registry: str, repository: str, tag: str, config: bytes) -> str:
    """An OCI image of one config blob and no layer, pushed over the registry's API; its digest."""
    base = f"http://{registry}/v2/{repository}"
    digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
    with urllib.request.urlopen(urllib.request.Request(f"{base}/blobs/uploads/", method="POST")) as started:
        location = urllib.parse.urljoin(base, started.headers["Location"])
    separator = "&" if "?" in location else "?"
    upload = urllib.request.Request(f"{location}{separator}digest={digest}", data=config, method="PUT",
                                    headers={"Content-Type": "application/octet-stream"})  # fmt: skip
    urllib.request.urlopen(upload).close()
    oci = "application/vnd.oci.image.manifest.v1+json"
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": oci,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest,
                   "size": len(config)},
        "layers": [],
    }).encode()  # fmt: skip
    put = urllib.request.Request(f"{base}/manifests/{tag}", data=manifest, method="PUT",
                                 headers={"Content-Type": oci})  # fmt: skip
    with urllib.request.urlopen(put) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_image_rows_from_a_real_registry_newest_tag_of_the_minor_and_a_moved_tag(tmp_path: Path) -> None:
    with local_registry(tmp_path / "registry") as registry:
        pushed = {
            tag: push_image(registry, "nvidia/cuda", tag, json.dumps({"tag": tag}).encode())
            for tag in ("13.0.3-devel-ubuntu24.04", "13.0.10-devel-ubuntu24.04", "13.2.0-devel-ubuntu24.04",
                        "13.3.0-devel-ubuntu22.04", "13.3.0-base-ubuntu24.04", "13.0.3-base-ubuntu24.04")
        }  # fmt: skip
        devel = f"{registry}/nvidia/cuda:13.0.3-devel-ubuntu24.04@{pushed['13.0.3-devel-ubuntu24.04']}"
        runtime = f"{registry}/nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:{'c' * 64}"
        pins = load_pins(pins_variant(tmp_path, CUDA_DEVEL_IMAGE=devel, CUDA_RUNTIME_IMAGE=runtime))
        devel_row = _image_row(pins, "CUDA_DEVEL_IMAGE", DOCKER_HUB_API)
        runtime_row = _image_row(pins, "CUDA_RUNTIME_IMAGE", DOCKER_HUB_API)
    assert (devel_row.status, devel_row.newest, devel_row.resolves) == (
        "newer",
        "13.2.0-devel-ubuntu24.04",
        "13.0.10-devel-ubuntu24.04",
    ), "13.0.10 > 13.0.3 by version; another OS is another image"
    assert (runtime_row.status, runtime_row.newest) == ("moved", "13.3.0-base-ubuntu24.04")
    assert runtime_row.note == f"13.0.3-base-ubuntu24.04 now points at {pushed['13.0.3-base-ubuntu24.04']}"
