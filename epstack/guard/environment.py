"""The environment variables that decide what a container runs, with their sources, and how a start
judges each against the value its build recorded.

- refused: it changes which code runs (a library the loader maps, a module or bytecode Python imports,
  a file the entrypoint's own shell runs) or which programs and record the start itself uses; any value
  other than the build's (set, unset or changed) stops a strict start, named.
- full guard: it decides what some of the guard's rows find (the JITs' compilers, NCCL's plugins, the
  pins and locks judged against); the build's record cannot vouch for another value, the full guard
  judges it.
- ignored: on glibc's list, but it only prints, resolves host names, or names temporary and time-zone
  folders (Slurm sets TMPDIR per job): listed so the list is glibc's whole.

The image's entrypoint is `hold-env` (scripts/image/hold-env.c, static: no loader runs before it). It
reads HELD_FILE, the build's values of the refused variables as `--record` wrote them, and holds each
variable whose value differs: the start's shell, the JIT install and the guard run with the build's
value, the value given is kept in EPSTACK_HELD_<NAME> ("+value", or "-" for unset), and the guard
names it here. `hold-env --restore` puts them back for the command in warn and off modes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from epstack.jit.probe import STEERING

Verdict = Literal["refused", "full guard", "ignored"]

GLIBC = "glibc sysdeps/generic/unsecvars.h (UNSECURE_ENVVARS, dropped for setuid programs)"
LD_SO = "ld.so(8)"
PYTHON = "python3.12 --help-env"
SITE = "python(1), the site module"
BASH = "bash(1): read by the entrypoint's own shell"
EPSTACK = "epstack: what the guard reads"


@dataclass(frozen=True)
class Variable:
    """One variable, or every variable whose name starts with `name` when it ends in "*"."""

    name: str
    verdict: Verdict
    source: str
    effect: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.name[:-1]) if self.name.endswith("*") else key == self.name


VARIABLES = (
    Variable("GCONV_PATH", "refused", GLIBC, "iconv's modules: shared objects glibc loads"),
    Variable("GETCONF_DIR", "refused", GLIBC, "getconf runs the programs found there"),
    Variable("GLIBC_TUNABLES", "refused", GLIBC, "the loader's and malloc's tunables, hwcaps among them"),
    Variable("HOSTALIASES", "ignored", GLIBC, "host name aliases"),
    Variable("LD_AUDIT", "refused", GLIBC, "audit libraries, loaded into every process first"),
    Variable("LD_DEBUG", "ignored", GLIBC, "the loader's messages"),
    Variable("LD_DEBUG_OUTPUT", "ignored", GLIBC, "where the loader's messages go"),
    Variable("LD_DYNAMIC_WEAK", "refused", GLIBC, "weak symbols interpose: other code is called"),
    Variable("LD_HWCAP_MASK", "refused", GLIBC, "which hardware-specific library builds load"),
    Variable("LD_LIBRARY_PATH", "refused", GLIBC, "folders searched for libraries before the cache"),
    Variable("LD_ORIGIN_PATH", "refused", GLIBC, "what $ORIGIN in a library's search path means"),
    Variable("LD_PRELOAD", "refused", GLIBC, "libraries loaded into every process first"),
    Variable("LD_PROFILE", "refused", GLIBC, "a library profiled: its calls go through the loader"),
    Variable("LD_SHOW_AUXV", "ignored", GLIBC, "prints the auxiliary vector"),
    Variable("LD_USE_LOAD_BIAS", "refused", GLIBC, "where libraries are mapped"),
    Variable("LOCALDOMAIN", "ignored", GLIBC, "the resolver's search domains"),
    Variable("LOCPATH", "refused", GLIBC, "locale data glibc parses"),
    Variable("MALLOC_TRACE", "ignored", GLIBC, "a trace file, only where a program calls mtrace()"),
    Variable("NIS_PATH", "ignored", GLIBC, "NIS+ lookups"),
    Variable("NLSPATH", "refused", GLIBC, "message catalogs, format strings included"),
    Variable("RESOLV_HOST_CONF", "ignored", GLIBC, "the resolver's host.conf"),
    Variable("RES_OPTIONS", "ignored", GLIBC, "the resolver's options"),
    Variable("TMPDIR", "ignored", GLIBC, "the temporary folder (Slurm sets one per job)"),
    Variable("TZDIR", "ignored", GLIBC, "time-zone data"),
    Variable("LD_ASSUME_KERNEL", "refused", LD_SO, "which library versions load"),
    Variable("LD_BIND_NOT", "refused", LD_SO, "symbols resolved anew at every call"),
    Variable("LD_TRACE_LOADED_OBJECTS", "refused", LD_SO, "lists libraries instead of running anything"),
    Variable("PYTHONPATH", "refused", PYTHON, "folders imported from before the venv"),
    Variable("PYTHONHOME", "refused", PYTHON, "another standard library"),
    Variable("PYTHONPLATLIBDIR", "refused", PYTHON, "another platform library folder"),
    Variable("PYTHONSTARTUP", "refused", PYTHON, "a file run by every interactive interpreter"),
    Variable("PYTHONINSPECT", "refused", PYTHON, "an interactive prompt after the script"),
    Variable("PYTHONSAFEPATH", "refused", PYTHON, "whether the script's folder is imported from first"),
    Variable("PYTHONNOUSERSITE", "refused", PYTHON, "whether the user's site-packages is imported"),
    Variable("PYTHONPYCACHEPREFIX", "refused", PYTHON, "bytecode read from another tree"),
    Variable("PYTHONOPTIMIZE", "refused", PYTHON, "other bytecode files, asserts left out"),
    Variable("PYTHONBREAKPOINT", "refused", PYTHON, "a callable imported and called by breakpoint()"),
    Variable("PYTHONWARNINGS", "refused", PYTHON, "a warning category's module is imported"),
    Variable("PYTHONUSERBASE", "refused", SITE, "the user's site-packages"),
    Variable("PYTHONEXECUTABLE", "refused", SITE, "sys.executable (macOS): refused everywhere"),
    Variable("BASH_ENV", "refused", BASH, "a file every non-interactive bash runs first"),
    Variable("BASH_FUNC_*", "refused", BASH, "exported functions, which replace commands"),
    Variable("SHELLOPTS", "refused", BASH, "shell options (xtrace runs PS4's substitutions)"),
    Variable("PATH", "refused", EPSTACK, "which programs run: python, epstack, the command"),
    Variable("VIRTUAL_ENV", "refused", EPSTACK, "the Python the epstack command runs"),
    Variable("VLLM_NCCL_SO_PATH", "refused", "vllm/envs.py", "the libnccl vLLM loads (its deepep_v2 gate's)"),
    Variable("EPSTACK_HOME", "refused", EPSTACK, "where the start finds epstack"),
    Variable("EPSTACK_REPORTS", "refused", EPSTACK, "where the start reads the build's record"),
    *(
        Variable(key, "full guard", "epstack.jit.probe.STEERING", "which compiler a JIT runs")
        for key in STEERING
    ),
    *(
        Variable(f"NCCL_{kind}_PLUGIN", "full guard", "NCCL's environment variables", "a plugin NCCL loads")
        for kind in ("NET", "TUNER", "PROFILER", "ENV")
    ),
    Variable("EPSTACK_PINS", "full guard", EPSTACK, "the pins judged against"),
    Variable("EPSTACK_LOCKS", "full guard", EPSTACK, "the locks judged against"),
)
REFUSED = tuple(v for v in VARIABLES if v.verdict == "refused")
JUDGED = tuple(v for v in VARIABLES if v.verdict != "ignored")

HELD = "EPSTACK_HELD_"  # hold-env's prefix for a value it held: "+value", or "-" where it was unset
HELD_FILE = "held-variables"  # beside the records: what hold-env compares with


def variable(key: str, among: Iterable[Variable] = JUDGED) -> Variable | None:
    return next((v for v in among if v.matches(key)), None)


def given(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the start was given: each variable hold-env held put back (its build value
    replaced by the one given, or removed where none was), the holding's own variables left out."""
    out = {key: value for key, value in env.items() if not key.startswith(HELD)}
    for key, value in env.items():
        if key.startswith(HELD):
            name = key[len(HELD) :]
            if value.startswith("+"):
                out[name] = value[1:]
            else:
                out.pop(name, None)
    return out


