"""The rules for one pin value (epstack.pins.values): each returns the value it accepts, and refuses
anything else with what is wrong and the fix."""

from __future__ import annotations

import re

import pytest

from epstack.pins import values

SHA = "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb"
DIGEST = "sha256:" + "0" * 64


def refused(check: object, value: str) -> str:
    """The message a value rule refuses `value` with."""
    assert callable(check)
    with pytest.raises(ValueError) as caught:
        check(value)
    return str(caught.value)


# ---- exact versions: one version, in its one spelling ------------------------------------------


@pytest.mark.parametrize(
    "value", ["2.30.7", "0.5.23", "1.21.1", "2.30.7.post1", "3.4.5.1", "2.30.0", "2.30.7rc1"]
)
def test_an_exact_canonical_version_is_returned(value: str) -> None:
    assert values.exact_version(value) == value


RANGES = [">=2.30.7", "<3", ">2", "==2.30.7", "!=2.30.7", "~=2.30", "^2.30", "2.30.*", "2.30.7,2.30.8"]


@pytest.mark.parametrize("value", [*RANGES, "2.30.7 ", "2. 30.7", "2.30.7\t", "1!2.30.7"])
def test_a_range_is_refused_as_a_range(value: str) -> None:
    assert refused(values.exact_version, value) == (
        f"{value!r} is a range, not an exact version; fix: write the version alone, e.g. 1.2.3"
    )


@pytest.mark.parametrize("value", ["latest", "2.30.x", ""])
def test_a_word_is_not_a_version(value: str) -> None:
    assert refused(values.exact_version, value) == (
        f"{value!r} is not a version; fix: write an exact version such as 1.2.3"
    )


def test_a_local_tag_belongs_in_its_own_key() -> None:
    assert refused(values.exact_version, "2.14.1+cu130") == (
        "'2.14.1+cu130' carries a local tag; fix: write 2.14.1 and put the tag in its own key"
    )


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("v2.30.7", "2.30.7"),
        ("2.30.07", "2.30.7"),
        ("2.30.7.0", "2.30.7"),
        ("2.30.7.0.0", "2.30.7"),
        ("2.30.7.0rc1", "2.30.7rc1"),
        ("2.30.7.0.post1", "2.30.7.post1"),
        ("2.30.7-post1", "2.30.7.post1"),
        ("2.30.7RC1", "2.30.7rc1"),
    ],
)
def test_another_spelling_names_the_canonical_one(value: str, canonical: str) -> None:
    assert (
        refused(values.exact_version, value)
        == f"{value!r} is not written canonically; fix: write {canonical}"
    )


# ---- Debian versions, images, repositories, commits, snapshots ---------------------------------


@pytest.mark.parametrize("value", ["50.0-2ubuntu0.2", "1:2.3+dfsg-1", "0.9", "2.1-1A"])
def test_a_debian_version_is_returned(value: str) -> None:
    assert values.debian_version(value) == value


@pytest.mark.parametrize("value", [">=50.0", "50.0 -2", "ubuntu50", "-1", "50.0$", "50.0_1", ""])
def test_a_debian_version_that_is_not_one_exact_version(value: str) -> None:
    assert refused(values.debian_version, value) == (
        f"{value!r} is not an exact Debian package version; fix: write e.g. 50.0-2ubuntu0.2"
    )


@pytest.mark.parametrize(
    "value",
    [
        f"nvidia/cuda:13.0.3-devel-ubuntu24.04@{DIGEST}",
        f"mirror.example:5000/nvidia/cuda:13.0.3-devel-ubuntu24.04@{DIGEST}",
    ],
)
def test_an_image_by_digest_is_returned(value: str) -> None:
    assert values.image_by_digest(value) == value


def test_an_image_without_a_digest() -> None:
    assert refused(values.image_by_digest, "nvidia/cuda:13.0.3-devel-ubuntu24.04") == (
        "'nvidia/cuda:13.0.3-devel-ubuntu24.04' has no digest; fix: append @sha256:<64 hex> of the image "
        "you tested"
    )


def test_an_image_whose_reference_is_malformed_says_why() -> None:
    value = "nvidia/cuda:13.0.3@sha256:abc"
    assert refused(values.image_by_digest, value) == (
        f"{value!r} is not an image reference ('sha256:abc' is not sha256:<64 lowercase hex>); "
        "fix: write NAME:TAG@sha256:<64 hex>"
    )


