"""The GPU phases build the commands the H200 runs, with the environment each sets (no GPU here: a
fake python3 records them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.elastic.run_h200 import main
from tests.benchmarks_run_h200.conftest import REPO, FakeHost, fake_host


@pytest.mark.parametrize(
    ("phase", "name", "extra"),
    [
        ("smoke", "smoke-2rank", []),
        ("smoke-topk0", "smoke-2rank-topk0",
         ["--buffer-num-topk", "0", "--upstream-tests", "{root}/opt/src/DeepEP",
          "--upstream-args=--test-first-only", "--min-bandwidth-ratio", "0.97"]),
        ("upstream", "test_ep-2rank-144",
         ["--upstream-only", "--upstream-tests", "{root}/opt/src/DeepEP", "--upstream-timeout", "560"]),
    ],
)  # fmt: skip
def test_the_smoke_phases(bare: FakeHost, phase: str, name: str, extra: list[str]) -> None:
    rank0 = bare.root / "tmp" / name / "upstream" / "rank0.log"
    rank0.parent.mkdir(parents=True)
    rank0.write_text("Testing with mode 0\n")
    main([phase], bare.host)
    expected = ["-m", "epstack.smoke", "elastic", "--gpus-per-node", "2", "--timeout", "300",
                *(arg.format(root=bare.root) for arg in extra),
                "--run-dir", f"{bare.root}/tmp/{name}", "--json", f"{bare.host.out}/{name}.json"]  # fmt: skip
    assert bare.argvs() == [expected]
    assert f"+ {bare.host.python} {' '.join(expected)}" in bare.notes()
    assert (bare.root / "tmp" / f"{name}.console").read_text().startswith("ran -m epstack.smoke")
    assert (bare.host.out / f"{name}.test_ep.log").read_text() == "Testing with mode 0\n"


def test_nproc_and_upstream_timeout_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    host = fake_host(tmp_path, NPROC="8", UPSTREAM_TIMEOUT="900")
    main(["upstream"], host.host)
    [argv] = host.argvs()
    assert argv[argv.index("--gpus-per-node") + 1] == "8"
    assert argv[argv.index("--upstream-timeout") + 1] == "900"
    assert argv[argv.index("--json") + 1].endswith("/test_ep-8rank-144.json")


def test_the_run_environment_reaches_every_phase(bare: FakeHost) -> None:
    main(["smoke"], bare.host)
    [call] = bare.calls()
    assert call["env"]["EP_JIT_CACHE_DIR"] == "/tmp/ep-jit-cache"
    assert call["env"]["EP_DISABLE_GIN"] == "1"


def test_hang_sets_the_hang_stage_and_counts_workers_left(bare: FakeHost) -> None:
    main(["hang"], bare.host)
    [call] = bare.calls()
    assert call["env"]["EPSTACK_SMOKE_HANG_STAGE"] == "buffer"
    assert call["env"]["EPSTACK_SMOKE_HANG_RANK"] == "1"
    assert call["argv"][5:9] == ["--timeout", "30", "--skip-bench", "--run-dir"]
    assert any(
        line.endswith("; worker processes left: 0") and "] hang: exit 0 after" in line
        for line in bare.notes()
    )


def test_guard_runs_both_layers_with_the_hosts_torch(bare: FakeHost) -> None:
    main(["guard"], bare.host)
    pins = bare.root / "tmp" / "pins-h200.env"
    original = (REPO / "pins.env").read_text().splitlines()
    written = pins.read_text().splitlines()
    assert written == [
        ("TORCH_VERSION=2.11.0" if line.startswith("TORCH_VERSION=") else line) for line in original
    ]
    assert [argv[argv.index("--layer") + 1] for argv in bare.argvs()] == ["deepep", "all"]
    assert all(argv[argv.index("--pins") + 1] == str(pins) for argv in bare.argvs())


def test_torchrun_starts_two_nodes_of_one_gpu_each(bare: FakeHost) -> None:
    main(["torchrun"], bare.host)
    calls = sorted(bare.calls(), key=lambda call: call["argv"][call["argv"].index("--node-rank") + 1])
    assert [call["env"]["CUDA_VISIBLE_DEVICES"] for call in calls] == ["0", "1"]
    assert [call["argv"][call["argv"].index("--run-dir") + 1] for call in calls] == [
        f"{bare.root}/tmp/smoke-node0", f"{bare.root}/tmp/smoke-node1",
    ]  # fmt: skip
    assert any(line.endswith("] torchrun: node 0 exit 0, node 1 exit 0") for line in bare.notes())


def test_warm_takes_shards_and_its_timeout_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    host = fake_host(tmp_path, SHARDS="3", WARM_TIMEOUT="40")
    main(["warm"], host.host)
    [argv] = host.argvs()
    assert argv[:3] == ["-m", "benchmarks.elastic.warm_jit_cache", f"{host.root}/opt/src/DeepEP"]
    assert argv[argv.index("--shards") + 1 :][:3] == ["3", "--timeout", "40"]
