"""A lock is read, not trusted: `lock --check`, render and build compare each lock's entries with what
its spec says it holds and with the entries-sha256 `epstack pins lock` wrote; a hand-edited lock is stale,
naming the file, the line and the fix (epstack.python.lockcontent)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from epstack.commands.main import main
from epstack.pins.load import load_pins
from epstack.python.lock import lock_specs, relock, stale_locks
from epstack.python.lockcontent import content_problems
from epstack.python.lockfile import LockFile, parse_lock, read_lock, render_lock
from epstack.python.resolve import Pinned, Resolution
from epstack.stack import ImageTarget
from tests.conftest import PINS, REPO

LOCKS = REPO / "locks"
HASH = "sha256:" + "ab" * 32


def copy_locks(tmp_path: Path) -> Path:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    return locks


def line_of(text: str, start: str) -> int:
    """The 1-based number of the first line of `text` that starts with `start`."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def seal(name: str, text: str) -> str:
    """`text` with its header rewritten by epstack's own writer, as one who edits a lock and then
    records the new entries' digest would: only the entries themselves can tell."""
    lock = parse_lock(name, text)
    return render_lock(name, lock.inputs, lock.resolution)


def reasons(locks: Path, name: str) -> tuple[str, ...]:
    return {entry.name: entry.reasons for entry in stale_locks(load_pins(PINS), locks)}.get(name, ())


def test_the_committed_locks_carry_their_entries_digest_and_hold_what_their_specs_say() -> None:
    """The writer writes what the reader verifies: each committed lock, written again from what it
    reads, is itself, header line for header line."""
    for spec in lock_specs(load_pins(PINS)):
        text = (LOCKS / f"{spec.name}.txt").read_text()
        assert "\n# entries-sha256: " in text, spec.name
        assert seal(spec.name, text) == text, spec.name
    assert stale_locks(load_pins(PINS), LOCKS) == []


def test_another_sglang_with_sgl_deep_ep_appended_is_stale_naming_each_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's example: `lock --check` said every lock is fresh."""
    locks = copy_locks(tmp_path)
    path = locks / "sglang.txt"
    text = path.read_text().replace("\nsglang==0.5.23 ", "\nsglang==0.5.22 ")
    text += f"sgl-deep-ep==0.0.1 \\\n    --hash={HASH}\n"
    path.write_text(text)
    assert main(["pins", "lock", "--check", "--pins", str(PINS), "--locks", str(locks)]) == 1
    err = capsys.readouterr().out
    (stale,) = [line for line in err.splitlines() if "stale" in line]
    assert stale.startswith(f"{path}: stale (")
    assert f"line {line_of(text, 'sglang==')}: sglang==0.5.22, but sglang==0.5.23 (required)" in stale
    assert f"line {line_of(text, 'sgl-deep-ep==')}: sgl-deep-ep==0.0.1: excluded from this lock" in stale
    assert "entries-sha256 differs" in stale
    assert f"fix: epstack pins lock --pins {PINS} --locks {locks}" in err


def test_a_changed_hash_is_stale_and_build_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locks = copy_locks(tmp_path)
    path = locks / "base.txt"
    text = path.read_text()
    first = text.index("--hash=sha256:") + len("--hash=sha256:")
    path.write_text(text[:first] + ("1" if text[first] != "1" else "2") + text[first + 1 :])
    (why,) = reasons(locks, "base")
    assert why.endswith("not as `epstack pins lock` wrote them (entries-sha256 differs)")
    assert reasons(locks, "sglang") == ("base.txt is stale",)
    argv = ["build", "--pins", str(PINS), "--locks", str(locks), "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path}: stale (lines " in err and "fix: epstack pins lock" in err
    assert not (tmp_path / "out").exists(), "nothing rendered from a refused lock"


def test_a_lock_without_an_entries_digest_is_stale_naming_its_header(tmp_path: Path) -> None:
    """A hand-written lock, or one from before the digest: nothing says its entries are uv's."""
    locks = copy_locks(tmp_path)
    path = locks / "deepep-build.txt"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.startswith("# entries-sha256:")))
    (why,) = reasons(locks, "deepep-build")
    assert why.startswith(
        f"line {line_of(path.read_text(), '# inputs-sha256')}: the header records no entries"
    )