def test_an_image_without_a_tag() -> None:
    value = f"nvidia/cuda@{DIGEST}"
    assert refused(values.image_by_digest, value) == (
        f"{value!r} has no tag; fix: write NAME:TAG@sha256:<64 hex>, the tag naming the CUDA"
    )


@pytest.mark.parametrize("value", ["epstack", "registry.example:5000/team/epstack", "localhost/epstack"])
def test_a_repository_is_returned(value: str) -> None:
    assert values.repository(value) == value


def test_a_repository_with_a_capital_says_which_part() -> None:
    assert refused(values.repository, "team/Epstack") == (
        "'team/Epstack': 'Epstack' is not a repository path component (lowercase letters and digits, "
        "joined by . _ __ -); fix: write e.g. epstack or registry.example:5000/team/epstack"
    )


def test_a_full_sha_is_returned() -> None:
    assert values.full_sha(SHA) == SHA


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("d4f4", "a short hash"),
        ("d4f41e4", "a short hash"),
        (SHA[:39], "a short hash"),
        ("d4f", "a branch or tag name"),
        (SHA + "0", "a branch or tag name"),
        (SHA.upper(), "a branch or tag name"),
        ("main", "a branch or tag name"),
        ("v2.5.2", "a branch or tag name"),
        (f"x{SHA}", "a branch or tag name"),
    ],
)
def test_anything_but_a_full_sha_says_what_it_is(value: str, kind: str) -> None:
    assert refused(values.full_sha, value) == (
        f"{value!r} is {kind}; fix: write the full 40-hex commit SHA (git rev-parse {value})"
    )


def test_a_snapshot_instant_is_returned() -> None:
    assert values.snapshot("20261115T000000Z") == "20261115T000000Z"
    assert values.snapshot("20240229T235959Z") == "20240229T235959Z"


@pytest.mark.parametrize(
    "value",
    ["2026-11-15", "20261115T000000", "20261115T000000Z1", "x20261115T000000Z", "20261345T000000Z",
     "20250229T000000Z", "20261115T246000Z", "2026111T0000000Z"],
)  # fmt: skip
def test_anything_but_a_real_instant_is_refused(value: str) -> None:
    assert refused(values.snapshot, value) == (
        f"{value!r} is not a UTC instant YYYYMMDDTHHMMSSZ; fix: write e.g. 20261115T000000Z"
    )


# ---- lists: archs, fabrics, distribution names -------------------------------------------------


def test_an_arch_list_is_its_archs_in_order() -> None:
    assert values.arch_list("10.0a, 9.0a") == ("10.0a", "9.0a")
    assert values.arch_list("9.0a") == ("9.0a",)


@pytest.mark.parametrize("arch", ["sm100", "9.9", "10.0b", "9.0a1", "90a"])
def test_an_arch_nvcc_does_not_know(arch: str) -> None:
    assert refused(values.arch_list, f"9.0a,{arch}") == (
        f"{arch!r} is not a GPU architecture; fix: write e.g. 9.0a or 10.0a, comma-separated"
    )


@pytest.mark.parametrize("value", [",9.0a", "9.0a,", "9.0a,,10.0a", "9.0a, ,10.0a"])
def test_a_list_with_an_empty_member(value: str) -> None:
    assert refused(values.arch_list, value) == (
        f"{value!r} has an empty member; fix: separate arch by single commas, none at the ends"
    )


def test_a_list_names_each_member_twice_once() -> None:
    assert refused(values.arch_list, "9.0a,10.0a,9.0a, 10.0a,9.0a") == (
        "'9.0a,10.0a,9.0a, 10.0a,9.0a' lists 10.0a, 9.0a twice; fix: name each arch once"
    )
    assert (
        refused(values.fabric_list, "ib,efa,ib") == "'ib,efa,ib' lists ib twice; fix: name each fabric once"
    )


def test_a_fabric_list_is_its_fabrics() -> None:
    assert values.fabric_list("ib,efa") == ("ib", "efa")


def test_a_fabric_list_with_an_unknown_fabric() -> None:
    assert refused(values.fabric_list, "efa,roce") == "'roce' is not a fabric; fix: use efa, ib"
    assert refused(values.fabric_list, "efa,") == (
        "'efa,' has an empty member; fix: separate fabric by single commas, none at the ends"
    )


