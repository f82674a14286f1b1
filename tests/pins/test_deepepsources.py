"""The deepep layer's pinned sources as values: its git sources and DeepEP's patch series."""

from __future__ import annotations

import hashlib
import re

import pytest

from epstack.pins.deepepsources import GitSource, Patch, git_sources, parse_patches


def test_the_deepep_layer_clones_from_the_pinned_and_upstream_repositories() -> None:
    pinned = {"DEEPEP_REPO": "https://example.invalid/DeepEP.git", "DEEPEP_REF": "a" * 40,
              "DEEPEP_FMT_REF": "b" * 40, "GDRCOPY_REF": "c" * 40}  # fmt: skip
    assert git_sources(pinned) == (
        GitSource(
            name="DeepEP", key="DEEPEP_REF", repo="https://example.invalid/DeepEP.git", commit="a" * 40
        ),
        GitSource(
            name="fmt", key="DEEPEP_FMT_REF", repo="https://github.com/fmtlib/fmt.git", commit="b" * 40
        ),
        GitSource(
            name="gdrcopy", key="GDRCOPY_REF", repo="https://github.com/NVIDIA/gdrcopy.git", commit="c" * 40
        ),
    )
    assert git_sources(pinned)[2].archive == f"gdrcopy-{'c' * 40}.tar.gz"


def pinned_patch(name: str, content: bytes = b"") -> str:
    return f"https://example.invalid/{name}#sha256={hashlib.sha256(content).hexdigest()}"


def test_patches_are_parsed_in_order() -> None:
    a, b = pinned_patch("a.patch", b"a"), pinned_patch("b.patch", b"b")
    assert parse_patches("none") == ()
    assert parse_patches(f"{a}, {b}") == (
        Patch(url="https://example.invalid/a.patch", sha256=hashlib.sha256(b"a").hexdigest()),
        Patch(url="https://example.invalid/b.patch", sha256=hashlib.sha256(b"b").hexdigest()),
    )
    assert str(parse_patches(a)[0]) == a and parse_patches(a)[0].file == "a.patch"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("", "'' is not a pinned patch; fix: write https://...#sha256=<64 hex>, comma-separated, or none"),
        ("http://example.invalid/a.patch#sha256=" + "0" * 64, "'http://example.invalid/a.patch#sha256="),
        (pinned_patch("a.patch") + ",", "'' is not a pinned patch; fix: write https://...#sha256=<64 hex>"),
        (
            f"{pinned_patch('a.patch')},{pinned_patch('b.patch')},{pinned_patch('x/b.patch', b'x')}",
            "two patches named 'b.patch'; fix: list each patch once",
        ),
    ],
    ids=["empty", "not-https", "empty-member", "same-file-name"],
)
def test_a_bad_patch_list_is_refused_with_its_fix(value: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)) as refused:
        parse_patches(value)
    assert str(refused.value).endswith(("comma-separated, or none", "list each patch once"))
