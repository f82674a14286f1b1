"""The variables a start judges, as data: each with its source and verdict; the environment the start was
given, rebuilt from what hold-env held; the differences from the build's values, refused ones first; and
hold-env's file of the build's values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epstack.guard.environment import (
    HELD,
    JUDGED,
    REFUSED,
    VARIABLES,
    deciding,
    differences,
    given,
    held_file_text,
    variable,
)
from epstack.jit.probe import STEERING

# glibc 2.39's sysdeps/generic/unsecvars.h, as the table must hold it whole (GLIBC_TUNABLES comes in
# through GLIBC_TUNABLES_ENVVAR).
UNSECVARS = [
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
]


def test_every_variable_is_listed_once_with_its_source_and_what_it_does() -> None:
    names = [v.name for v in VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.source and v.effect for v in VARIABLES)
    glibc = [v.name for v in VARIABLES if v.source.startswith("glibc")]
    assert glibc == UNSECVARS, "glibc's own list, whole and in its order"


def test_what_runs_code_is_refused_what_only_names_a_folder_or_prints_is_not() -> None:
    refused = {v.name for v in REFUSED}
    brief = "LD_AUDIT LD_PRELOAD LD_LIBRARY_PATH PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE"
    brief += " PYTHONPYCACHEPREFIX PYTHONINSPECT PYTHONEXECUTABLE PYTHONSAFEPATH"
    assert set(brief.split()) <= refused
    assert {"GCONV_PATH", "GLIBC_TUNABLES", "BASH_ENV", "BASH_FUNC_*", "PATH", "EPSTACK_REPORTS"} <= refused
    assert {"TMPDIR", "TZDIR", "LD_DEBUG", "HOSTALIASES"}.isdisjoint(refused)
    assert {v.name for v in JUDGED if v.verdict == "full guard"} == {
        *STEERING,
        *(f"NCCL_{kind}_PLUGIN" for kind in ("NET", "TUNER", "PROFILER", "ENV")),
        "EPSTACK_PINS",
        "EPSTACK_LOCKS",
    }


def test_a_prefix_names_every_variable_so_named() -> None:
    found = variable("BASH_FUNC_epstack%%")
    assert found is not None and found.name == "BASH_FUNC_*"
    assert variable("BASH_FUNCTION") is None and variable("TMPDIR") is None
    assert variable("LD_PRELOAD") is not None and variable("LD_PRELOADX") is None


def test_the_given_environment_is_rebuilt_from_what_was_held() -> None:
    started = {
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib",  # the build's value, kept by hold-env
        f"{HELD}LD_LIBRARY_PATH": "+/host/lib",
        f"{HELD}LD_AUDIT": "+/tmp/audit.so",
        "PYTHONSAFEPATH": "1",
        f"{HELD}PYTHONSAFEPATH": "-",  # given unset, the build's value put in its place
        "HOME": "/root",
    }
    assert given(started) == {"LD_LIBRARY_PATH": "/host/lib", "LD_AUDIT": "/tmp/audit.so", "HOME": "/root"}


def test_the_differences_name_the_value_and_the_builds_refused_ones_first() -> None:
    built = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib", "PATH": "/usr/bin", "CC": "gcc"}
    now = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib", "PATH": "/usr/bin", "CC": "clang", "LD_AUDIT": "/a.so"}
    found = differences(now, built)
    assert [(d.name, d.variable.verdict) for d in found] == [("LD_AUDIT", "refused"), ("CC", "full guard")]
    assert str(found[0]) == "LD_AUDIT=/a.so, the build had (unset)"
    assert str(differences({}, {"PATH": "/usr/bin"})[0]) == "PATH=(unset), the build had /usr/bin"
    assert differences({"TMPDIR": "/scratch/job"}, {}) == [], "ignored: Slurm sets one per job"


def test_the_deciding_variables_are_those_judged_and_set() -> None:
    env = {"LD_PRELOAD": "/hook.so", "HOME": "/root", "NCCL_NET_PLUGIN": "ofi", "BASH_FUNC_x%%": "() { :; }"}
    assert deciding(env) == {"LD_PRELOAD": "/hook.so", "NCCL_NET_PLUGIN": "ofi", "BASH_FUNC_x%%": "() { :; }"}
    assert deciding({"EPSTACK_CUDA_STUB": "/stubs/libcuda.so", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_the_driver_stubs_folder_is_dropped_from_every_place_in_the_path(tmp_path: Path) -> None:
    stub = tmp_path / "libcuda.so"
    stub.write_bytes(b"\0")
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "libcuda.so.1").symlink_to(stub)
    path = f"{tmp_path / 'one'}:/usr/lib:{tmp_path / 'two'}:/opt/lib"
    env = {"EPSTACK_CUDA_STUB": str(stub), "LD_LIBRARY_PATH": path}
    assert deciding(env) == {"LD_LIBRARY_PATH": "/usr/lib:/opt/lib"}


def test_hold_envs_file_lists_every_refused_variable_with_the_builds_value() -> None:
    built = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib", "PATH": "/usr/bin", "CC": "gcc"}
    built["BASH_FUNC_f%%"] = "x"
    entries = held_file_text(built).split(b"\0")
    assert entries[-1] == b"", "each entry NUL-terminated"
    text = [entry.decode() for entry in entries[:-1]]
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib" in text and "PATH=/usr/bin" in text
    assert "LD_AUDIT" in text and "PYTHONPATH" in text, "unset at build: the name alone"
    assert "BASH_FUNC_f%%=x" in text and "BASH_FUNC_*" in text
    assert not any(entry.startswith(("CC", "TMPDIR")) for entry in text), "only the refused ones"
    names = {re.split("[=]", entry)[0] for entry in text} - {"BASH_FUNC_f%%"}
    assert names == {v.name for v in REFUSED}


@pytest.mark.parametrize("value", ["a=b", "", "\u00e9t\u00e9"])
def test_a_value_is_written_as_given(value: str) -> None:
    assert f"PATH={value}".encode() + b"\0" in held_file_text({"PATH": value})
