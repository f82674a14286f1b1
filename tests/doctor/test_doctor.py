"""epstack doctor on fixture hosts: healthy ones pass, each single breakage fails its own row with its
fix, the GPU machine's shape names the missing NIC, and the module runs with the standard library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from epstack.commands.doctor import main as doctor_main
from epstack.commands.main import main
from tests.conftest import PINS, REPO, pins_variant
from tests.doctor.hosts import GPU_NO_NIC, HEALTHY_EFA, HEALTHY_IB, HEALTHY_ROCE, NO_GPU, Host, Nic, build


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("NCCL_", "EP_", "FI_", "NVSHMEM_")):
            monkeypatch.delenv(name)


def _doctor(tmp_path: Path, host: Host, *extra: str, pins: Path = PINS) -> tuple[int, dict[str, Any]]:
    root = build(tmp_path / "root", host)
    report = tmp_path / "doctor.json"
    code = main(["doctor", "--root", str(root), "--pins", str(pins), "--json", str(report), *extra])
    return code, json.loads(report.read_text())


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["component"]: row for row in report["checks"]}


def _failed(report: dict[str, Any]) -> set[str]:
    return {row["component"] for row in report["checks"] if row["verdict"] == "fail"}


@pytest.mark.parametrize("host", [HEALTHY_EFA, HEALTHY_IB, HEALTHY_ROCE], ids=["efa", "ib", "roce"])
def test_healthy_hosts_pass(tmp_path: Path, host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _doctor(tmp_path, host)
    assert (code, report["ok"], _failed(report)) == (0, True, set())
    assert {row["verdict"] for row in report["checks"]} <= {"ok", "skipped"}
    assert capsys.readouterr().out.rstrip().endswith("doctor: ok")


@pytest.mark.parametrize(
    ("change", "component", "fix"),
    [
        ({"driver": "570.172.08"}, "NVIDIA driver", "install an NVIDIA driver >= 580"),
        ({"stream_mem_ops": "0"}, "NVreg_EnableStreamMemOPs", "NVreg_EnableStreamMemOPs=1"),
        ({"registry_dwords": "RMFoo=1;"}, "PeerMappingOverride", "update-initramfs"),
        ({"open_module": False, "peermem": False}, "GPUDirect RDMA", "modprobe nvidia_peermem"),
        ({"kernel": "5.4.0-1103-aws"}, "GPUDirect RDMA", "Linux >= 5.12"),
        ({"gdrdrv": False}, "/dev/gdrdrv", "gdrdrv kernel module"),
        ({"memlock": "65536"}, "memlock ulimit", "memlock unlimited"),
        ({"hugepages": 0}, "huge pages", "vm.nr_hugepages=2560"),
        ({"nics": ()}, "RDMA NIC (EFA or IB)", "inter-node DeepEP V2 cannot run on this host"),
    ],
)
def test_each_breakage_fails_its_row_with_its_fix(
    tmp_path: Path, change: dict[str, Any], component: str, fix: str
) -> None:
    code, report = _doctor(tmp_path, HEALTHY_EFA.but(**change))
    assert code == 1 and not report["ok"]
    # Only that row fails (an EFA-less host also stops needing huge pages).
    assert _failed(report) == {component}
    assert fix in _rows(report)[component]["fix"]


def test_ib_port_down(tmp_path: Path) -> None:
    nics = (Nic(name="mlx5_0", driver="mlx5_core", state="1: DOWN"),)
    code, report = _doctor(tmp_path, HEALTHY_IB.but(nics=nics))
    assert code == 1 and _failed(report) == {"IB/RoCE devices"}
    assert "no active port: mlx5_0" in _rows(report)["IB/RoCE devices"]["found"]


def test_old_efa_driver_warns_for_efa_gda(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, HEALTHY_EFA.but(efa_version="2.13.0g"))
    row = _rows(report)["EFA devices"]
    assert code == 0 and row["verdict"] == "warn" and "aws-efa-installer" in row["fix"]
    assert "4 (rdmap16s27" in row["found"] and "driver 2.13.0g" in row["found"]


def test_gpu_host_without_nic_names_the_missing_nic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shape of the H200 machine: what is present passes, the NIC is the reason multi-node fails."""
    code, report = _doctor(tmp_path, GPU_NO_NIC)
    rows = _rows(report)
    assert code == 1 and _failed(report) == {"RDMA NIC (EFA or IB)"}
    assert rows["NVIDIA driver"]["verdict"] == "ok" and "8 GPU(s)" in rows["NVIDIA driver"]["found"]
    # Settings only GPU-initiated networking needs warn without a NIC to use them.
    for component in ("NVreg_EnableStreamMemOPs", "PeerMappingOverride", "/dev/gdrdrv"):
        assert rows[component]["verdict"] == "warn"
    assert rows["GPUDirect RDMA"]["verdict"] == "ok"  # open module on Linux 6.8: dma-buf
    assert "inter-node DeepEP V2 cannot run on this host" in capsys.readouterr().out