def _replace_entry(name: str, version: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        start = text.index(f"\n{name}==") + 1
        end = text.index(" ", start)
        return text[:start] + f"{name}=={version}" + text[end:]

    return edit


def _append(line: str) -> Callable[[str], str]:
    return lambda text: text + line


# Edits sealed with a fresh entries-sha256, so each content rule is seen alone: (lock, edit, reason).
SEALED_EDITS: list[tuple[str, Callable[[str], str], str]] = [
    ("base", _replace_entry("uv", "0.13.8"), "uv==0.13.8, but uv==0.13.9 (required)"),
    ("base", lambda text: text.replace("\nuv==", "\nnot-uv=="), "no entry holds uv==0.13.9 (required)"),
    ("sglang", _replace_entry("torch", "2.13.0"), "torch==2.13.0, but torch==2.14.1 (overridden)"),
    (
        "sglang",
        _replace_entry("nvidia-cuda-nvcc", "13.5.1"),
        "nvidia-cuda-nvcc==13.5.1, but nvidia-cuda-nvcc==13.0.* (constrained to one CUDA)",
    ),
    ("sglang", _replace_entry("setuptools", "80.0.0"), "but base.txt holds setuptools==80.10.2"),
    ("sglang", _append(f"deep-ep==1.0 \\\n    --hash={HASH}\n"), "deep-ep==1.0: excluded from this lock"),
    (
        "sglang",
        _append(f"nvidia-cutlass-dsl-libs-cu12==4.8.0 \\\n    --hash={HASH}\n"),
        "nvidia-cutlass-dsl-libs-cu12==4.8.0: excluded",
    ),
    ("sglang", _append(f"nvidia-foo-cu12==1.0 \\\n    --hash={HASH}\n"), "another CUDA major"),
    ("sglang", _append("zzz-unhashed==1.0\n"), "zzz-unhashed==1.0: no --hash"),
    ("sglang", _append(f"aiohttp==3.14.5 \\\n    --hash={HASH}\n"), "aiohttp is locked twice"),
    ("sglang", _append("zzz==1.0 \\\n    --hash=md5:0123456789abcdef\n"), "is not a sha256 --hash"),
    ("sglang", _append("--index-url https://mirror.invalid/simple\n"), "is no `name==version` entry"),
    ("sglang", _append("zzz @ https://x.invalid/zzz.whl\n"), "is no `name==version` entry"),
    ("sglang", _append(f"zzz==1.0;python_version>'3' \\\n    --hash={HASH}\n"), "is not a version"),
    ("deepep-build", _replace_entry("ninja", "1.11.1"), "ninja==1.11.1, but ninja==1.13.2 (required)"),
]


@pytest.mark.parametrize(("name", "edit", "reason"), SEALED_EDITS, ids=[e[2][:40] for e in SEALED_EDITS])
def test_each_rule_reads_the_entries_even_under_a_recomputed_digest(
    tmp_path: Path, name: str, edit: Callable[[str], str], reason: str
) -> None:
    locks = copy_locks(tmp_path)
    path = locks / f"{name}.txt"
    edited = seal(name, edit(path.read_text()))
    assert edited != path.read_text()
    path.write_text(edited)
    found = "; ".join(reasons(locks, name))
    assert reason in found, found
    assert found.startswith(("line ", "no entry holds")), "each problem names its line"


def test_a_lock_edited_into_many_problems_stays_one_short_line(tmp_path: Path) -> None:
    locks = copy_locks(tmp_path)
    path = locks / "sglang.txt"
    path.write_text(path.read_text() + "".join(f"junk line {n}\n" for n in range(10_000)))
    why = reasons(locks, "sglang")
    assert len(why) == 6 and why[-1] == "and 9996 more", why


class PinsOnlyUv:
    """Answers with the committed lock and records what it was given as preferences."""

    def __init__(self) -> None:
        self.preferences: list[str] = []

    def __call__(self, requirements: Sequence[str], target: ImageTarget, **options: object) -> Resolution:
        self.preferences.append(str(options["preferences"]))
        lock = read_lock(LOCKS, str(options["name"]))
        assert lock is not None
        return lock.resolution


def test_epstack_lock_resolves_an_edited_lock_again_and_gives_uv_none_of_its_lines(tmp_path: Path) -> None:
    """The fix the message names works: the edited lock is resolved again (with the versions read
    from it as uv's preferences, never its own lines), the others are kept."""
    locks = copy_locks(tmp_path)
    path = locks / "sglang.txt"
    path.write_text(path.read_text() + "--index-url https://mirror.invalid/simple\n")
    uv = PinsOnlyUv()
    run = relock(load_pins(PINS), locks, resolver=uv, installable=lambda text, target: None)
    assert run.kept == ["base", "deepep-build", "vllm"] and list(run.locks) == ["sglang"]
    (preferences,) = uv.preferences
    assert "mirror.invalid" not in preferences and "sglang==0.5.23\n" in preferences
    assert run.locks["sglang"].text == (LOCKS / "sglang.txt").read_text()


names = st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,5}){0,2}", fullmatch=True)
versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True)
hashes = st.lists(st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True), min_size=1, max_size=3)


