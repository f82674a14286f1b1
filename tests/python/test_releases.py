"""The releases a simple index lists (PEP 503 pages, as tests/python/localindex.py and mirrors serve
them): newest first by version, not by name; yanked files, pre-releases and other files left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from epstack.errors import EnvironmentProblem
from epstack.python.releases import index_url, releases
from tests.python.localindex import served
from tests.python.loopback import loopback_only

PAGE = """<!DOCTYPE html><html><body>
<a href="../../files/demo-0.9.0-py3-none-any.whl#sha256=00">demo-0.9.0-py3-none-any.whl</a>
<a href="../../files/demo-0.10.0.tar.gz">demo-0.10.0.tar.gz</a>
<a href="../../files/demo-0.11.0-py3-none-any.whl" data-yanked="broken">demo-0.11.0-py3-none-any.whl</a>
<a href="../../files/demo-0.10.1-py3-none-any.whl" data-yanked="">demo-0.10.1-py3-none-any.whl</a>
<a href="../../files/demo-0.10.1.tar.gz">demo-0.10.1.tar.gz</a>
<a href="../../files/demo-1.0.0rc1-py3-none-any.whl">demo-1.0.0rc1-py3-none-any.whl</a>
<a href="../../files/demo-0.12.0.exe">demo-0.12.0.exe</a>
<a href="https://files.example/p/demo-0.9.1.post1-cp312-cp312-manylinux_2_28_x86_64.whl">w</a>
</body></html>
"""


@pytest.fixture(autouse=True)
def _loopback(_no_accidental_io: None, monkeypatch: pytest.MonkeyPatch) -> None:
    loopback_only(monkeypatch)


def test_releases_newest_first_without_yanked_or_pre_releases(tmp_path: Path) -> None:
    page = tmp_path / "simple" / "demo" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    with served(tmp_path) as url:
        assert releases("Demo", index=url) == ("0.10.1", "0.10.0", "0.9.1.post1", "0.9.0")
        assert releases("absent", index=url) == ()


def test_an_index_that_does_not_answer_is_an_environment_problem() -> None:
    with pytest.raises(EnvironmentProblem, match=r"^GET http://127\.0\.0\.1:1/simple/demo/: no answer "):
        releases("demo", index="http://127.0.0.1:1/simple", timeout=5)


def test_the_index_is_the_one_uv_resolves_against(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    assert index_url() == "https://pypi.org/simple"
    monkeypatch.setenv("UV_INDEX_URL", "https://mirror.example/simple/")
    assert index_url() == "https://mirror.example/simple"
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:8080/simple")
    assert index_url() == "http://127.0.0.1:8080/simple"