def test_no_gpu_says_so(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, NO_GPU)
    rows = _rows(report)
    assert code == 1 and rows["NVIDIA driver"]["found"] == "not loaded"
    assert "no GPU host" in rows["NVIDIA driver"]["fix"]
    assert rows["GPUDirect RDMA"]["verdict"] == "skipped"
    assert rows["memlock ulimit"]["found"] == "8388608 bytes"


@pytest.mark.parametrize(
    ("name", "value", "verdict"),
    [
        ("NCCL_CUMEM_ENABLE", "0", "fail"),
        ("NCCL_P2P_DISABLE", "1", "fail"),
        ("NCCL_NET_GDR_LEVEL", "LOC", "warn"),
        ("EP_DISABLE_GIN", "1", "warn"),
        ("NCCL_GIN_TYPE", "5", "fail"),  # pins DeepEP d4f41e4, which needs signals EFA-GDA lacks
        ("FI_PROVIDER", "tcp", "fail"),
    ],
)
def test_nccl_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, verdict: str
) -> None:
    monkeypatch.setenv(name, value)
    _, report = _doctor(tmp_path, HEALTHY_EFA)
    row = _rows(report)[f"env {name}"]
    assert (row["verdict"], row["found"]) == (verdict, f"{name}={value}") and row["fix"]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (
            {"NCCL_VERSION": "2.30.7", "DEEPEP_REF": "0" * 40},
            "EFA-GDA needs NCCL >= 2.31.2; pins have 2.30.7",
        ),
        ({}, "DeepEP d4f41e4 requires GIN strong and VA signals, which EFA-GDA does not have"),
    ],
)
def test_efa_gda_env_fails_below_its_nccl_or_with_a_deepep_that_cannot_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, str], why: str
) -> None:
    monkeypatch.setenv("NCCL_GIN_TYPE", "5")
    code, report = _doctor(tmp_path, HEALTHY_EFA, pins=pins_variant(tmp_path, **changes))
    row = _rows(report)["env NCCL_GIN_TYPE"]
    assert code == 1 and (row["verdict"], row["detail"]) == ("fail", why)


def test_efa_gda_env_passes_with_a_new_enough_nccl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_GIN_TYPE", "5")
    pins = pins_variant(tmp_path, NCCL_VERSION="2.31.2", DEEPEP_REF="0" * 40)  # a DeepEP that allows it
    code, report = _doctor(tmp_path, HEALTHY_EFA, pins=pins)
    assert code == 0 and "NCCL_GIN_TYPE" in _rows(report)["NCCL/EP environment"]["found"]


def test_image_cuda_12_accepts_a_570_driver(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, HEALTHY_IB.but(driver="570.172.08"), "--cuda", "12.8")
    assert code == 0 and report["image_cuda"] == "12.8"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--root", "/nonexistent/root"], "--root /nonexistent/root"),
        (["--pins", "/nonexistent.env"], "no such file"),
        (["--cuda", "13x"], "--cuda 13x: not a CUDA version"),
    ],
)
def test_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], text: str) -> None:
    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0] and "fix:" in err[0]


