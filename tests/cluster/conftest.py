"""Shared pieces of the cluster tests: an image by digest, locks with or without a transfer engine, render."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from epstack.cluster import roles
from epstack.commands.main import main
from tests.conftest import REPO, check_golden

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack"
DIGEST = "sha256:" + "4f" * 32
IMAGE = f"{REGISTRY}:sglang-0.5.23-test@{DIGEST}"
ROUTER_IMAGE = "registry.example/smg:1.13.0@sha256:" + "ab" * 32  # --router-image
GOLDEN = Path(__file__).parent.parent / "golden" / "cluster"


def locks_without_engine(tmp_path: Path) -> Path:
    """A copy of locks/ whose sglang lock pins no KV transfer engine (its entries of one dropped)."""
    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks", locks)
    engines = {name for names in roles.TRANSFER_ENGINES.values() for name in names}
    kept, dropping = [], False
    for line in (locks / "sglang.txt").read_text().splitlines(keepends=True):
        if not line.startswith((" ", "#")):  # an entry's first line: name==version
            dropping = line.split("==")[0] in engines
        if not dropping:
            kept.append(line)
    (locks / "sglang.txt").write_text("".join(kept))
    return locks


def locks_with(tmp_path: Path, distribution: str) -> Path:
    """A copy of locks/ whose sglang lock pins `distribution` as its only transfer engine (hashed as uv
    writes an entry)."""
    locks = locks_without_engine(tmp_path)
    with (locks / "sglang.txt").open("a") as lock:
        lock.write(f"{distribution}==1.0.0 \\\n    --hash=sha256:{'ab' * 32}\n    # via sglang\n")
    return locks


def render(tmp_path: Path, *args: str, name: str = "out") -> str:
    """Run `epstack cluster ...` in-process into a file; assert exit 0; return the text."""
    out = tmp_path / name
    code = main(["cluster", *args, "--out", str(out)])
    assert code == 0
    return out.read_text()


def render_args(
    *, target: str, job: str, nodes: int, gpus: int, fabric: str, pins: Path, extra: Sequence[str] = ()
) -> list[str]:
    return [
        "render",
        "--platform",
        target,
        "--job",
        job,
        "--nodes",
        str(nodes),
        "--gpus-per-node",
        str(gpus),
        "--fabric",
        fabric,
        "--image",
        IMAGE,
        "--pins",
        str(pins),
        *extra,
    ]


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def check_cluster_golden(text: str, name: str) -> None:
    check_golden(text, GOLDEN / name)
