"""epstack pins lock: the committed locks are fresh, a pins change names exactly the stale ones, a relock
resolves only what it must (with uv's real answers, recorded in the committed locks), and uv itself
against the index for --upgrade."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from epstack.commands.main import main
from epstack.errors import BadInput, CommandFailed
from epstack.layers import venv_locks
from epstack.pins.load import load_pins
from epstack.python.lock import Move, Stale, lock_inputs, lock_specs, relock, stale_locks, write_locks
from epstack.python.lockfile import entry_text, parse_lock, read_lock, render_lock
from epstack.python.resolve import Pinned, Resolution, Unresolvable
from epstack.stack import CUDA_RELEASE_WHEELS, DEEP_EP_PROVIDERS, ImageTarget
from tests.conftest import PINS, REPO, pins_variant
from tests.pins.test_pins import line_of

LOCKS = REPO / "locks"
NIXL = "nixl==1.5.1 nixl-cu13==1.5.1"  # the sglang lock's requirements beside SGLang (pins.env NIXL_VERSION)


def committed(name: str) -> Resolution:
    lock = read_lock(LOCKS, name)
    assert lock is not None
    return lock.resolution


def test_the_committed_locks_are_fresh_and_hashed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pins", "lock", "--check", "--pins", str(PINS), "--locks", str(LOCKS)]) == 0
    assert "every lock is fresh" in capsys.readouterr().out
    for spec in lock_specs(load_pins(PINS)):
        resolution = committed(spec.name)
        assert resolution.packages and all(p.hashes for p in resolution.packages), spec.name
        assert all(h.startswith("sha256:") for p in resolution.packages for h in p.hashes)
    assert set(venv_locks("sglang")) == {"base", "sglang"}


def test_the_locks_hold_the_pins_and_no_other_deep_ep() -> None:
    pins = load_pins(PINS)
    base, sglang = committed("base").versions, committed("sglang").versions
    for name, version in pins.base_packages.items():
        assert base[name] == version and sglang[name] == version
    assert base["uv"] == pins.uv_version and "pip" in base, "the venv's own tools are locked too"
    assert sglang["sglang"] == pins.sglang_version
    assert not set(DEEP_EP_PROVIDERS) & {*base, *sglang}
    shared = set(base) & set(sglang)
    assert {name: sglang[name] for name in shared} == {name: base[name] for name in shared}, (
        "nothing in the base lock moves in the sglang lock"
    )


def test_the_committed_locks_hold_one_cuda() -> None:
    """Every toolkit wheel the CUDA release versions is at the pinned minor; no other major's wheel."""
    pins = load_pins(PINS)
    for name in ("base", "sglang"):
        versions = committed(name).versions
        held = {wheel: versions[wheel] for wheel in pins.wheels.release if wheel in versions}
        assert held and all(version.startswith("13.0.") for version in held.values()), (name, held)
        assert not [wheel for wheel in versions if wheel.endswith("-cu12")], name
    assert committed("sglang").version("nvidia-cuda-nvcc") == "13.0.88", "humming-kernels' nvcc, held at 13.0"


def test_an_exception_lifts_one_wheels_constraint_and_the_header_says_so(tmp_path: Path) -> None:
    pins = load_pins(pins_variant(tmp_path, CUDA_MINOR_EXCEPTIONS="nvidia-cuda-nvcc"))
    (base, _, sglang, vllm) = lock_specs(pins)
    assert (
        "nvidia-cuda-nvcc==13.0.*" not in sglang.constraints and "nvidia-nvvm==13.0.*" in sglang.constraints
    )
    assert base.constraints == sglang.constraints == vllm.constraints
    stale = {entry.name: entry.reasons for entry in stale_locks(pins, LOCKS)}
    assert "constraints:" in stale["base"][0] and set(stale) == {"base", "deepep-build", "sglang", "vllm"}


def test_a_wheel_of_another_cuda_major_is_refused_naming_who_requires_it(tmp_path: Path) -> None:
    """uv's answer holds a cu12 wheel nobody told the lock about: nothing is written, the line says
    which distribution brings it and how to exclude it."""

    class ForeignUv(RecordedUv):
        def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
            answer = super().__call__(requirements, target, **options)
            if options["name"] != "sglang":
                return answer
            extra = Pinned(name="nvidia-foo-cu12", version="1.0", via=("flashinfer-python",))
            return Resolution(packages=(*answer.packages, extra), text=answer.text)

    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    pins = load_pins(pins_variant(tmp_path, SGLANG_VERSION="0.5.22"))
    with pytest.raises(
        CommandFailed, match=r"nvidia-foo-cu12 \(required by flashinfer-python\) into a CUDA 13"
    ):
        relock(pins, locks, resolver=ForeignUv(), installable=no_install_check)
    assert (locks / "sglang.txt").read_text() == (LOCKS / "sglang.txt").read_text()


