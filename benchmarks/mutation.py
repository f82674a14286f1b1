"""Mutation testing of the modules that decide a verdict (`make mutation`), with mutmut.

Each module in benchmarks/mutation/modules.toml is mutated on its own, in build/mutation/<module>/,
and mutmut runs only the module's own tests, and of those only the ones that reach the mutated
function. A survivor listed in benchmarks/mutation/equivalent.toml (same module, function and
change) is equivalent: it changes no behaviour, for the reason given there. The score of a module
is (killed + timed out) / (mutants - equivalent). Writes benchmarks/results/mutation.json (or --out; the
modules of this run replace their earlier entries); exits 1 when a module scores under --floor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODULES = REPO / "benchmarks" / "mutation" / "modules.toml"
EQUIVALENT = REPO / "benchmarks" / "mutation" / "equivalent.toml"
RESULTS = REPO / "benchmarks" / "results" / "mutation.json"
WORK = REPO / "build" / "mutation"
# What the tests read besides epstack/ and tests/: resources/ links into these (mutmut copies only
# files it walks, and os.walk does not enter linked folders).
ALSO_COPY = [
    "epstack/resources/images/", "epstack/resources/scripts/", "images/", "scripts/", "locks/",
    "buildspecs/", "benchmarks/", "pins.env", "constraints.txt", "README.md", "Makefile",
]  # fmt: skip
# mutmut's exit codes per mutant (mutmut/stats.py), folded into what the score counts.
# A mutant whose tests crash (SIGSEGV, as a NULL written through) made them fail: killed.
OUTCOME = {1: "killed", 3: "killed", -11: "killed", 0: "survived", 5: "no tests", 33: "no tests",
           36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout"}  # fmt: skip
DETECTED = {"killed", "timeout"}
NOT_DETECTED = ("survived", "no tests", "suspicious")


@dataclass(frozen=True)
class Survivor:
    name: str
    function: str
    change: str

    def key(self, module: str) -> tuple[str, str, str]:
        return (module, self.function, self.change)


def mutmut_config(module: str, tests: list[str]) -> str:
    """The [tool.mutmut] table that mutates `module` alone and selects its own tests."""
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["epstack/"]\n'
        f"only_mutate = [{json.dumps(module)}]\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        f"also_copy = {json.dumps(ALSO_COPY)}\n"
    )


def prepare(module: str, tests: list[str]) -> Path:
    """build/mutation/<module>/: links to the checkout, and a pyproject.toml that configures mutmut."""
    work = WORK / module.removesuffix(".py").replace("/", ".")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in {"pyproject.toml", "build", ".git", ".venv", ".cache"}:
            (work / entry.name).symlink_to(entry)
    pyproject = (REPO / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + mutmut_config(module, tests))
    return work


def mutmut(work: Path, *args: str, log: Path | None = None) -> str:
    command = [str(Path(sys.executable).parent / "mutmut"), *args]
    # One OpenMP thread: mutmut forks its workers after torch is imported (the smoke's tests), and a
    # fork of a process with an OpenMP pool hangs in torch's next parallel op until the timeout.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    if log is None:
        return subprocess.run(command, cwd=work, env=env, check=True, capture_output=True, text=True).stdout
    with log.open("w") as out:
        subprocess.run(command, cwd=work, env=env, check=True, stdout=out, stderr=subprocess.STDOUT)
    return ""


def survivor(work: Path, name: str) -> Survivor:
    """The function a mutant changes and its change, as `-old`/`+new` lines (stable across runs,
    unlike mutmut's numbering)."""
    function = re.sub(r"__mutmut_\d+$", "", name.rsplit(".", 1)[1]).removeprefix("x")
    function = function.replace("ǁ", ".").strip("_.")
    diff = mutmut(work, "show", name).splitlines()
    change = [line for line in diff if line[:1] in "-+" and not line.startswith(("---", "+++"))]
    return Survivor(name=name, function=function, change="\n".join(change))


def run_module(module: str, tests: list[str], equivalent: dict[tuple[str, str, str], str]) -> dict[str, Any]:
    """Mutate `module` alone, run its own tests on each mutant, and score it."""
    work = prepare(module, tests)
    start = time.monotonic()
    mutmut(work, "run", log=work / "mutmut.log")
    seconds = round(time.monotonic() - start, 1)
    meta = json.loads((work / "mutants" / f"{module}.meta").read_text())
    outcomes = {name: OUTCOME.get(code, "suspicious") for name, code in meta["exit_code_by_key"].items()}
    survivors = [survivor(work, name) for name, kind in sorted(outcomes.items()) if kind not in DETECTED]
    explained = [s for s in survivors if s.key(module) in equivalent]
    alive = [s for s in survivors if s.key(module) not in equivalent]
    detected = len(outcomes) - len(survivors)
    counted = len(outcomes) - len(explained)
    return {
        "tests": tests,
        "mutants": len(outcomes),
        "killed": detected,
        "equivalent": len(explained),
        "not_killed": {kind: sum(o == kind for o in outcomes.values()) for kind in NOT_DETECTED},
        "score": round(detected / counted, 4) if counted else 1.0,
        "seconds": seconds,
        "survivors": [{"function": s.function, "change": s.change} for s in alive],
    }


def load_equivalent() -> dict[tuple[str, str, str], str]:
    entries = tomllib.loads(EQUIVALENT.read_text()).get("equivalent", [])
    return {(e["module"], e["function"], e["change"].strip("\n")): e["why"] for e in entries}


def revision(paths: list[str]) -> str:
    """HEAD's short hash, with `+changes` where `paths` differ from it (a run on uncommitted work)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout

    changed = git("status", "--porcelain", "--", *paths).strip()
    return git("rev-parse", "--short", "HEAD").strip() + ("+changes" if changed else "")


def summarize(results: dict[str, dict[str, Any]], floor: float) -> dict[str, Any]:
    modules = dict(sorted(results.items()))
    return {
        "command": "make mutation (python benchmarks/mutation.py [MODULE ...])",
        "tool": f"mutmut {metadata.version('mutmut')}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "floor": floor,
        "seconds": round(sum(m["seconds"] for m in modules.values()), 1),
        "below_floor": [m for m, e in modules.items() if e["score"] < floor],
        "modules": modules,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all of modules.toml)")
    parser.add_argument("--floor", type=float, default=0.9, help="lowest score that passes")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file (default: %(default)s)")
    args = parser.parse_args()
    configured = tomllib.loads(MODULES.read_text())["modules"]
    unknown = [m for m in args.modules if m not in configured]
    if unknown:
        parser.error(f"{unknown[0]} is not in {MODULES.relative_to(REPO)}")
    equivalent = load_equivalent()
    results = json.loads(args.out.read_text())["modules"] if args.out.exists() else {}
    for module in args.modules or list(configured):
        tests = configured[module]["tests"]
        entry = run_module(module, tests, equivalent)
        entry["revision"] = revision([module, *tests])
        results[module] = entry
        args.out.write_text(json.dumps(summarize(results, args.floor), indent=2) + "\n")  # after each module
        print(f"{module}: {entry['score']:.1%} of {entry['mutants']} mutants ({entry['equivalent']} "
              f"equivalent), {len(entry['survivors'])} alive, {entry['seconds']} s", flush=True)  # fmt: skip
    return 1 if summarize(results, args.floor)["below_floor"] else 0


if __name__ == "__main__":
    sys.exit(main())