def deciding(env: Mapping[str, str]) -> dict[str, str]:
    """The judged variables as set in `env` (unset ones absent); LD_LIBRARY_PATH without the driver
    stub's own folder (cuda-stub.sh makes a new one each time, and a driver, when there is one, is
    checked live)."""
    found = {key: value for key, value in env.items() if variable(key) is not None}
    stub = env.get("EPSTACK_CUDA_STUB")
    if stub and "LD_LIBRARY_PATH" in found:
        target = os.path.realpath(stub)
        kept = [
            p for p in found["LD_LIBRARY_PATH"].split(":") if os.path.realpath(f"{p}/libcuda.so.1") != target
        ]
        found["LD_LIBRARY_PATH"] = ":".join(kept)
    return found


@dataclass(frozen=True, kw_only=True)
class Difference:
    """A judged variable whose value differs from the build's."""

    name: str
    now: str | None  # None: unset
    built: str | None
    variable: Variable

    def __str__(self) -> str:
        return f"{self.name}={_shown(self.now)}, the build had {_shown(self.built)}"


def _shown(value: str | None) -> str:
    return "(unset)" if value is None else value


def differences(now: Mapping[str, str], built: Mapping[str, str]) -> list[Difference]:
    """Each judged variable set otherwise in `now` (deciding() of the given environment) than `built`
    (the record's), refused ones first."""
    found = [
        Difference(name=key, now=now.get(key), built=built.get(key), variable=judged)
        for key in sorted(now.keys() | built.keys())
        if now.get(key) != built.get(key) and (judged := variable(key)) is not None
    ]
    return sorted(found, key=lambda d: d.variable.verdict != "refused")


def held_file_text(built: Mapping[str, str]) -> bytes:
    """HELD_FILE for hold-env: NUL-terminated entries, NAME=value where the build set it, NAME where it
    did not, a prefix ending in "*" as itself (any variable so named is held)."""
    entries: list[str] = []
    for refused in REFUSED:
        if refused.name.endswith("*"):
            entries += [f"{key}={value}" for key, value in sorted(built.items()) if refused.matches(key)]
            entries.append(refused.name)
        else:
            value = built.get(refused.name)
            entries.append(refused.name if value is None else f"{refused.name}={value}")
    return b"".join(entry.encode("utf-8", "surrogateescape") + b"\0" for entry in entries)


def held_file(folder: Path) -> Path:
    return folder / HELD_FILE
