"""Facts per fabric (epstack.fabric): the NCCL floor of GIN over each fabric, the base image's
environment for a pinned GIN type, and the host access a job crossing nodes needs."""

from __future__ import annotations

import pytest

from epstack.fabric import EFA, FABRICS, GDRDRV, IB
from epstack.stack import DEEPEP_V2_MIN_NCCL, EFA_GDA_MIN_NCCL, GIN_EFA_GDA, GIN_GDAKI, GIN_PROXY


@pytest.mark.parametrize(
    ("fabric", "nccl", "ok"),
    [
        ("efa", EFA_GDA_MIN_NCCL, True),
        ("efa", "2.31.10", True),
        ("efa", "2.30.7", False),
        ("ib", DEEPEP_V2_MIN_NCCL, True),
        ("ib", "2.30.7", True),
        ("ib", "2.29.9", False),
    ],
)
def test_gin_needs_the_fabrics_nccl_floor(fabric: str, nccl: str, ok: bool) -> None:
    assert FABRICS[fabric].gin_ok(nccl) is ok


@pytest.mark.parametrize(
    ("fabric", "gin_type", "env"),
    [
        ("efa", GIN_PROXY, (("FI_PROVIDER", "efa"), ("NCCL_NET_PLUGIN", "ofi"), ("NCCL_GIN_TYPE", "2"))),
        # NCCL's symmetric GIN collective kernels do not support EFA-GDA: turned off with it.
        (
            "efa",
            GIN_EFA_GDA,
            (
                ("FI_PROVIDER", "efa"),
                ("NCCL_NET_PLUGIN", "ofi"),
                ("NCCL_GIN_TYPE", "5"),
                ("NCCL_SYM_GIN_KERNELS_ENABLE", "0"),
            ),
        ),
        ("ib", GIN_PROXY, (("NCCL_GIN_TYPE", "2"),)),
        ("ib", GIN_GDAKI, (("NCCL_GIN_TYPE", "3"),)),
    ],
)
def test_the_base_image_environment_of_each_pinned_gin_type(
    fabric: str, gin_type: str, env: tuple[tuple[str, str], ...]
) -> None:
    assert FABRICS[fabric].image_env(gin_type) == env


def test_every_gin_type_a_pins_file_may_pick_has_its_host_access() -> None:
    for fabric in (EFA, IB):
        assert FABRICS[fabric.name] is fabric
        assert set(fabric.gin_host_access) == set(fabric.gin_types) == set(fabric.gin_modes)
        for gin_type in fabric.gin_types:
            access = fabric.host_access(gin_type)
            assert access.devices == (GDRDRV,) and "IPC_LOCK" in access.capabilities
            assert "GDRCopy" in access.reason and "memlock" in access.reason


def test_gdaki_maps_nic_doorbells_so_it_needs_sys_rawio() -> None:
    assert IB.host_access(GIN_GDAKI).capabilities == ("IPC_LOCK", "SYS_RAWIO")
    assert "--privileged" in IB.host_access(GIN_GDAKI).reason
    assert IB.host_access(GIN_PROXY).capabilities == ("IPC_LOCK",)
    assert EFA.host_access(GIN_EFA_GDA).capabilities == ("IPC_LOCK",)


def test_each_efa_instance_type_has_its_interface_count() -> None:
    """p5/p5e: 32 EFA interfaces, p5en 16, p6-b200 8: the device plugin advertises each one."""
    assert {
        name: EFA.instance_devices[name] for name in ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
    } == {
        "p5.48xlarge": 32,
        "p5en.48xlarge": 16,
        "p6-b200.48xlarge": 8,
    }
    assert EFA.default_instance in EFA.instance_devices