def test_a_fabric_name() -> None:
    assert values.fabric_name("ib") == "ib"
    assert refused(values.fabric_name, "roce") == "'roce' is not a fabric; fix: use one of efa, ib"


def test_a_patch_series_is_returned_as_written() -> None:
    series = "https://x/a.patch#sha256=" + "0" * 64 + ", https://x/b.patch#sha256=" + "1" * 64
    assert values.patches(series) == series
    assert values.patches("none") == "none"
    assert "is not a pinned patch" in refused(values.patches, "https://x/a.patch")


@pytest.mark.parametrize("value", ["none", "nvidia-cuda-nvcc", "nvidia-nvvm,nvidia-cuda-nvcc", "a1-b2"])
def test_a_distribution_list_is_returned(value: str) -> None:
    assert values.distribution_list(value) == value


@pytest.mark.parametrize(
    "name", ["Nvidia-nvvm", "nvidia_nvvm", "nvidia--nvvm", "-nvvm", "nvvm-", "nvidia.nvvm"]
)
def test_a_distribution_name_that_is_not_canonical(name: str) -> None:
    assert refused(values.distribution_list, f"nvidia-cuda-nvcc,{name}") == (
        f"{name!r} is not a distribution name; fix: write none, or names like nvidia-cuda-nvcc, "
        "comma-separated"
    )


def test_a_distribution_list_names_each_name_once() -> None:
    assert refused(values.distribution_list, "nvidia-nvvm,nvidia-nvvm") == (
        "'nvidia-nvvm,nvidia-nvvm' lists nvidia-nvvm twice; fix: name each name once"
    )


def test_names_of_none_are_none() -> None:
    assert values.names("none") == ()
    assert values.names("nvidia-nvvm, nvidia-cuda-nvcc") == ("nvidia-nvvm", "nvidia-cuda-nvcc")
    assert values.names("None") == ("None",)


# ---- GIN types, patterns, ARCH_<NAME> keys ------------------------------------------------------


@pytest.mark.parametrize(("fabric", "value"), [("efa", "2"), ("efa", "5"), ("ib", "2"), ("ib", "3")])
def test_a_gin_type_the_fabric_has(fabric: str, value: str) -> None:
    assert values.gin_type(fabric)(value) == value


@pytest.mark.parametrize(
    ("fabric", "value", "message"),
    [
        ("efa", "3", "'3' is not a GIN type for AWS EFA; fix: use one of 2, 5"),
        ("ib", "5", "'5' is not a GIN type for InfiniBand/RoCE; fix: use one of 2, 3"),
    ],
)
def test_a_gin_type_the_fabric_lacks(fabric: str, value: str, message: str) -> None:
    assert refused(values.gin_type(fabric), value) == message


def test_a_pattern_accepts_its_form_and_names_the_example() -> None:
    check = values.pattern(r"^cu\d{3}$", "cu130")
    assert check("cu129") == "cu129"
    assert refused(check, "cu13") == "'cu13' is not of the form cu130; fix: write a value like cu130"


@pytest.mark.parametrize(("name", "key"), [("hopper", "ARCH_HOPPER"), ("grace-hopper", "ARCH_GRACE_HOPPER")])
def test_an_arch_name_and_its_key(name: str, key: str) -> None:
    assert values.arch_key(name) == key
    assert values.arch_name(key) == name


@pytest.mark.parametrize("key", ["ARCH_H100", "ARCH_B200_NVL72", "ARCH_9"])
def test_arch_keys_of_letters_and_digits_make_names(key: str) -> None:
    assert values.arch_key(values.arch_name(key)) == key
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", values.arch_name(key))


@pytest.mark.parametrize(
    "key", ["ARCH_", "ARCH__X", "ARCH_X_", "ARCH_A__B", "ARCH_hopper", "ARCH_A-B", "XARCH_A"]
)
def test_an_arch_key_that_makes_no_target_name(key: str) -> None:
    assert refused(values.arch_name, key) == (
        f"{key} does not make a target name; fix: write ARCH_ and a name of letters and digits "
        "joined by single underscores, e.g. ARCH_HOPPER"
    )
