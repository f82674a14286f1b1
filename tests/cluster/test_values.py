"""`cluster render -f FILE`: a values file renders exactly what its flags render (the production
golden), flags given too win, the shipped schema is the one written from the parser and
check-jsonschema reads it, and every bad key or value is one line naming the file and line, exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from epstack.cluster.values import KEYS, SCHEMA_PATH, values_schema
from epstack.commands.cluster import INPUT_OUTPUT, flags_of, render_parser
from epstack.commands.main import main
from tests.cluster.conftest import check_cluster_golden, render
from tests.cluster.test_production import K8S_FLAGS
from tests.conftest import PINS, REPO, venv_tool

EXAMPLE = REPO / "docs" / "examples" / "values" / "serve-production.yaml"
FLAGS = ["--platform", "k8s", "--job", "serve", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "ib"]


def test_the_values_file_renders_what_its_flags_render(tmp_path: Path) -> None:
    from tests.cluster.conftest import IMAGE  # noqa: PLC0415

    from_file = render(tmp_path, "render", "-f", str(EXAMPLE), "--pins", str(PINS), name="file.yaml")
    from_flags = render(
        tmp_path, "render", *FLAGS, "--image", IMAGE, "--pins", str(PINS), *K8S_FLAGS, name="flags.yaml"
    )
    assert from_file == from_flags
    check_cluster_golden(from_file, "serve-lws-deepseek-v3-production-2x8.yaml")


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    text = render(
        tmp_path, "render", "-f", str(EXAMPLE), "--pins", str(PINS), "--namespace", "other", "--nodes", "4"
    )
    assert 'namespace: "other"' in text and "inference" not in text
    assert "size: 4" in text and "size: 2" not in text


def test_the_shipped_schema_is_written_from_the_parser() -> None:
    assert SCHEMA_PATH.read_text() == values_schema(flags_of(render_parser())), "run `make schema`"


def test_every_render_option_is_a_key_or_input_output() -> None:
    """An option added to `cluster render` is settable from a values file, or said not to be."""
    flags = {
        next(name for name in action.option_strings if name.startswith("--"))
        for action in render_parser()._actions
        if action.option_strings and action.dest not in ("help", "quiet", "verbose")
    }
    assert flags - {key.flag for key in KEYS} - set(INPUT_OUTPUT) == set()


def test_check_jsonschema_reads_the_schema(tmp_path: Path) -> None:
    check = [venv_tool("check-jsonschema"), "--schemafile", str(SCHEMA_PATH)]
    assert subprocess.run([*check, str(EXAMPLE)], capture_output=True, check=False).returncode == 0
    broken = tmp_path / "broken.yaml"
    broken.write_text(EXAMPLE.read_text().replace("platform: k8s", "platform: nomad"))
    assert subprocess.run([*check, str(broken)], capture_output=True, check=False).returncode == 1


@pytest.mark.parametrize(
    ("change", "line", "said"),
    [
        (("platform: k8s", "platfrom: k8s"), 5, "'platfrom': not a key; fix: did you mean platform?"),
        (("platform: k8s", "platform: k9s"), 5, "platform: 'k9s' is not a choice; fix: did you mean k8s?"),
        (("  namespace: inference", "  namespace: Inference"), 15, "site.namespace (--namespace): "),
        (
            ("  storage-class: efs-sc", "  storage-class: EFS SC"),
            21,
            "storage.storage-class (--storage-class):",
        ),
        (("gpus-per-node: 8", "gpus-per-node: eight"), 8, "gpus-per-node: 'eight' is not of type 'integer'"),
        (
            ("secrets:", "scheduling:\n  memory: lots\nsecrets:"),
            24,
            "scheduling.memory (--memory): 'lots': not a",
        ),
        (("job: serve", "job: serve\n  nested: oops"), 7, "fix: correct the YAML"),
    ],
    ids=["unknown key", "choice", "namespace", "storage class", "type", "quantity", "yaml"],
)
def test_a_bad_values_file_is_one_line_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], line: int, said: str
) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(EXAMPLE.read_text().replace(*change))
    assert main(["cluster", "render", "-f", str(path), "--out", str(tmp_path / "out.yaml")]) == 2
    out, err = capsys.readouterr()
    (only,) = err.splitlines()
    assert only.startswith(f"error: {path}:{line}: ") and said in only, only
    assert out == "" and not (tmp_path / "out.yaml").exists()
