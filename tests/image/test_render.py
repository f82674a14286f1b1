"""Render: deterministic, complete, lint-clean, and atomic."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from epstack import imagepaths
from epstack.commands.main import main
from epstack.image.render import plan_render, write_plan
from epstack.pins.load import load_pins
from epstack.python.lockfile import read_lock
from epstack.python.resolve import INSTALL_FLAGS, RESOLVE_FLAGS, uv_bin
from epstack.stack import CUDA_JIT_TOOLKIT, DEEP_EP_PROVIDERS
from tests.conftest import PINS, REPO, check_golden, pins_variant, tree_digest, venv_tool

GOLDEN = REPO / "tests" / "golden"
CREATED = datetime(2026, 11, 29, tzinfo=UTC)
REVISION = "0" * 40
LINT_CODES = {"DL3006", "DL3007", "DL3008", "DL3013"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render") / "out"
    write_plan(plan_render(load_pins(PINS), created=CREATED, revision=REVISION), out)
    return out


def test_render_twice_is_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764374400")
    assert main(["render", "--pins", str(PINS), "--out-dir", str(tmp_path / "a")]) == 0
    assert main(["render", "--pins", str(PINS), "--out-dir", str(tmp_path / "b")]) == 0
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        ".epstack-output",
        "docker-bake.json",
        "epstack-render.json",
        "scripts",
        "sources",
        "src",
        "standin",
        "targets",
    ]


@pytest.mark.parametrize("target", ["hopper-efa", "blackwell-ib"])
@pytest.mark.parametrize("layer", ["base", "deepep", "sglang", "vllm"])
def test_dockerfile_matches_golden(rendered: Path, target: str, layer: str) -> None:
    """The complete expected text; regenerate with EPSTACK_UPDATE_GOLDEN=1 and review the diff."""
    check_golden(
        (rendered / "targets" / target / f"{layer}.Dockerfile").read_text(),
        GOLDEN / target / f"{layer}.Dockerfile",
    )


def test_every_rendered_dockerfile_passes_hadolint(rendered: Path) -> None:
    dockerfiles = [*sorted(rendered.glob("targets/*/*.Dockerfile")), rendered / "standin" / "Dockerfile"]
    assert len(dockerfiles) == 17, "4 targets x 4 layers, and the stand-in"
    result = subprocess.run(
        [venv_tool("hadolint"), "--no-fail", "--format", "json", *map(str, dockerfiles)],
        capture_output=True,
        text=True,
        check=True,
    )
    findings = json.loads(result.stdout)
    assert [f for f in findings if f["code"] in LINT_CODES] == []
    assert findings == [], "hadolint has other findings too"


def test_hadolint_would_catch_an_unpinned_from(tmp_path: Path) -> None:
    """Proves the lint above can fail: a FROM without tag or digest is DL3006."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN true\n")
    result = subprocess.run(
        [venv_tool("hadolint"), "--no-fail", "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "DL3006" in {f["code"] for f in json.loads(result.stdout)}


def test_labels_carry_every_pin_and_tags_follow_the_pins(rendered: Path) -> None:
    pins = load_pins(PINS)
    plan = json.loads((rendered / "epstack-render.json").read_text())
    sglang = next(i for i in plan["images"] if i["name"] == "hopper-efa-sglang")
    assert sglang["tag"] == f"epstack:{pins.image_tag('sglang', 'hopper-efa')}"
    labels = sglang["labels"]
    for key, value in pins.layer_pins("sglang", "hopper-efa").items():
        assert labels[f"io.epstack.pin.{key.lower()}"] == value
    assert labels["org.opencontainers.image.created"] == "2026-11-29T00:00:00Z"
    assert labels["org.opencontainers.image.revision"] == REVISION
    assert labels["org.opencontainers.image.base.digest"] == pins.cuda_runtime_image.split("@")[1]
    base = next(i for i in plan["images"] if i["name"] == "hopper-efa-base")
    assert "org.opencontainers.image.revision" not in base["labels"], "a commit must not rebuild lower layers"


def test_bake_file_chains_layers(rendered: Path) -> None:
    bake = json.loads((rendered / "docker-bake.json").read_text())
    assert bake["group"]["default"]["targets"] == ["hopper-ib-sglang"]
    assert len(bake["group"]["all"]["targets"]) == 8, "both engines' images of 4 targets"
    assert bake["target"]["hopper-ib-vllm"]["contexts"] == bake["target"]["hopper-ib-sglang"]["contexts"]
    deepep = bake["target"]["hopper-efa-deepep"]
    assert deepep["dockerfile"] == "targets/hopper-efa/deepep.Dockerfile"
    assert deepep["contexts"] == {
        deepep["args"]["DEVEL_IMAGE"]: "target:hopper-efa-devel",
        deepep["args"]["BASE_IMAGE"]: "target:hopper-efa-base",
    }
    for entry in bake["target"].values():
        assert (rendered / entry["dockerfile"]).is_file()


def test_every_copy_source_exists_in_the_context(rendered: Path) -> None:
    for dockerfile in rendered.glob("targets/*/*.Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY ") and "--from=" not in line:
                for source in line.split()[1:-1]:
                    assert (rendered / source).exists(), f"{dockerfile.name}: {source}"


def test_every_layer_installs_exactly_its_lock(rendered: Path) -> None:
    """The committed locks, copied for every target, installed with the one set of install flags; the
    sglang lock keeps the base packages at their pins and brings no other deep_ep."""
    flags = " ".join(INSTALL_FLAGS)
    for target in load_pins(PINS).targets:
        for lock in ("base", "deepep-build", "sglang", "vllm"):
            copied = rendered / f"targets/{target}/locks/{lock}.txt"
            assert copied.read_bytes() == (REPO / "locks" / f"{lock}.txt").read_bytes()
    script = imagepaths.SCRIPTS / "install-python-packages.sh"
    for layer, locks in (
        ("base", ["base"]),
        ("deepep", ["deepep-build"]),
        ("sglang", ["sglang-closure", "sglang-family"]),
        ("vllm", ["vllm-closure", "vllm-family"]),
    ):
        text = (rendered / f"targets/hopper-efa/{layer}.Dockerfile").read_text()
        installs = [line.strip(" &\\") for line in text.splitlines() if f"{script} /" in line]
        assert installs == [f"{script} {imagepaths.LOCKS}/{lock}.txt {flags}" for lock in locks]
    for engine in ("sglang", "vllm"):
        held = read_lock(REPO / "locks", engine)
        assert held is not None
        versions = held.resolution.versions
        assert not set(DEEP_EP_PROVIDERS) & set(versions)
        pinned = load_pins(PINS).base_packages
        assert {name: versions[name] for name in pinned} == pinned, engine
    bootstrap = (rendered / "targets/hopper-efa/locks/uv-bootstrap.txt").read_text()
    assert bootstrap.startswith(f"uv=={load_pins(PINS).uv_version} \\\n    --hash=sha256:")


def test_the_install_and_resolve_flags_are_ones_the_pinned_uv_has() -> None:
    """A flag uv does not have exits the build at once (--no-install-package was one)."""
    for command, flags in (("install", (*INSTALL_FLAGS, "--requirement")), ("compile", RESOLVE_FLAGS)):
        helptext = subprocess.run(
            [uv_bin(), "pip", command, "--help"], capture_output=True, text=True, check=True
        ).stdout
        for flag in flags:
            assert flag in helptext, (command, flag)


def test_ib_target_pins_rdma_core_and_efa_target_checks_installer(rendered: Path) -> None:
    ib = (rendered / "targets/hopper-ib/base.Dockerfile").read_text()
    assert "libibverbs1=50.0-2ubuntu0.2" in ib and "install-efa.sh" not in ib
    efa = (rendered / "targets/hopper-efa/base.Dockerfile").read_text()
    assert "install-efa.sh 1.50.0 fa6dff85" in efa and "rdma-core=" not in efa


def test_deepep_builds_for_the_target_arch(rendered: Path) -> None:
    assert '"9.0a"' in (rendered / "targets/hopper-efa/deepep.Dockerfile").read_text()
    assert '"10.0a"' in (rendered / "targets/blackwell-efa/deepep.Dockerfile").read_text()


def test_bad_pins_leave_an_existing_directory_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["render", "--pins", str(PINS), "--out-dir", str(out)]) == 0
    before = tree_digest(out)
    bad = pins_variant(tmp_path, NCCL_VERSION="2.28.9")
    capsys.readouterr()
    assert main(["render", "--pins", str(bad), "--out-dir", str(out)]) == 2
    assert tree_digest(out) == before
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fix:" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "pins.env"], "no staging directory left"


def test_bad_pins_create_no_directory(tmp_path: Path) -> None:
    bad = pins_variant(tmp_path, DEEPEP_REF="main")
    assert main(["render", "--pins", str(bad), "--out-dir", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()


def test_rendered_scripts_are_the_repository_scripts(rendered: Path) -> None:
    for script in (REPO / "scripts/image").glob("*.sh"):
        copied = rendered / "scripts/image" / script.name
        assert copied.read_bytes() == script.read_bytes()
        assert copied.stat().st_mode & 0o111


def test_fabric_environment_follows_the_pinned_gin_type(tmp_path: Path) -> None:
    """NCCL_GIN_TYPE comes from EFA_GIN_TYPE/IB_GIN_TYPE; library paths never replace LD_LIBRARY_PATH."""
    out = tmp_path / "out"
    pins = pins_variant(tmp_path, IB_GIN_TYPE="2", DEEPEP_PATCHES_IB="none")
    write_plan(plan_render(load_pins(pins), created=CREATED, revision=REVISION), out)
    efa = (out / "targets/hopper-efa/base.Dockerfile").read_text()
    ib = (out / "targets/hopper-ib/base.Dockerfile").read_text()
    assert "ENV FI_PROVIDER=efa \\\n    NCCL_NET_PLUGIN=ofi \\\n    NCCL_GIN_TYPE=2\n" in efa
    assert "ENV NCCL_GIN_TYPE=2\n" in ib and "NCCL_SYM_GIN_KERNELS_ENABLE" not in efa
    for dockerfile in out.glob("targets/*/*.Dockerfile"):
        assert "LD_LIBRARY_PATH=" not in dockerfile.read_text()


@pytest.mark.parametrize(
    ("engine", "members"),
    [("sglang", {"sglang", "sglang-kernel", "flashinfer-python"}), ("vllm", {"vllm", "flashinfer-python"})],
)
def test_an_engine_lock_installs_in_two_layers_family_last(
    rendered: Path, engine: str, members: set[str]
) -> None:
    """Closure then family: together exactly the engine's lock, apart, and only the family moves with
    the engine's releases (a bump re-pulls the last layer)."""
    locks = rendered / "targets/hopper-ib/locks"

    def names(path: Path) -> list[str]:
        return [line.split("==")[0] for line in path.read_text().splitlines() if "==" in line]

    closure, family = names(locks / f"{engine}-closure.txt"), names(locks / f"{engine}-family.txt")
    whole = [name for name in names(locks / f"{engine}.txt") if not name.startswith("#")]
    assert sorted(closure + family) == sorted(whole) and not set(closure) & set(family)
    assert members <= set(family)
    assert "torch" not in family and "triton" not in family
    dockerfile = (rendered / f"targets/hopper-ib/{engine}.Dockerfile").read_text()
    assert dockerfile.index(f"{engine}-closure.txt --require-hashes") < dockerfile.index(
        f"{engine}-family.txt --require"
    )


def test_the_served_image_copies_exactly_what_the_jits_need_of_the_toolkit(rendered: Path) -> None:
    """Every CUDA_JIT_TOOLKIT part reaches the base stage, files of one folder in one COPY, each folder in
    its own (several sources in one COPY would spill a folder's contents), nothing else of devel's CUDA."""
    base = (rendered / "targets/hopper-ib/base.Dockerfile").read_text()
    stage = base[base.index(" AS base\n") :]
    copies = " ".join(
        line for line in stage.replace("\\\n", " ").splitlines() if "--from=devel /usr/local" in line
    )
    sources = [word for word in copies.split() if word.startswith("/usr/local/cuda-13.0/")]
    wanted = {f"/usr/local/cuda-13.0/{part}" for part, _ in CUDA_JIT_TOOLKIT}
    assert wanted <= set(sources) and set(sources) - wanted == {"/usr/local/cuda-13.0/bin/"}
    assert copies.count("COPY") == 1 + sum(part.endswith("/") for part, _ in CUDA_JIT_TOOLKIT)
    assert "link-cuda-dev.sh /usr/local/cuda-13.0 13" in stage and "libpython${PYTHON_VERSION}-dev" in stage


def test_the_standin_stands_in_for_the_pinned_flavour(tmp_path: Path) -> None:
    """base: cudart only, as NVIDIA's base image; runtime: every library and the system NCCL."""
    digest = "sha256:" + "0" * 64
    for flavour, system_nccl in (("base", False), ("runtime", True)):
        (tmp_path / flavour).mkdir()
        pins = pins_variant(
            tmp_path / flavour, CUDA_RUNTIME_IMAGE=f"nvidia/cuda:13.0.3-{flavour}-ubuntu24.04@{digest}"
        )
        plan = plan_render(load_pins(pins), created=CREATED, revision=REVISION)
        standin = plan.files["standin/Dockerfile"].decode()
        runtime = standin[standin.index(" AS runtime\n") :]
        assert f"COPY --from=toolkit /opt/standin/{flavour}/ /" in runtime
        assert ("system-nccl" in runtime) == system_nccl