@given(
    packages=st.lists(st.tuples(names, versions, hashes), min_size=1, max_size=8, unique_by=lambda p: p[0])
)
def test_what_the_writer_writes_the_reader_verifies(packages: list[tuple[str, str, list[str]]]) -> None:
    body = "".join(
        f"{name}=={version}" + "".join(f" \\\n    --hash={h}" for h in digests) + "\n"
        for name, version, digests in packages
    )
    resolution = Resolution(
        packages=tuple(Pinned(name=n, version=v, via=(), hashes=tuple(h)) for n, v, h in packages), text=body
    )
    lock = parse_lock("x", render_lock("x", {"requires": "x"}, resolution))
    assert lock.entries_intact and lock.inputs == {"requires": "x"}
    assert [(p.pin, p.hashes) for p in lock.resolution.packages] == [
        (f"{n}=={v}", tuple(h)) for n, v, h in packages
    ]


BASE_TEXT = (LOCKS / "base.txt").read_text()
BASE_LINES = BASE_TEXT.splitlines(keepends=True)
FIRST_ENTRY = line_of(BASE_TEXT, "cuda-bindings==") - 1


@given(
    where=st.integers(min_value=FIRST_ENTRY, max_value=len(BASE_LINES)),
    action=st.sampled_from(["insert", "replace", "delete"]),
    line=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=80),
)
def test_any_edit_of_the_entries_is_stale_naming_a_line(where: int, action: str, line: str) -> None:
    """Insert, replace or delete one line anywhere below the header: the base lock is stale (and so
    every lock above it), each reason naming its line; never a traceback."""
    lines = list(BASE_LINES)
    if action == "insert":
        lines.insert(where, line + "\n")
    else:
        assume(where < len(lines))
        lines[where : where + 1] = [line + "\n"] if action == "replace" else []
    text = "".join(lines)
    assume(text != BASE_TEXT)
    with tempfile.TemporaryDirectory(prefix="epstack-lock-content-") as tmp:
        locks = Path(tmp) / "locks"
        shutil.copytree(LOCKS, locks)
        (locks / "base.txt").write_text(text)
        stale = {entry.name: entry.reasons for entry in stale_locks(load_pins(PINS), locks)}
    assert set(stale) == {"base", "deepep-build", "sglang", "vllm"}
    named = ("line", "no entry holds", "and ")  # the last: "and N more"
    assert all(reason.startswith(named) for reason in stale["base"]), stale["base"]


