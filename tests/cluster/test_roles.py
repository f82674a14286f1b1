"""Prefill/decode roles (--disaggregation): rendered as two LeaderWorkerSets behind the router in PD mode
with the KV transfer engine the sglang lock pins (the shipped lock: NIXL), every object validated; refused
for a lock that pins none (on Slurm too: test_roles_slurm.py). SGLang's and smg's own parsers take the
commands in test_sglang_parser.py and test_router_parser.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epstack.cluster import roles
from epstack.commands.main import main
from epstack.smoke.serving.command import BOOTSTRAP_PORT
from tests.cluster.conftest import (
    ROUTER_IMAGE,
    check_cluster_golden,
    load_all,
    locks_with,
    locks_without_engine,
    render,
    render_args,
)
from tests.cluster.validation import validate_object
from tests.conftest import PINS, REPO

ROLE_FLAGS = ["--profile", "deepseek-v3", "--disaggregation", "--router-image", ROUTER_IMAGE]
FLAGS = [*ROLE_FLAGS, "--pod-monitor"]


def _args(tmp_path: Path, target: str = "k8s", job: str = "serve") -> list[str]:
    pins = PINS
    return render_args(target=target, job=job, nodes=2, gpus=8, fabric="ib", pins=pins)


def _refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]) -> str:
    out = tmp_path / "never"
    assert main(["cluster", *args, "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("target", ["k8s", "slurm"])
def test_a_lock_without_a_transfer_engine_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, target: str
) -> None:
    locks = locks_without_engine(tmp_path)
    err = _refusal(capsys, tmp_path, [*_args(tmp_path, target), *ROLE_FLAGS, "--locks", str(locks)])
    assert err.startswith("error: --disaggregation: ") and f"{locks / 'sglang.txt'} pins none" in err
    assert "mooncake-transfer-engine or nixl" in err and "fix: pass the --locks of an image" in err


def test_the_shipped_lock_carries_nixl() -> None:
    assert roles.transfer_engine(REPO / "locks") == "nixl"


@pytest.mark.parametrize(
    "case",
    [
        ("slurm", "serve", ["--disaggregation"], "fix: add --router-image"),
        (
            "slurm",
            "serve",
            ["--disaggregation", "--router-image", ROUTER_IMAGE, "--a2a", "deepep"],
            "--a2a deepep_v2",
        ),
        ("k8s", "elastic-smoke", ["--disaggregation"], "fix: use it with --job serve"),
        ("k8s", "serve", ["--disaggregation", "--a2a", "deepep"], "fix: --a2a deepep_v2"),
        ("k8s", "serve", ["--disaggregation", "--k8s-kind", "job"], "fix: --k8s-kind lws"),
        ("k8s", "serve", ["--disaggregation"], "fix: add --router-image"),
    ],
)
def test_what_the_roles_need_besides_the_engine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: tuple[str, str, list[str], str]
) -> None:
    target, job, flags, text = case
    locks = locks_with(tmp_path, "mooncake-transfer-engine")
    err = _refusal(capsys, tmp_path, [*_args(tmp_path, target, job), *flags, "--locks", str(locks)])
    assert err.startswith("error: --disaggregation: ") and text in err


def _lws(objects: list[dict[str, Any]], role: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == "LeaderWorkerSet" and o["metadata"]["name"].endswith(role)]
    return found


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize(
    ("distribution", "engine"), [("mooncake-transfer-engine-cuda13", "mooncake"), ("nixl-cu13", "nixl")]
)
def test_a_lock_with_an_engine_renders_both_roles_behind_the_router(
    tmp_path: Path, distribution: str, engine: str
) -> None:
    locks = locks_with(tmp_path, distribution)
    objects = load_all(render(tmp_path, *_args(tmp_path), *FLAGS, "--locks", str(locks)))
    for obj in objects:
        validate_object(obj)
    router_args = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    command = router_args["containers"][0]["command"]
    assert "--pd-disaggregation" in command and "--selector" not in command
    for role in roles.ROLES:
        lws = _lws(objects, role)
        assert lws["metadata"]["labels"]["epstack.io/role"] == role
        for template in ("leaderTemplate", "workerTemplate"):
            pod = lws["spec"]["leaderWorkerTemplate"][template]
            args = pod["spec"]["containers"][0]["args"]
            assert _flag(args, "--disaggregation-mode") == role
            assert _flag(args, "--disaggregation-transfer-backend") == engine
            bootstrap = str(BOOTSTRAP_PORT) if role == "prefill" else None
            assert _flag(args, "--disaggregation-bootstrap-port") == bootstrap
            assert pod["metadata"].get("annotations", {}).get(roles.BOOTSTRAP_ANNOTATION) == bootstrap
        # The router finds exactly the pods the role's HTTP Service routes to: its node 0s.
        (http,) = [o for o in objects if o["metadata"]["name"] == f"epstack-serve-{role}-http"]
        start = command.index(f"--{role}-selector") + 1
        selector = command[start : start + len(http["spec"]["selector"])]
        assert selector == [f"{key}={value}" for key, value in http["spec"]["selector"].items()]
        (monitor,) = [o for o in objects if o["metadata"]["name"] == f"epstack-serve-{role}-metrics"]
        assert monitor["spec"]["selector"]["matchLabels"] == http["spec"]["selector"]
    (smoke,) = [o for o in objects if o["metadata"]["name"] == "epstack-serve-smoke"]
    spec = smoke["spec"]["template"]["spec"]
    assert "http://epstack-serve-router:30000" in spec["containers"][0]["command"]
    beside = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert beside["labelSelector"]["matchLabels"]["epstack.io/role"] == "decode"
    # One model for both roles: one claim, one fetch.
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"] == [
        "epstack-serve-models"
    ]


def test_golden_prefill_decode_deepseek_v3(tmp_path: Path) -> None:
    text = render(tmp_path, *_args(tmp_path), *FLAGS, "--locks", str(REPO / "locks"))
    check_cluster_golden(text, "serve-lws-deepseek-v3-pd-2x8.yaml")


def test_printed_commands_name_each_role(tmp_path: Path) -> None:
    locks = REPO / "locks"
    text = render(tmp_path, *_args(tmp_path), "--disaggregation", "--print-command", "--locks", str(locks))
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(commands) == 4  # node 0 and 1 of each role
    assert [" --disaggregation-mode prefill " in c for c in commands] == [True, True, False, False]
    assert all("--disaggregation-transfer-backend nixl" in c for c in commands)