def test_a_pinned_cuda_version_that_is_not_one_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--pins", str(pins_variant(tmp_path, CUDA_VERSION="13x.0"))]) == 2
    assert "CUDA_VERSION 13x.0: not a CUDA version; fix:" in capsys.readouterr().err


def test_stdlib_only_entry_point(tmp_path: Path) -> None:
    """python3 -m epstack.doctor must run where pydantic, rich, jinja2 and packaging are absent."""
    root = build(tmp_path / "root", GPU_NO_NIC)
    blocked = "import sys\nfor m in ('pydantic', 'rich', 'jinja2', 'packaging'): sys.modules[m] = None\n"
    argv = ["--root", str(root), "--pins", str(PINS), "--json", str(tmp_path / "r.json")]
    run = f"import runpy\nsys.argv[1:] = {argv!r}\nrunpy.run_module('epstack.doctor', run_name='__main__')"
    code = blocked + run
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["checks"]
    assert doctor_main(["--root", str(root), "--pins", str(PINS)]) == 1


# ---- inside a pod: what the container sees -------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        # No device plugin resource: sysfs lists the NICs, /dev/infiniband has no verbs device.
        (HEALTHY_EFA.but(uverbs=False), "RDMA device files", "--fabric-devices", "modprobe ib_uverbs"),
        # The module is loaded on the node, the pod was not given the device (PR #1241's failure).
        (HEALTHY_EFA.but(gdrdrv=False), "/dev/gdrdrv", "--container-mounts=/dev/gdrdrv", "gdrdrv kernel"),
        # RoCE without hostNetwork or SR-IOV: the pod's namespace has only its own eth0.
        (HEALTHY_ROCE.but(netdevs=("eth0",)), "RDMA netdevs here", "--host-network", "ip link"),
        # enroot's read-only root: the image's cache path cannot be created (here: under a file).
        (
            HEALTHY_IB.but(extra={"var/cache": "a file, not a directory"}),
            "JIT caches writable",
            "--cache-storage host:/DIR",
            "to a writable directory",
        ),
    ],
    ids=["uverbs", "gdrdrv", "roce-netns", "jit-cache"],
)
def test_a_pod_is_told_which_render_flag_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[Host, str, str, str]
) -> None:
    host, component, pod_fix, host_fix = case
    monkeypatch.setenv("EP_JIT_CACHE_DIR", "/var/cache/deep_ep")  # the image's ENV
    code, report = _doctor(tmp_path / "pod", host.but(container=True))
    assert code == 1 and _failed(report) == {component}
    row = _rows(report)[component]
    assert pod_fix in row["fix"] and "epstack cluster render" in row["fix"]
    # The same breakage on a host names the host's fix instead.
    code, report = _doctor(tmp_path / "host", host)
    assert (
        host_fix in _rows(report)[component]["fix"]
        and "cluster render" not in _rows(report)[component]["fix"]
    )


def test_a_pod_with_what_gin_needs_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `cluster render` gives a RoCE pod: devices, its netdevs (hostNetwork), a writable cache."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("EP_JIT_CACHE_DIR", "/var/cache/epstack-jit/deep_ep")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/var/cache/epstack-jit/triton")
    code, report = _doctor(tmp_path, HEALTHY_ROCE)
    rows = _rows(report)
    assert code == 0 and rows["RDMA netdevs here"]["verdict"] == "ok"
    assert "mlx5_0: ens1np0" in rows["RDMA netdevs here"]["found"]
    assert rows["RDMA device files"]["found"] == "uverbs0, uverbs1, uverbs2, uverbs3"
    assert "TRITON_CACHE_DIR=/var/cache/epstack-jit/triton" in rows["JIT caches writable"]["found"]


def test_a_missing_gdrdrv_module_is_the_hosts_to_fix_even_in_a_pod(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, HEALTHY_EFA.but(gdrdrv=False, gdrdrv_module=False, container=True))
    assert code == 1 and "install GDRCopy's gdrdrv kernel module" in _rows(report)["/dev/gdrdrv"]["fix"]
