"""epstack pins predict: the comparison on uv's real output, and uv against the index."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.pins.load import load_pins
from epstack.python.lockfile import read_lock
from epstack.python.predict import predict, predict_locks
from epstack.python.resolve import Resolution, Unresolvable, explanation, parse_compiled
from epstack.stack import ImageTarget
from tests.conftest import PINS, REPO, pins_variant

FIXTURES = REPO / "tests" / "fixtures" / "resolve"
RESOLVED = parse_compiled((FIXTURES / "sglang-0.5.23.txt").read_text())
TORCH_CONFLICT = explanation((FIXTURES / "sglang-0.5.23-torch-2.11.0.stderr").read_text())


class RecordedUv:
    """Answers as uv answered for sglang==0.5.23 (fixtures recorded from uv 0.13.9), and records calls."""

    def __init__(self, resolution: Resolution = RESOLVED) -> None:
        self.resolution = resolution
        self.constraints: list[tuple[str, ...]] = []

    def __call__(
        self, requirements: Sequence[str], target: ImageTarget, *, constraints: Sequence[str] = ()
    ) -> Resolution:
        assert list(requirements) == ["sglang==0.5.23"]
        assert target == ImageTarget(python_version="3.12", platform="x86_64-manylinux_2_39")
        self.constraints.append(tuple(constraints))
        if "torch==2.11.0" in constraints:
            raise Unresolvable(TORCH_CONFLICT)
        return self.resolution


def test_torch_2_11_moves_and_uv_says_why(tmp_path: Path) -> None:
    uv = RecordedUv()
    prediction = predict(load_pins(pins_variant(tmp_path, TORCH_VERSION="2.11.0")), uv)
    (move,) = prediction.moves
    assert str(move).startswith("torch 2.11.0 -> 2.14.1 (Because sglang>=0.5.23 depends on torch==2.14.1")
    assert {"sglang==0.5.23", "sgl-deep-ep==0.1.2.post1"} <= set(move.required_by)
    assert uv.constraints == [(), ("torch==2.11.0",)], "only the moved pin is resolved again"
    (deep_ep,) = prediction.deep_ep
    assert (deep_ep.package, deep_ep.resolved) == ("sgl-deep-ep", "0.1.2.post1")
    assert deep_ep.required_by == ("sglang==0.5.23",)
    assert prediction.installs == 207 and prediction.drifts


def test_a_pin_uv_merely_did_not_prefer_is_not_a_move(tmp_path: Path) -> None:
    """NCCL 2.30.4 where uv picked 2.30.7: if the pin still resolves, nothing forces a move."""
    uv = RecordedUv()
    prediction = predict(load_pins(pins_variant(tmp_path, NCCL_VERSION="2.30.4")), uv)
    assert prediction.moves == ()
    assert uv.constraints == [(), ("nvidia-nccl-cu13==2.30.4",)]


def test_matching_pins_move_nothing_but_deep_ep_still_drifts() -> None:
    prediction = predict(load_pins(PINS), RecordedUv())
    assert prediction.moves == () and prediction.drifts
    without = Resolution(packages=tuple(p for p in RESOLVED.packages if p.name != "sgl-deep-ep"))
    assert not predict(load_pins(PINS), RecordedUv(without)).drifts


@pytest.mark.network
def test_predict_against_the_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pins = pins_variant(tmp_path, TORCH_VERSION="2.11.0")
    start = time.monotonic()
    assert main(["pins", "predict", "--pins", str(pins)]) == 1
    seconds = time.monotonic() - start
    err = capsys.readouterr().out  # the prediction is the result
    assert "torch 2.11.0 -> 2.14.1 (Because sglang>=0.5.23 depends on torch==2.14.1" in err
    assert "deep_ep: sgl-deep-ep 0.1.2.post1" in err
    assert "locks/base.txt: stale (requires: torch==2.14.1" in err
    rows = [line.split("│")[1:5] for line in err.splitlines() if line.startswith("│ base")]
    assert ["base", "torch", "2.14.1", "2.11.0"] in [[cell.strip() for cell in row] for row in rows], (
        "pins win (overrides): the base lock would follow TORCH_VERSION"
    )
    print(f"pins predict against the index: {seconds:.1f} s")


def test_a_pins_change_is_predicted_against_the_committed_locks(tmp_path: Path) -> None:
    """SGLang moved: only its lock is resolved again (uv's answer here: flashinfer down one patch), and
    the prediction lists what would move, without writing a lock."""
    locks = REPO / "locks"
    before = {path.name: path.read_bytes() for path in locks.iterdir()}
    committed = read_lock(locks, "sglang")
    assert committed is not None
    moved = parse_compiled(
        committed.resolution.text.replace("\nflashinfer-python==0.7.2 ", "\nflashinfer-python==0.7.1 ")
    )

    def uv(requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        assert options["name"] == "sglang" and list(requirements) == [
            "sglang==0.5.22",
            "nixl==1.5.1",
            "nixl-cu13==1.5.1",
        ]
        return moved

    run = predict_locks(load_pins(pins_variant(tmp_path, SGLANG_VERSION="0.5.22")), locks, uv)
    assert not isinstance(run, str)
    assert [(m.lock, m.package, m.before, m.after) for m in run.moves] == [
        ("sglang", "flashinfer-python", "0.7.2", "0.7.1")
    ]
    assert {path.name: path.read_bytes() for path in locks.iterdir()} == before

    def conflict(requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        raise Unresolvable(TORCH_CONFLICT)

    pins = load_pins(pins_variant(tmp_path, TORCH_VERSION="2.11.0"))
    assert predict_locks(pins, locks, conflict) == TORCH_CONFLICT
