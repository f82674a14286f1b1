"""Lock files as epstack writes and reads them: the header's inputs and its two digests (what
`lock --check` compares), the entries below it, one entry alone for uv's bootstrap, and the union of
a layer's locks that the guard holds a venv to."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from epstack.errors import BadInput
from epstack.python.lockfile import (
    entries_digest,
    entry_text,
    expected_distributions,
    inputs_digest,
    lock_path,
    locks_dir,
    parse_lock,
    pins_digest,
    read_lock,
    render_lock,
)
from epstack.python.resolve import Pinned, Resolution
from tests.conftest import REPO

LOCKS = REPO / "locks"
HASH_A = "sha256:" + "a" * 64
HASH_B = "sha256:" + "b" * 64
BODY = f"torch==2.14.1 \\\n    --hash={HASH_A} \\\n    --hash={HASH_B}\n    # via sglang\nzzz==1.0\n"


def resolution(body: str = BODY) -> Resolution:
    return parse_lock("x", body).resolution


def copy_locks(tmp_path: Path) -> Path:
    locks = tmp_path / "locks"
    shutil.copytree(LOCKS, locks)
    return locks


def test_the_locks_are_the_argument_else_epstack_locks_else_locks_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EPSTACK_LOCKS", "/images/locks")
    assert locks_dir(tmp_path) == tmp_path
    assert locks_dir(None) == Path("/images/locks")
    monkeypatch.setenv("EPSTACK_LOCKS", "")
    assert locks_dir(None) == Path("locks")
    monkeypatch.delenv("EPSTACK_LOCKS")
    assert locks_dir(None) == Path("locks")
    assert lock_path(tmp_path, "deepep-build") == tmp_path / "deepep-build.txt"


@pytest.mark.parametrize("name", ["base", "deepep-build", "sglang"])
def test_each_committed_lock_holds_the_digests_of_its_own_inputs_and_entries(name: str) -> None:
    lock = read_lock(LOCKS, name)
    assert lock is not None
    assert lock.name == name and lock.digest == inputs_digest(lock.inputs)
    assert lock.entries_intact and lock.entries_digest == entries_digest(lock.resolution.text)
    assert lock.text == lock_path(LOCKS, name).read_text()
    lines = lock.text.splitlines()
    assert lines[lock.body_start - 2].startswith("# entries-sha256: ")
    assert not lines[lock.body_start - 1].startswith("#"), "the first entry line"
    assert not {"inputs-sha256", "entries-sha256"} & set(lock.inputs), "the digests are no inputs"


def test_an_upper_lock_records_the_pins_digest_of_the_lock_below() -> None:
    base, sglang = read_lock(LOCKS, "base"), read_lock(LOCKS, "sglang")
    assert base is not None and sglang is not None
    assert sglang.inputs["constrained-by base.txt"] == f"pins sha256 {pins_digest(base.resolution)}"


def test_the_inputs_digest_changes_with_any_key_or_value_and_only_then() -> None:
    inputs = {"requires": "sglang==0.5.23", "excludes": "deep-ep"}
    digest = inputs_digest(inputs)
    assert len(digest) == 64 and digest == inputs_digest(dict(inputs))
    assert digest != inputs_digest({**inputs, "requires": "sglang==0.5.22"})
    assert digest != inputs_digest({"requires": "sglang==0.5.23", "exclude": "deep-ep"})
    assert digest != inputs_digest({"requires": "sglang==0.5.23"})
    # the lines are `key: value` each: the split between key and value counts
    assert inputs_digest({"a": "b c"}) != inputs_digest({"a b": "c"})


def test_the_pins_digest_ignores_hashes_comments_and_order_but_not_a_version() -> None:
    pins = pins_digest(resolution())
    bare = Resolution(
        packages=(
            Pinned(name="zzz", version="1.0", via=()),
            Pinned(name="torch", version="2.14.1", via=("other",)),
        )
    )
    assert pins_digest(bare) == pins
    assert pins_digest(resolution(BODY.replace("zzz==1.0", "zzz==1.1"))) != pins
    assert pins_digest(resolution(BODY.replace("zzz==1.0\n", ""))) != pins
    assert pins_digest(resolution("torch==2.14.1\nzzz==1.0\n")) == pins


def test_a_lock_is_written_with_its_title_inputs_and_digests_then_uvs_entries() -> None:
    text = render_lock("sglang", {"requires": "sglang==0.5.23", "excludes": "deep-ep"}, resolution())
    assert text.splitlines()[:5] == [
        "# epstack lock sglang: written by `epstack lock` from pins.env; do not edit.",
        "# requires: sglang==0.5.23",
        "# excludes: deep-ep",
        f"# inputs-sha256: {inputs_digest({'requires': 'sglang==0.5.23', 'excludes': 'deep-ep'})}",
        f"# entries-sha256: {entries_digest(BODY)}",
    ]
    assert text.endswith("\n" + BODY)
    lock = parse_lock("sglang", text)
    assert lock.inputs == {"requires": "sglang==0.5.23", "excludes": "deep-ep"}
    assert lock.entries_intact and lock.body_start == 6 and lock.resolution.text == BODY
    assert [(p.pin, p.hashes) for p in lock.resolution.packages] == [
        ("torch==2.14.1", (HASH_A, HASH_B)),
        ("zzz==1.0", ()),
    ]


def test_a_lock_without_a_header_is_all_entries_and_not_intact() -> None:
    lock = parse_lock("hand", BODY)
    assert (lock.inputs, lock.digest, lock.entries_digest) == ({}, "", "")
    assert not lock.entries_intact and lock.body_start == 1 and lock.resolution.text == BODY
    assert [p.pin for p in lock.resolution.packages] == ["torch==2.14.1", "zzz==1.0"]


def test_a_title_alone_is_not_read_as_an_input() -> None:
    text = f"# requires: x\n# python: 3.12\n{BODY}"
    lock = parse_lock("hand", text)
    assert lock.inputs == {"python": "3.12"}, "the first line is the title, whatever it says"
    assert lock.body_start == 3


def test_a_header_with_windows_line_ends_and_padded_digests_still_reads() -> None:
    good = render_lock("base", {"requires": "torch==2.14.1"}, resolution())
    head, body = good[: good.index(BODY)], good[good.index(BODY) :]
    padded = head.replace("\n", " \r\n")
    lock = parse_lock("base", padded + body)
    assert lock.inputs == {"requires": "torch==2.14.1 "}
    assert lock.digest == inputs_digest({"requires": "torch==2.14.1"}) and lock.entries_intact


def test_an_edited_entry_is_not_intact_and_a_changed_digest_line_neither() -> None:
    good = render_lock("base", {"requires": "torch==2.14.1"}, resolution())
    assert parse_lock("base", good).entries_intact
    assert not parse_lock("base", good.replace("zzz==1.0", "zzz==1.1")).entries_intact
    assert not parse_lock("base", good + "extra==1.0\n").entries_intact
    digest = entries_digest(BODY)
    assert not parse_lock("base", good.replace(digest, digest[::-1])).entries_intact


def test_a_header_key_must_be_lower_case_words() -> None:
    """A `# Note: ...` comment is no input: it ends the header and starts the entries."""
    text = f"# epstack lock x: title\n# requires: x\n# Note: y\n# more: z\n{BODY}"
    lock = parse_lock("x", text)
    assert lock.inputs == {"requires": "x"} and lock.body_start == 3


def test_a_missing_lock_is_none_and_a_dangling_link_is_bad_input(tmp_path: Path) -> None:
    assert read_lock(tmp_path, "base") is None
    (tmp_path / "base.txt").symlink_to(tmp_path / "gone.txt")
    with pytest.raises(BadInput, match=r"base\.txt: no such file; fix: pass the path of the base lock"):
        read_lock(tmp_path, "base")


def test_one_entry_is_its_pin_and_hashes_as_a_requirements_file() -> None:
    lock = parse_lock("base", render_lock("base", {}, resolution()))
    expected = f"torch==2.14.1 \\\n    --hash={HASH_A} \\\n    --hash={HASH_B}\n"
    assert entry_text(lock, "torch") == expected
    assert entry_text(lock, "Torch") == expected, "the name is canonicalized"


@pytest.mark.parametrize("name", ["zzz", "absent"])
def test_an_unhashed_or_absent_entry_is_refused_naming_the_lock_and_the_fix(name: str) -> None:
    lock = parse_lock("base", render_lock("base", {}, resolution()))
    with pytest.raises(BadInput) as refused:
        entry_text(lock, name)
    assert str(refused.value) == f"lock base has no hashed {name} entry; fix: run epstack pins lock"


def test_a_layers_distributions_are_its_locks_union_each_from_the_lowest_file() -> None:
    base, sglang = read_lock(LOCKS, "base"), read_lock(LOCKS, "sglang")
    assert base is not None and sglang is not None
    expected, files = expected_distributions(LOCKS, "sglang")
    assert files == [str(LOCKS / "base.txt"), str(LOCKS / "sglang.txt")]
    assert expected["torch"] == (base.resolution.versions["torch"], "base.txt")
    assert expected["sglang"] == (sglang.resolution.versions["sglang"], "sglang.txt")
    assert set(expected) == {*base.resolution.versions, *sglang.resolution.versions}
    only_base, base_files = expected_distributions(LOCKS, "base")
    assert only_base == {name: (version, "base.txt") for name, version in base.resolution.versions.items()}
    assert base_files == [str(LOCKS / "base.txt")]


def test_locks_of_one_layer_that_disagree_are_refused_naming_both(tmp_path: Path) -> None:
    locks = copy_locks(tmp_path)
    sglang = (locks / "sglang.txt").read_text()
    (locks / "sglang.txt").write_text(sglang.replace("\ntorch==2.14.1 ", "\ntorch==2.14.0 "))
    with pytest.raises(BadInput) as refused:
        expected_distributions(locks, "sglang")
    assert str(refused.value) == (
        f"{locks / 'sglang.txt'}: torch==2.14.0, but base.txt has 2.14.1; "
        "fix: run epstack pins lock (an upper lock never moves a lower one)"
    )


def test_a_missing_lock_of_the_layer_is_refused_with_the_fix(tmp_path: Path) -> None:
    locks = copy_locks(tmp_path)
    (locks / "sglang.txt").unlink()
    assert expected_distributions(locks, "base")[1] == [str(locks / "base.txt")]
    with pytest.raises(BadInput) as refused:
        expected_distributions(locks, "sglang")
    assert str(refused.value) == (
        f"{locks / 'sglang.txt'}: no such lock; fix: run epstack pins lock (images carry theirs)"
    )


def test_a_lock_of_no_entries_is_its_header_alone() -> None:
    text = render_lock("empty", {"requires": ""}, Resolution(packages=(), text=""))
    lock = parse_lock("empty", text)
    assert lock.inputs == {"requires": ""} and lock.entries_intact
    assert lock.resolution.packages == () and lock.body_start == len(text.splitlines()) + 1


def test_header_values_read_back_verbatim() -> None:
    inputs = {"requires": "torch==2.14.1 X", "python": "3.12 x86_64-manylinux_2_39", "empty": ""}
    assert parse_lock("x", render_lock("x", inputs, resolution())).inputs == inputs