def test_another_sglang_version_names_the_stale_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A temporary copy of the pins: only the sglang lock is stale, and the line says why."""
    pins = pins_variant(tmp_path, SGLANG_VERSION="0.5.22")
    assert main(["pins", "lock", "--check", "--pins", str(pins), "--locks", str(LOCKS)]) == 1
    stale = [line for line in capsys.readouterr().out.splitlines() if "stale" in line]
    assert stale == [f"{LOCKS}/sglang.txt: stale (requires: sglang==0.5.23 {NIXL} -> sglang==0.5.22 {NIXL})"]


def test_a_base_pin_makes_every_lock_above_it_stale(tmp_path: Path) -> None:
    pins = load_pins(pins_variant(tmp_path, TORCH_VERSION="2.13.0"))
    stale = {entry.name: entry.reasons for entry in stale_locks(pins, LOCKS)}
    assert set(stale) == {"base", "deepep-build", "sglang", "vllm"}
    assert "requires: torch==2.14.1" in stale["base"][0] and "-> torch==2.13.0" in stale["base"][0]
    assert stale["sglang"] == stale["vllm"] == ("base.txt is stale",)


def test_an_edited_lock_is_stale(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    text = (locks / "base.txt").read_text()
    (locks / "base.txt").write_text(text.replace("# inputs-sha256: ", "# inputs-sha256: 0"))
    assert [entry.name for entry in stale_locks(load_pins(PINS), locks)] == [
        "base", "deepep-build", "sglang", "vllm",
    ]  # fmt: skip
    (locks / "sglang.txt").unlink()
    stale = {entry.name: entry.reasons for entry in stale_locks(load_pins(PINS), locks)}
    assert stale["sglang"] == ("missing",)


def test_an_unreadable_lock_is_one_line_of_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock that is not UTF-8 (or a FIFO) is exit 2 naming the file, not a traceback or a hang."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    (locks / "base.txt").write_bytes((locks / "base.txt").read_bytes() + "# caf\xe9\n".encode("latin-1"))
    assert main(["pins", "lock", "--check", "--pins", str(PINS), "--locks", str(locks)]) == 2
    assert f"{locks / 'base.txt'}: not UTF-8 text" in capsys.readouterr().err
    (locks / "base.txt").unlink()
    os.mkfifo(locks / "base.txt")
    assert main(["pins", "lock", "--check", "--pins", str(PINS), "--locks", str(locks)]) == 2
    assert "a FIFO" in capsys.readouterr().err


def torch_alone(nccl: str = "2.30.7", wheel: str = "nvidia-nccl-cu13") -> Resolution:
    """uv's answer for torch==2.14.1 alone: the NCCL it pins itself (PyPI's torch 2.14.1: 2.30.7)."""
    return Resolution(
        packages=(
            Pinned(name="torch", version="2.14.1", via=(), hashes=()),
            Pinned(name=wheel, version=nccl, via=("torch",), hashes=()),
        ),
        text="",
    )


class RecordedUv:
    """Answers as uv answered (the committed locks are its output; torch alone, torch_alone's) and
    records every call."""

    def __init__(self, fail: str = "", alone: Resolution | None = None) -> None:
        self.calls: list[dict[str, object]] = []
        self.fail = fail
        self.alone = alone or torch_alone()

    def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        self.calls.append({"requirements": list(requirements), "target": target, **options})
        name = str(options["name"])
        if name == self.fail:
            raise Unresolvable(f"Because {name} cannot hold")
        if name == "torch-alone":
            return self.alone
        return committed("base" if name == "stack" else name)


def no_install_check(text: str, target: ImageTarget) -> None:
    assert text


def test_a_relock_resolves_only_what_changed(tmp_path: Path) -> None:
    """SGLang moved: the base and deepep-build locks are kept; sglang is resolved over the base lock,
    with its old self as uv's preferences, its overrides and its exclusions."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    uv = RecordedUv()
    run = relock(load_pins(pins_variant(tmp_path, SGLANG_VERSION="0.5.22")), locks, resolver=uv,
                 installable=no_install_check)  # fmt: skip
    assert run.kept == ["base", "deepep-build", "vllm"] and list(run.locks) == ["sglang"]
    (call,) = uv.calls
    assert call["requirements"] == ["sglang==0.5.22", *NIXL.split()]
    one_cuda = [f"{name}==13.0.*" for name in CUDA_RELEASE_WHEELS]
    assert call["constraints"] == [p.pin for p in committed("base").packages] + one_cuda
    assert call["excludes"] == (*DEEP_EP_PROVIDERS, "nvidia-cutlass-dsl-libs-cu12", "nixl-cu12")
    assert call["preferences"] == committed("sglang").text
    assert run.moves == [], "the recorded answer is the old lock: nothing moved"
    header = run.locks["sglang"].inputs
    assert header["requires"] == f"sglang==0.5.22 {NIXL}"


def test_the_base_lock_is_resolved_with_the_stack_in_view(tmp_path: Path) -> None:
    """From nothing: base and SGLang together first, the base pinned to that answer, vLLM resolved over
    that base with it, then the rest."""
    uv = RecordedUv()
    run = relock(load_pins(PINS), tmp_path / "empty", resolver=uv, installable=no_install_check)
    names = ["torch-alone", "stack", "base", "stack", "deepep-build", "sglang", "vllm"]
    assert [call["name"] for call in uv.calls] == names
    alone, stack, base, other, build = uv.calls[:5]
    assert (alone["requirements"], alone.get("overrides")) == (["torch==2.14.1"], None), "torch's own NCCL"
    assert run.torch_nccl is not None and run.torch_nccl.pin == "nvidia-nccl-cu13==2.30.7"
    spec = lock_specs(load_pins(PINS))[0]
    assert stack["requirements"] == [*spec.requirements, "sglang==0.5.23", *NIXL.split()]
    assert base["constraints"] == [p.pin for p in committed("base").packages]
    assert other["requirements"] == [*spec.requirements, "vllm==0.33.0"]
    assert other["constraints"] == [*spec.constraints, *base["constraints"]], "the base as pinned"
    assert not any(str(c).startswith("setuptools==") for c in build["constraints"]), (  # type: ignore[attr-defined]
        "the build lock pins its own setuptools"
    )
    assert {m.lock for m in run.moves} == {"base", "deepep-build", "sglang", "vllm"}, "every package is new"


@pytest.mark.parametrize(
    ("alone", "nccl", "message"),
    [
        (
            torch_alone("2.32.9"),
            "2.32.6",
            "NCCL 2.32.6 is below the 2.32.9 torch 2.14.1 requires and is built against; "
            "fix: set NCCL_VERSION=2.32.9 or newer",
        ),
        (
            torch_alone("2.30.7", wheel="nvidia-nccl-cu12"),
            "2.32.6",
            "torch 2.14.1 requires nvidia-nccl-cu12, a CUDA major other than the images' nvidia-nccl-cu13; "
            "fix: pin a torch built for CUDA 13 (TORCH_CUDA_TAG=cu130)",
        ),
        (
            torch_alone("3.0.1"),
            "2.32.6",
            "NCCL 2.32.6 is another major than the 3.0.1 torch 2.14.1 requires: another ABI; "
            "fix: set NCCL_VERSION to an NCCL 3.x release, 3.0.1 or newer",
        ),
    ],
)
def test_nccl_over_torchs_own_pin_is_refused_below_it_or_across_a_major(
    tmp_path: Path, alone: Resolution, nccl: str, message: str
) -> None:
    """Above torch's own NCCL in the same major is the base lock's override (the shipped pins: 2.32.6 over
    2.30.7); below it, another CUDA major's wheel or another NCCL major is bad input naming the pin's
    line, before anything is resolved or written."""
    path = pins_variant(tmp_path, NCCL_VERSION=nccl)
    uv = RecordedUv(alone=alone)
    with pytest.raises(BadInput) as refused:
        relock(load_pins(path), tmp_path / "empty", resolver=uv, installable=no_install_check, pins_path=path)
    key = "TORCH_VERSION" if "nvidia-nccl-cu12" in message else "NCCL_VERSION"
    assert str(refused.value) == f"{path}:{line_of(path, key)}: {message}"
    assert [call["name"] for call in uv.calls] == ["torch-alone"], "refused before any lock is resolved"
    assert not (tmp_path / "empty").exists()


def test_nccl_at_or_above_torchs_own_pin_is_the_base_locks_override(tmp_path: Path) -> None:
    for nccl in ("2.30.7", "2.32.6"):
        pins = load_pins(pins_variant(tmp_path, NCCL_VERSION=nccl))
        run = relock(pins, tmp_path / nccl, resolver=RecordedUv(), installable=no_install_check)
        assert run.torch_nccl is not None and run.torch_nccl.version == "2.30.7"
        assert f"nvidia-nccl-cu13=={nccl}" in lock_specs(pins)[0].overrides, "declared in the base lock"


def test_upgrade_relocks_the_locks_that_hold_it_and_nothing_else_is_written_on_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    uv = RecordedUv()
    run = relock(load_pins(PINS), locks, upgrade="flashinfer-python==0.7.1", resolver=uv,
                 installable=no_install_check)  # fmt: skip
    assert list(run.locks) == ["sglang", "vllm"] and uv.calls[0]["upgrade"] == ("flashinfer-python==0.7.1",)
    before = {path.name: path.read_bytes() for path in locks.iterdir()}
    with pytest.raises(Unresolvable):
        relock(load_pins(PINS), locks, upgrade="triton", resolver=RecordedUv(fail="sglang"),
               installable=no_install_check)  # fmt: skip
    assert {path.name: path.read_bytes() for path in locks.iterdir()} == before
    assert main(["pins", "lock", "--locks", str(locks), "--upgrade", "not-a-locked-package"]) == 2
    assert "is in no lock" in capsys.readouterr().err


def test_uv_bootstrap_entry_is_the_locked_uv_with_its_hashes() -> None:
    base = read_lock(LOCKS, "base")
    assert base is not None
    entry = parse_lock("uv", entry_text(base, "uv")).resolution.packages
    assert [(p.pin, p.hashes) for p in entry] == [
        (p.pin, p.hashes) for p in base.resolution.packages if p.name == "uv"
    ]


@pytest.mark.network
def test_upgrade_against_the_index_moves_one_package_and_what_follows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """uv against PyPI (about 20 s warm): pydantic down one minor brings pydantic-core with it in each
    served lock (one distribution, counted once), and nothing else moves; the locks stay fresh."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    start = time.monotonic()
    assert main(["pins", "lock", "--locks", str(locks), "--upgrade", "pydantic==2.13.0"]) == 0
    print(f"epstack pins lock --upgrade: {time.monotonic() - start:.1f} s")
    err = capsys.readouterr().out  # what moved is the result
    assert "1 other distributions move with it" in err
    for lock in ("sglang", "vllm"):
        rows = [line for line in err.splitlines() if line.startswith(f"│ {lock} ")]
        assert [row.split("│")[2].strip() for row in rows] == ["pydantic", "pydantic-core"]
    assert (locks / "base.txt").read_bytes() == (LOCKS / "base.txt").read_bytes()
    assert main(["pins", "lock", "--check", "--locks", str(locks)]) == 0


def test_a_header_from_other_inputs_is_stale_naming_each_changed_input(tmp_path: Path) -> None:
    """Inputs recorded but no longer given, given but not recorded, and changed: one reason each,
    `-` for the side that has none."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    pins = load_pins(PINS)
    build = read_lock(LOCKS, "deepep-build")
    assert build is not None
    recorded = {**build.inputs, "requires": "ninja", "retired": "x"}
    del recorded["python"]
    (locks / "deepep-build.txt").write_text(render_lock("deepep-build", recorded, build.resolution))
    (stale,) = stale_locks(pins, locks)
    assert stale.name == "deepep-build" and stale.path == locks / "deepep-build.txt"
    assert stale.reasons == (
        f"requires: ninja -> {build.inputs['requires']}",
        "retired: x -> -",
        f"python: - -> {build.inputs['python']}",
    )
    assert str(stale) == f"{stale.path}: stale ({'; '.join(stale.reasons)})"


def test_a_header_whose_digest_alone_differs_says_so(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    text = (locks / "deepep-build.txt").read_text()
    (locks / "deepep-build.txt").write_text(text.replace("# inputs-sha256: ", "# inputs-sha256: 0"))
    (stale,) = stale_locks(load_pins(PINS), locks)
    assert str(stale) == f"{locks / 'deepep-build.txt'}: stale (its inputs-sha256 does not match its header)"


def test_each_lock_records_exactly_its_specs_inputs() -> None:
    """What `lock --check` compares: absent keys for what a spec does not use (the build lock has no
    overrides, constraints or excludes), and the lower lock's pins digest."""
    pins = load_pins(PINS)
    base, build, sglang, vllm = lock_specs(pins)
    assert build.own == ("setuptools", "wheel", "ninja"), "the build lock pins these over the base lock's"
    lower = {"base": committed("base")}
    assert list(lock_inputs(build, pins, lower)) == ["python", "uv", "requires", "constrained-by base.txt"]
    assert list(lock_inputs(base, pins, {})) == [
        "python", "uv", "requires", "overrides", "constraints", "holds-up",
    ]  # fmt: skip
    assert lock_inputs(base, pins, {})["holds-up"] == "sglang.txt vllm.txt"
    for engine in (sglang, vllm):
        assert list(lock_inputs(engine, pins, lower)) == [
            "python", "uv", "requires", "overrides", "constraints", "excludes", "constrained-by base.txt",
        ]  # fmt: skip
    for spec in (base, build, sglang, vllm):
        lock = read_lock(LOCKS, spec.name)
        assert lock is not None and lock.inputs == lock_inputs(spec, pins, lower), spec.name


class MovedUv(RecordedUv):
    """uv's answer for sglang with one distribution added, one moved and one gone."""

    def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        answer = super().__call__(requirements, target, **options)
        if options["name"] != "sglang":
            return answer
        moved = answer.packages[1]  # and answer.packages[0] is gone
        packages = (
            Pinned(name="aaa-new", version="1.0", via=(), hashes=(HASH,)),
            Pinned(name=moved.name, version=moved.version + ".post1", via=(), hashes=moved.hashes),
            *answer.packages[2:],
        )
        return Resolution(
            packages=packages, text="".join(f"{p.pin} \\\n    --hash={HASH}\n" for p in packages)
        )


HASH = "sha256:" + "ab" * 32


def test_a_relock_lists_every_move_and_writes_each_new_lock_whole(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    pins = load_pins(pins_variant(tmp_path, SGLANG_VERSION="0.5.22"))
    checked: list[tuple[str, ImageTarget]] = []
    run = relock(
        pins, locks, resolver=MovedUv(), installable=lambda text, target: checked.append((text, target))
    )
    old = committed("sglang").packages
    assert run.moves == [
        Move(lock="sglang", package="aaa-new", before="", after="1.0"),
        Move(lock="sglang", package=old[0].name, before=old[0].version, after=""),
        Move(lock="sglang", package=old[1].name, before=old[1].version, after=old[1].version + ".post1"),
    ]
    new = run.locks["sglang"]
    assert checked == [(new.resolution.text, pins.image_target)], "installed dry-run before it is written"
    assert list(run.seconds) == ["sglang"] and 0 <= run.seconds["sglang"] < 60
    assert new.name == "sglang" and new.entries_intact and new.inputs["requires"] == f"sglang==0.5.22 {NIXL}"
    assert write_locks(run, locks) == [locks / "sglang.txt"]
    assert (locks / "sglang.txt").read_text() == new.text
    assert (locks / "base.txt").read_text() == (LOCKS / "base.txt").read_text()


@pytest.mark.parametrize("upgrade", ["Flashinfer_Python", "flashinfer-python==0.7.1"])
def test_upgrade_names_a_distribution_in_any_spelling(tmp_path: Path, upgrade: str) -> None:
    uv = RecordedUv()
    run = relock(load_pins(PINS), LOCKS, upgrade=upgrade, resolver=uv, installable=no_install_check)
    assert list(run.locks) == ["sglang", "vllm"] and run.kept == ["base", "deepep-build"]
    assert [call["upgrade"] for call in uv.calls] == [(upgrade,)] * 2, "both engines' locks hold FlashInfer"


def test_an_upgrade_that_is_no_requirement_or_in_no_lock_is_refused() -> None:
    with pytest.raises(BadInput) as refused:
        relock(load_pins(PINS), LOCKS, upgrade="not a package!", resolver=RecordedUv())
    assert str(refused.value) == "--upgrade 'not a package!': not PACKAGE or PACKAGE==VERSION"
    with pytest.raises(BadInput) as refused:
        relock(load_pins(PINS), LOCKS, upgrade="Not_Locked==1.0", resolver=RecordedUv())
    assert str(refused.value) == (
        f"--upgrade Not_Locked==1.0: not-locked is in no lock of {LOCKS}; fix: name a locked one"
    )


def test_each_wheel_of_another_cuda_major_is_named_with_what_requires_it(tmp_path: Path) -> None:
    class ForeignUv(RecordedUv):
        def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
            answer = super().__call__(requirements, target, **options)
            direct = Pinned(name="nvidia-foo-cu12", version="1.0", via=())
            pulled = Pinned(name="nvidia-bar-cu12", version="1.0", via=("torch", "triton"))
            return Resolution(packages=(*answer.packages, direct, pulled), text=answer.text)

    with pytest.raises(CommandFailed) as refused:
        relock(load_pins(PINS), tmp_path / "empty", resolver=ForeignUv(), installable=no_install_check)
    assert str(refused.value) == (
        "the base lock would install nvidia-foo-cu12 (required by the requirements), "
        "nvidia-bar-cu12 (required by torch, triton) into a CUDA 13 image; "
        "fix: if it is never loaded there, add its name without -cuNN to CUDA_FLAVOURED_STEMS in "
        "epstack/stack.py (the locks exclude it), else move CUDA_VERSION to its major"
    )


def test_a_base_relock_prefers_every_locked_version_of_the_stack(tmp_path: Path) -> None:
    """The stack resolution (base and SGLang together) starts from both locks' versions, the base
    lock's own resolution from its intact entries, as uv wrote them."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    uv = RecordedUv()
    relock(load_pins(pins_variant(tmp_path, TORCH_VERSION="2.13.0")), locks, resolver=uv,
           installable=no_install_check)  # fmt: skip
    alone, stack, base = uv.calls[0], uv.calls[1], uv.calls[2]
    assert (alone["name"], stack["name"], base["name"]) == ("torch-alone", "stack", "base")
    preferred = str(stack["preferences"]).splitlines()
    pins = [p.pin for name in ("base", "sglang") for p in committed(name).packages]
    assert len(preferred) == len(set(preferred)) and set(preferred) == set(pins)
    assert preferred[: len(committed("base").packages)] == [p.pin for p in committed("base").packages]
    assert base["preferences"] == committed("base").text
    spec = lock_specs(load_pins(pins_variant(tmp_path, TORCH_VERSION="2.13.0")))
    assert stack["constraints"] == spec[0].constraints and stack["overrides"] == spec[0].overrides
    assert stack["excludes"] == spec[-1].excludes and stack["upgrade"] == ()
    assert [call["name"] for call in uv.calls[2:]] == ["base", "stack", "deepep-build", "sglang", "vllm"]
    assert [call["overrides"] for call in uv.calls[2:]] == [
        spec[0].overrides,
        spec[0].overrides,
        *(each.overrides for each in spec[1:]),
    ]
    target = load_pins(PINS).image_target
    assert [call["target"] for call in uv.calls] == [target] * 7


def test_upgrade_relocks_its_holders_and_every_stale_lock(tmp_path: Path) -> None:
    """An edited sglang lock (its header still matches) and --upgrade of a base distribution: both."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    (locks / "sglang.txt").write_text((locks / "sglang.txt").read_text() + "--index-url https://x.invalid\n")
    run = relock(load_pins(PINS), locks, upgrade="pip", resolver=RecordedUv(), installable=no_install_check)
    assert list(run.locks) == ["base", "sglang"] and run.kept == ["deepep-build", "vllm"]


def test_a_missing_lock_is_stale_and_so_is_every_lock_above_it(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    (locks / "base.txt").unlink()
    assert stale_locks(load_pins(PINS), locks) == [
        Stale(name="base", path=locks / "base.txt", reasons=("missing",)),
        Stale(name="deepep-build", path=locks / "deepep-build.txt", reasons=("base.txt is stale",)),
        Stale(name="sglang", path=locks / "sglang.txt", reasons=("base.txt is stale",)),
        Stale(name="vllm", path=locks / "vllm.txt", reasons=("base.txt is stale",)),
    ]


def test_a_lock_that_cannot_be_written_is_refused_naming_it(tmp_path: Path) -> None:
    run = relock(load_pins(PINS), tmp_path / "locks", resolver=RecordedUv(), installable=no_install_check)
    (tmp_path / "locks" / "deepep-build.txt").mkdir(parents=True)
    with pytest.raises(
        BadInput, match=r"deepep-build\.txt is a directory; fix: name a file for the deepep-build lock"
    ):
        write_locks(run, tmp_path / "locks")
    assert (tmp_path / "locks" / "base.txt").read_text() == run.locks["base"].text, "written before it"


class SetuptoolsUv(RecordedUv):
    """As uv answers for vllm 0.33.0 (setuptools < 81): its stack cannot be resolved over a base that
    pins setuptools 84.2.1, which is what the SGLang stack gives when it goes first."""

    def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        self.calls.append({"requirements": list(requirements), **options})
        vllm = any(str(r).startswith("vllm==") for r in requirements)
        constraints = list(options["constraints"])  # type: ignore[call-overload]
        if options["name"] == "stack" and vllm and "setuptools==84.2.1" in constraints:
            raise Unresolvable("Because vllm==0.33.0 depends on setuptools<81.0.0 and setuptools==84.2.1 ...")
        if options["name"] == "torch-alone":
            return self.alone
        answer = committed("base" if options["name"] == "stack" else str(options["name"]))
        if options["name"] in ("stack", "base") and not vllm:
            packages = tuple(
                Pinned(name=p.name, version="84.2.1", via=p.via, hashes=p.hashes)
                if p.name == "setuptools"
                else p
                for p in answer.packages
            )
            answer = Resolution(packages=packages, text=answer.text)
        return answer


def test_an_engine_that_cannot_hold_the_base_goes_first_and_the_base_holds_both(tmp_path: Path) -> None:
    """SGLang's stack pins the base first; vLLM cannot be resolved over it, so vLLM's stack pins the
    base and SGLang is resolved over that: the base every served lock can stand on."""
    uv = SetuptoolsUv()
    run = relock(load_pins(PINS), tmp_path / "empty", resolver=uv, installable=no_install_check)
    stacks = [("vllm==0.33.0" in str(call["requirements"])) for call in uv.calls if call["name"] == "stack"]
    assert stacks == [False, True, True, False], "sglang first, vllm refused; vllm first, sglang holds"
    assert run.locks["base"].resolution.version("setuptools") == committed("base").version("setuptools")
    assert committed("base").version("setuptools") == "80.10.2", "vLLM's setuptools < 81 pins the base"

    class Never(SetuptoolsUv):
        def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
            unpinned = lock_specs(load_pins(PINS))[0].constraints
            if options["name"] == "stack" and options["constraints"] != unpinned:
                raise Unresolvable("Because the engines want two setuptools")
            return super().__call__(requirements, target, **options)

    with pytest.raises(CommandFailed, match=r"no base lock holds every served layer's lock .*two setuptools"):
        relock(load_pins(PINS), tmp_path / "empty", resolver=Never(), installable=no_install_check)


@pytest.mark.parametrize(
    ("package", "moved", "says"),
    [
        ("torch", "2.14.0", "torch==2.14.0, but torch==2.14.1 (overridden)"),
        ("nvidia-nccl-cu13", "2.30.7", "but base.txt holds nvidia-nccl-cu13==2.32.6"),
    ],
)
def test_a_vllm_lock_that_moves_torch_or_nccl_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], package: str, moved: str, says: str
) -> None:
    """vllm 0.33.0 asks for torch 2.14.0: a lock holding it (or another NCCL), even one whose header
    and entries digest are as `epstack pins lock` writes them, is stale, and build refuses it (exit 2,
    before any image is built)."""
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    lock = read_lock(locks, "vllm")
    assert lock is not None
    held = lock.resolution.version(package)
    text = lock.resolution.text.replace(f"\n{package}=={held} ", f"\n{package}=={moved} ")
    assert text != lock.resolution.text
    edited = render_lock("vllm", lock.inputs, Resolution(packages=(), text=text))
    (locks / "vllm.txt").write_text(edited)
    (stale,) = stale_locks(load_pins(PINS), locks)
    assert stale.name == "vllm" and any(says in reason for reason in stale.reasons), stale.reasons
    assert main(["pins", "lock", "--check", "--pins", str(PINS), "--locks", str(locks)]) == 1
    out = str(tmp_path / "r")
    build = ["build", "--engine", "vllm", "--pins", str(PINS), "--locks", str(locks), "--out-dir", out]
    assert main(build) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "r").exists()
