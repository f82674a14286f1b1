"""epstack.python.resolve: uv's output parsed, its failures classified, and uv itself against the index."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from epstack.errors import EnvironmentProblem
from epstack.pins.load import load_pins
from epstack.python.resolve import Unresolvable, compile_requirements, explanation, parse_compiled
from epstack.stack import ImageTarget
from tests.conftest import PINS, REPO

FIXTURES = REPO / "tests" / "fixtures" / "resolve"
TARGET = ImageTarget(python_version="3.12", platform="x86_64-manylinux_2_39")


def test_parse_compiled_reads_versions_and_requirers() -> None:
    resolution = parse_compiled((FIXTURES / "sglang-0.5.23.txt").read_text())
    assert len(resolution.packages) == 207
    assert resolution.version("torch") == "2.14.1"
    assert resolution.version("Nvidia_NCCL_cu13") == "2.30.7", "names are compared canonically"
    assert resolution.version("not-there") is None
    by_name = {p.name: p for p in resolution.packages}
    assert by_name["sglang"].via == (), "a direct requirement (-r file) has no requirer"
    assert by_name["nvidia-nccl-cu13"].via == ("torch",)
    assert {"sglang", "sgl-deep-ep", "torchvision"} <= set(by_name["torch"].via)


def test_explanation_is_uv_s_reason_on_one_line() -> None:
    text = explanation((FIXTURES / "sglang-0.5.23-torch-2.11.0.stderr").read_text())
    assert text.startswith("Because sglang>=0.5.23 depends on torch==2.14.1 and torch==2.11.0")
    assert "\n" not in text and "cause:" not in text


def test_uv_is_the_version_the_images_use() -> None:
    """One uv: what `pins predict` (and the locks) resolve with is what the images install with."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = next(d for d in project["project"]["dependencies"] if d.startswith("uv=="))
    assert pinned == f"uv=={load_pins(PINS).uv_version}"


def test_unreachable_index_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The discard port answers nobody: what an offline machine looks like to uv."""
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    with pytest.raises(EnvironmentProblem, match="cannot reach the package index"):
        compile_requirements(["sglang==0.5.23"], TARGET, timeout=60)


@pytest.mark.network
def test_uv_resolves_sglang_for_the_image_and_explains_a_conflict() -> None:
    resolution = compile_requirements(["sglang==0.5.23"], TARGET)
    assert resolution.version("torch") == "2.14.1"
    with pytest.raises(Unresolvable, match=re.escape("depends on torch==2.14.1")):
        compile_requirements(["sglang==0.5.23"], TARGET, constraints=["torch==2.11.0"])
