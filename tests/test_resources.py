"""Packaged resources: an installed epstack renders what the checkout renders; image paths spelled once."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from epstack import imagepaths
from epstack.image.render import source_revision
from tests.conftest import PINS, REPO, venv_tool
from tests.image.test_render import GOLDEN, REVISION

CREATED_EPOCH = "1795910400"  # tests.image.test_render.CREATED


def test_image_paths_are_spelled_only_in_imagepaths() -> None:
    """Templates, scripts, Python and tests take epstack's folders in an image from epstack.imagepaths;
    only what people read (Markdown), recorded results and the golden files (rendered text) spell them."""
    result = subprocess.run(
        ["git", "grep", "--untracked", "-nF", f"{imagepaths.EPSTACK_HOME}/", "--", ".",
         ":!epstack/imagepaths.py", ":!tests/golden", ":!*.md", ":!*/results/*"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout or result.stderr  # git grep: 1 when nothing matched


def _run(*argv: str | Path, cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def test_an_installed_wheel_renders_the_golden_dockerfiles(tmp_path: Path) -> None:
    """`pip install epstack`, then render from elsewhere: the wheel (built offline, through its sdist)
    in a new venv whose only other path is this venv's site-packages (the dependencies), no checkout."""
    uv = venv_tool("uv")
    offline = ["--no-config", "--offline", "--python"]
    _run(uv, "build", *offline, sys.executable, "--no-build-isolation", "--out-dir", tmp_path / "dist", REPO)
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(uv, "pip", "install", *offline, python, "--no-deps", *(tmp_path / "dist").glob("*.whl"))
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site / "epstack-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "EPSTACK_"))}
    env["SOURCE_DATE_EPOCH"] = CREATED_EPOCH
    where = _run(python, "-c", "import epstack; print(epstack.__file__)", cwd=tmp_path, env=env)
    assert Path(where.strip()).is_relative_to(site)

    out = tmp_path / "out"
    _run(venv / "bin" / "epstack", "render", "--pins", PINS, "--locks", REPO / "locks", "--out-dir", out,
         cwd=tmp_path, env=env)  # fmt: skip
    goldens = sorted(GOLDEN.glob("*/*.Dockerfile"))
    assert len(goldens) == 8, "two targets x base, deepep, sglang, vllm"
    for golden in goldens:
        rendered = (out / "targets" / golden.parent.name / golden.name).read_text()
        # The sglang image's revision label is the pins' checkout's commit; the golden one a fixed value.
        assert rendered == golden.read_text().replace(REVISION, source_revision(REPO)), golden
    shipped = {"src/pyproject.toml": "pyproject.toml", "src/constraints.txt": "constraints.txt"}
    shipped["scripts/image/guard-layer.sh"] = "scripts/image/guard-layer.sh"
    for copied, source in shipped.items():
        assert (out / copied).read_bytes() == (REPO / source).read_bytes(), copied
