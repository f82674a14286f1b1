"""The vllm layer's rows, against a test site: vLLM's gate (a stand-in `vllm.utils.import_utils` whose
deep_ep_v2_unavailable_reason answers as the test says; the docker build runs vLLM 0.33.0's own) and no
other engine's distributions beside vLLM."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.guard.expected import Expected
from epstack.guard.run import vllm_checks
from epstack.guard.vllm import GATE, check_deep_ep_v2_gate, check_no_other_engine, foreign_prefixes
from tests.conftest import write_dist

NCCL_TOO_OLD = "DeepEP v2 requires NCCL >= 2.30.4 but found 2.28.9. PyTorch pins an older NCCL; ..."


@pytest.fixture(autouse=True)
def forget_vllm() -> Iterator[None]:
    """Each test imports its own vllm."""
    yield
    for name in [name for name in sys.modules if name.split(".")[0] == "vllm"]:
        del sys.modules[name]


def write_gate(site: Path, body: str) -> None:
    """vllm/utils/import_utils.py with `body` as deep_ep_v2_unavailable_reason's."""
    (site / "vllm" / "utils").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "utils" / "__init__.py").write_text("")
    (site / "vllm" / "utils" / "import_utils.py").write_text(
        f"def deep_ep_v2_unavailable_reason():\n    {body}\n"
    )


def test_the_gate_passes_when_vllm_says_none(site: Path) -> None:
    write_gate(site, "return None")
    row = check_deep_ep_v2_gate()
    assert (row.component, row.found, row.verdict) == (GATE, "None", "ok")


@pytest.mark.parametrize(
    ("body", "found"),
    [
        (f"return {NCCL_TOO_OLD!r}", NCCL_TOO_OLD),
        ("raise OSError('libnccl.so.2: cannot open shared object file')", "OSError: libnccl.so.2"),
    ],
)
def test_the_gate_fails_with_vllms_own_reason(site: Path, body: str, found: str) -> None:
    write_gate(site, body)
    row = check_deep_ep_v2_gate()
    assert row.verdict == "fail" and row.found.startswith(found) and "deepep_v2" in row.fix


def test_no_gate_to_ask_is_missing(site: Path) -> None:
    row = check_deep_ep_v2_gate()
    assert (row.found, row.verdict) == ("import failed", "missing") and "ModuleNotFoundError" in row.detail
    write_gate(site, "return None")
    (site / "vllm" / "utils" / "import_utils.py").write_text("def has_deep_ep_v2(): return True\n")
    row = check_deep_ep_v2_gate()
    assert (row.found, row.verdict) == (
        "no deep_ep_v2_unavailable_reason in vllm.utils.import_utils",
        "missing",
    )


def test_sglang_beside_vllm_is_extra_and_shared_flashinfer_is_not(site: Path) -> None:
    assert foreign_prefixes("vllm") == ("sglang", "sgl-")
    write_dist(site, "flashinfer-python", "0.7.2.post1", ())
    assert check_no_other_engine("vllm").verdict == "ok"
    write_dist(site, "sgl-deep-ep", "0.1.2.post1", ())
    write_dist(site, "sglang", "0.5.23", ())
    row = check_no_other_engine("vllm")
    assert (row.found, row.verdict) == ("sgl-deep-ep, sglang", "extra")


def test_the_vllm_scope_holds_vllm_at_its_pin_and_its_gate(site: Path) -> None:
    write_dist(site, "vllm", "0.33.0", (), requires=("torch==2.14.0", "flashinfer-python==0.7.2.post1"))
    write_gate(site, "return None")
    rows = vllm_checks(Expected(cuda_version="13.0.3", torch_version="2.14.1", vllm_version="0.33.0"))
    by_component = {row.component: row for row in rows}
    assert by_component["vllm"].verdict == "ok"
    assert by_component["vllm requires torch"].verdict == "override (pinned)", (
        "2.14.0 asked, 2.14.1 installed"
    )
    assert by_component[GATE].verdict == "ok"
    assert by_component["no other engine in the vllm image"].verdict == "ok"