def sealed(body: str) -> LockFile:
    """A lock of `body` under a header that epstack wrote (a fresh entries-sha256)."""
    return parse_lock("x", render_lock("x", {"requires": "x"}, parse_lock("x", body).resolution))


def problems(body: str | LockFile, **spec: tuple[str, ...]) -> tuple[str, ...]:
    lock = sealed(body) if isinstance(body, str) else body
    return content_problems(lock, cuda_major=13, requirements=spec.pop("requirements", ()), below={}, **spec)


def hashed(pin: str, indent: str = "    ") -> str:
    return f"{pin} \\\n{indent}--hash={HASH}\n"


def test_a_prerelease_the_spec_allows_is_no_problem() -> None:
    body = hashed("foo==2.0rc1") + hashed("bar==1.1.dev3")
    assert problems(body, requirements=("foo>=1.0",), overrides=("bar>=1",)) == ()
    assert problems(body, requirements=("foo<2",)) == ("line 5: foo==2.0rc1, but foo<2 (required)",)


def test_an_override_or_constraint_need_not_be_locked_a_requirement_must() -> None:
    body = hashed("foo==1.0")
    assert problems(body, overrides=("absent==1.0",), constraints=("nvidia-absent==13.0.*",)) == ()
    assert problems(body, requirements=("absent==1.0",)) == ("no entry holds absent==1.0 (required)",)


def test_a_distribution_locked_twice_names_its_first_line() -> None:
    body = hashed("foo==1.0") + hashed("bar==1.0") + hashed("Foo==1.1")
    assert problems(body) == ("line 9: foo==1.1: foo is locked twice (also line 5)",)


def test_hashes_indented_by_any_whitespace_are_uvs_but_unindented_lines_are_not() -> None:
    assert problems(hashed("foo==1.0", indent=" ") + hashed("bar==1.0", indent="\t")) == ()
    unindented = hashed("foo==1.0", indent="")
    assert problems(unindented) == (
        f"line 6: {('--hash=' + HASH)[:60]!r} is no `name==version` entry as uv writes it",
    )
    assert problems(hashed("foo==1.0") + "    junk\n") == (
        "line 7: 'junk' is no `name==version` entry as uv writes it",
    )


def test_a_foreign_line_is_shown_stripped_and_cut_at_60_characters() -> None:
    line = "  --extra-index-url https://" + "x" * 80 + ".invalid/simple  "
    (problem,) = problems(hashed("foo==1.0") + line.strip() + "\n")
    assert problem == f"line 7: {line.strip()[:60]!r} is no `name==version` entry as uv writes it"


def test_five_problems_are_all_shown_a_sixth_is_counted() -> None:
    five = "".join(f"p{n}==1.0\n" for n in range(5))
    assert len(problems(five)) == 5 and all("no --hash" in p for p in problems(five))
    six = problems(five + "p5==1.0\n")
    assert len(six) == 6 and six[-1] == "and 1 more"


def test_the_digest_problems_name_the_header_line_or_every_entry_line() -> None:
    lock = sealed(hashed("foo==1.0") + hashed("bar==1.0"))
    unsealed = lock.text.replace(f"# entries-sha256: {lock.entries_digest}\n", "")
    assert problems(parse_lock("x", unsealed)) == (
        "line 3: the header records no entries-sha256, so nothing says the entries are as "
        "`epstack pins lock` wrote them",
    )
    edited = parse_lock("x", lock.text.replace("bar==1.0", "bar==1.1"))
    assert len(edited.text.splitlines()) == 8
    assert problems(edited) == ("lines 5-8: not as `epstack pins lock` wrote them (entries-sha256 differs)",)
