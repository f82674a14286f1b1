"""The buildspec loader and its typed model: what the runner reads from a buildspec, the schema's
findings as lint prints them, and the one-line errors (file:line, fix) for what it refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from epstack.aws.buildspec import (
    MAX_NODES,
    Buildspec,
    Command,
    FileSet,
    Finding,
    Phase,
    load_buildspec,
    load_document,
    retry_findings,
    schema_findings,
)
from epstack.aws.retry import Retry
from epstack.errors import BadInput

Write = Callable[..., Path]

FULL = """
version: 0.2
run-as: builder
env:
  shell: bash
  variables:
    FLAG: true
    DISABLED: false
    OFF: no
    EMPTY:
    RATE: 1.5
    COUNT: 3
  parameter-store:
    TOKEN: /epstack/token
  secrets-manager:
    HF: epstack/hf:token
  exported-variables: [RATE, COUNT]
phases:
  post_build:
    commands:
      - echo post
  build:
    on-failure: RETRY-2-timeout
    commands:
      - make
      - make test
    finally:
      - echo done
  install:
    commands:
artifacts:
  files: [out/**]
  base-directory: out
  discard-paths: yes
  exclude-paths: out/tmp/*
  name: bundle
  secondary-artifacts:
    logs:
      files: [build.log]
      discard-paths: true
      exclude-paths: [a, b]
    notes:
      files: [notes.txt]
      discard-paths: no
reports:
  unit:
    files: [a.xml, b.xml]
    file-format: cucumberjson
    base-directory: reports
  plain:
    files: [c.xml]
"""


def test_the_model_holds_what_the_runner_runs_in_codebuild_s_phase_order(buildspec: Write) -> None:
    path = buildspec(FULL)
    assert load_buildspec(path) == Buildspec(
        path=path,
        shell="bash",
        variables={
            "FLAG": "true",
            "DISABLED": "false",
            "OFF": "no",
            "EMPTY": "",
            "RATE": "1.5",
            "COUNT": "3",
        },
        parameter_store={"TOKEN": "/epstack/token"},
        secrets_manager={"HF": "epstack/hf:token"},
        exported_variables=("RATE", "COUNT"),
        phases=(
            Phase(name="install", commands=(), finally_=(), on_failure=None, line=28),
            Phase(
                name="build",
                commands=(Command(text="make", line=24), Command(text="make test", line=25)),
                finally_=(Command(text="echo done", line=27),),
                on_failure="RETRY-2-timeout",
                retry=Retry(count=2, pattern="timeout"),
                line=21,
            ),
            Phase(
                name="post_build",
                commands=(Command(text="echo post", line=20),),
                finally_=(),
                on_failure=None,
                line=18,
            ),
        ),
        reports={
            "unit": FileSet(
                files=("a.xml", "b.xml"), base_directory="reports", file_format="CUCUMBERJSON", line=45
            ),
            "plain": FileSet(files=("c.xml",), line=49),
        },
        artifacts=FileSet(
            files=("out/**",),
            base_directory="out",
            discard_paths=True,
            exclude_paths=("out/tmp/*",),
            name="bundle",
            line=30,
        ),
        secondary_artifacts={
            "logs": FileSet(files=("build.log",), discard_paths=True, exclude_paths=("a", "b"), line=37),
            "notes": FileSet(files=("notes.txt",), line=41),
        },
        run_as=True,
        batch=False,
    )


def test_a_minimal_buildspec_takes_the_defaults(buildspec: Write) -> None:
    path = buildspec("version: 0.2\nphases:\n  build:\n    commands: [make]\n")
    assert load_buildspec(path) == Buildspec(
        path=path,
        shell="/bin/sh",
        variables={},
        parameter_store={},
        secrets_manager={},
        exported_variables=(),
        phases=(
            Phase(
                name="build", commands=(Command(text="make", line=4),), finally_=(), on_failure=None, line=3
            ),
        ),
    )


@pytest.mark.parametrize(
    ("text", "run_as", "batch", "shell"),
    [
        (
            "version: 0.2\nenv:\n  shell: powershell.exe\nphases:\n  build:\n    run-as: x\n"
            "    commands: [a]\n",
            True,
            False,
            "/bin/sh",
        ),
        (
            "version: 0.2\nbatch:\n  build-list:\n    - identifier: a\nphases:\n  build:\n"
            "    commands: [a]\n",
            False,
            True,
            "/bin/sh",
        ),
        (
            "version: 0.2\nenv:\n  shell: /bin/sh\nphases:\n  build:\n    commands: [a]\n",
            False,
            False,
            "/bin/sh",
        ),
    ],
)
def test_run_as_batch_and_shell_are_read_for_the_runner_to_refuse_or_use(
    buildspec: Write, text: str, run_as: bool, batch: bool, shell: str
) -> None:
    spec = load_buildspec(buildspec(text))
    assert (spec.run_as, spec.batch, spec.shell) == (run_as, batch, shell)
    assert [p.name for p in spec.phases] == ["build"]


@pytest.mark.parametrize("version", ["0.1", "'0.1'"])
def test_version_0_1_is_refused_at_its_line(buildspec: Write, version: str) -> None:
    path = buildspec(f"phases:\n  build:\n    commands: [make]\nversion: {version}\n")
    with pytest.raises(BadInput) as raised:
        load_buildspec(path)
    assert str(raised.value) == (
        f"{path}:4: run-local runs buildspec 0.2 (one shell for the whole build); 0.1 runs each command "
        "in its own shell; fix: write version: 0.2"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 0.2\nphases:\n  biuld:\n    commands: [make]\n",
            "{path}:3: [aws] phases.biuld: unknown key 'biuld'; did you mean build?",
        ),
        (
            "version: 0.2\nphases:\n  biuld:\n    commands: [make]\n  build:\n    on-failure: RETRY-101\n"
            "    commands: [make]\n",
            "{path}:3: [aws] phases.biuld: unknown key 'biuld'; did you mean build? "
            "(and 1 more: epstack codebuild lint {path})",
        ),
        (
            "version: 0.2\nphases:\n  build:\n    on-failure: RETRY-101\n    commands: [make]\n",
            "{path}:4: [aws] phases.build.on-failure: retries 101 times, over CodeBuild's 100; "
            "fix: RETRY-100 or fewer",
        ),
    ],
)
def test_the_runner_refuses_the_first_finding_and_counts_the_rest(
    buildspec: Write, text: str, message: str
) -> None:
    path = buildspec(text)
    with pytest.raises(BadInput) as raised:
        load_buildspec(path)
    assert str(raised.value) == message.format(path=path)


# ---- the schema's findings ----------------------------------------------------------------------

NAME_FIX = "fix: a shell variable name; CODEBUILD_ is reserved"


@pytest.mark.parametrize(
    ("text", "findings"),
    [
        (
            "version: 0.2\nenv:\n  variables:\n    1BAD: x\n    CODEBUILD_X: y\n  shell: zsh\n"
            "phases:\n  build:\n    commands: [make]\n",
            [
                (4, f"env.variables.1BAD: '1BAD' does not match '^[A-Za-z_][A-Za-z0-9_]*$'; {NAME_FIX}"),
                (5, f"env.variables.CODEBUILD_X: 'CODEBUILD_X' not allowed; {NAME_FIX}"),
                (6, "env.shell: 'zsh' is not one of 'bash', '/bin/sh', 'powershell.exe', 'cmd.exe'"),
            ],
        ),
        ("version: 0.2\nphases: []\n", [(2, "phases: expected object, got list []")]),
        (
            "version: 0.2\n",
            [(1, "(top level): {'version': 0.2} is not valid under any of the given schemas")],
        ),
        (
            "version: 0.2\nphases:\n  build: {commands: [true, make]}\n  zzz: {}\n"
            "cache: {paths: [a], action: keep}\n",
            [
                (
                    3,
                    "phases.build.commands.0: expected string, got bool True; fix: quote the command (a YAML "
                    "value that is not text, e.g. true or a mapping from ': ', is not a command)",
                ),
                (4, "phases.zzz: unknown key 'zzz'; expected one of build, install, post_build, pre_build"),
                (5, "cache.action: 'keep' is not one of 'restore', 'save'"),
            ],
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\nartifacts:\n  files: [x]\n"
            "  secondary-artifacts:\n    bad-name: {files: [y]}\n",
            [
                (
                    8,
                    "artifacts.secondary-artifacts.bad-name: 'bad-name' does not match "
                    "'^[A-Za-z0-9_]{1,127}$'; fix: an artifact identifier is letters, digits and "
                    "underscores, at most 127 (CodeBuild's rule)",
                )
            ],
        ),
        (
            "version: 0.2\nphases:\n  build:\n    commands: [make]\nreports: {"
            + ", ".join(f"{g}: {{files: [x]}}" for g in "abcdef")
            + "}\n",
            [
                (
                    5,
                    "reports: {"
                    + ", ".join(f"'{g}': {{'files': ['x']}}" for g in "abcdef")
                    + "} has too many properties; fix: a project has at most five report groups",
                )
            ],
        ),
        (
            "version: 0.2\nbatch:\n  build-list:\n    - identifier: a\n  build-graph:\n    - identifier: b\n",
            [(2, "batch: needs exactly one of build-list, build-graph, build-matrix or build-fanout")],
        ),
        (
            "version: 0.2\nbatch:\n  build-list:\n    - identifier: a\n"
            "      env: {compute-type: x, fleet: y}\n",
            [
                (
                    5,
                    "batch.build-list.0.env: these keys together not allowed; fix: compute-type or fleet, "
                    "not both (a fleet brings its own compute)",
                )
            ],
        ),
        (
            "version: 0.2\nenv:\n  exported-variables:\n    - OK\n    - AWS_REGION\n"
            "phases:\n  build:\n    commands: [make]\n",
            [
                (
                    5,
                    "env.exported-variables.1: 'AWS_REGION' not allowed; fix: a shell variable name; "
                    "variables starting with AWS_ cannot be exported (CODEBUILD_ ones can)",
                )
            ],
        ),
        (
            "version: 0.2\nphases:\n  build:\n    finally: [make]\n",
            [(3, "phases.build: 'commands' is a required property")],
        ),
    ],
)
def test_schema_findings_name_the_key_its_line_and_the_fix_in_line_order(
    buildspec: Write, text: str, findings: list[tuple[int, str]]
) -> None:
    path = buildspec(text)
    found = schema_findings(load_document(path))
    assert [(f.line, f.message) for f in found] == findings
    assert all(f.file == path and f.rules == "aws" for f in found)


def test_a_finding_prints_as_file_line_rule_set_and_message() -> None:
    finding = Finding(file=Path("b.yml"), line=3, message="phases: bad")
    assert str(finding) == "b.yml:3: [aws] phases: bad"
    assert str(Finding(file=Path("b.yml"), line=3, message="x", rules="epstack")) == "b.yml:3: [epstack] x"


@pytest.mark.parametrize(
    "text",
    [
        "version: 0.2\nphases: [build]\n",
        "version: 0.2\nphases:\n  build:\n  install: RETRY-101\n",
        "version: 0.2\nphases:\n  build:\n    on-failure: ABORT\n    commands: [make]\n",
    ],
)
def test_retry_findings_skip_phases_that_are_not_mappings_or_not_retries(buildspec: Write, text: str) -> None:
    assert retry_findings(load_document(buildspec(text))) == []


def test_each_phase_s_bad_retry_is_a_finding_at_its_on_failure(buildspec: Write) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  install:\n    commands: [a]\n    on-failure: RETRY-1-(\n"
        "  build:\n    on-failure: RETRY-200\n    commands: [make]\n"
    )
    assert [(f.line, f.message) for f in retry_findings(load_document(path))] == [
        (
            5,
            "phases.install.on-failure: '(' is not a regular expression (missing ), unterminated "
            "subpattern); fix: correct it",
        ),
        (7, "phases.build.on-failure: retries 200 times, over CodeBuild's 100; fix: RETRY-100 or fewer"),
    ]


# ---- the document -------------------------------------------------------------------------------


def test_a_line_is_the_deepest_key_or_item_of_the_path_that_exists(buildspec: Write) -> None:
    document = load_document(
        buildspec("# comment\nversion: 0.2\nphases:\n  build:\n    commands:\n      - a\n      - b\n")
    )
    assert document.line([]) == 2  # the mapping starts at its first key
    assert document.line(["phases"]) == 3
    assert document.line(["phases", "build", "commands", 1]) == 7
    assert document.line(["phases", "build", "commands", 0]) == 6
    assert document.line(["phases", "build", "commands", 2]) == 5
    assert document.line(["phases", "build", "commands", -1]) == 5
    assert document.line(["phases", "build", "commands", "0"]) == 5
    assert document.line(["phases", "install", "commands"]) == 3
    assert document.line(["version", "x"]) == 2


def test_plain_keeps_yaml_types_and_strings_lists_keys_and_text_values(buildspec: Write) -> None:
    document = load_document(
        buildspec("version: 0.2\nx:\n  n: 3\n  b: false\n  e:\n  s: on\n  l: [a, 1.5, yes]\n  1: k\n")
    )
    plain = document.plain()
    assert plain == {
        "version": 0.2,
        "x": {"n": 3, "b": False, "e": None, "s": "on", "l": ["a", 1.5, "yes"], "1": "k"},
    }
    assert [type(v) for v in plain["x"].values()] == [int, bool, type(None), str, list, str]
    assert type(plain["version"]) is float and type(plain["x"]["l"][1]) is float
    assert list(document.strings()) == [
        (("version",), "version"),
        (("x",), "x"),
        (("x", "n"), "n"),
        (("x", "b"), "b"),
        (("x", "e"), "e"),
        (("x", "s"), "s"),
        (("x", "s"), "on"),
        (("x", "l"), "l"),
        (("x", "l", 0), "a"),
        (("x", "l", 2), "yes"),
        (("x", "1"), "1"),
        (("x", "1"), "k"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n", "1: a buildspec is a mapping (version, phases, ...); fix: start with 'version: 0.2'"),
        ("", "1: a buildspec is a mapping (version, phases, ...); fix: start with 'version: 0.2'"),
        (
            "version: 0.2\n\nx: 'a\0b'\n",
            "3: character U+0000 is not allowed in YAML; fix: remove it, or write it as an escape in a "
            "double-quoted string",
        ),
        (
            "version: 0.2\nx: " + "[" * 70 + "]" * 70 + "\n",
            "2: nested over 64 levels deep; fix: flatten it (a buildspec needs 8 levels)",
        ),
        (
            "version: 0.2\nx: !!int " + "9" * 200 + "x\n",
            "2: '"
            + "9" * 60
            + "'... (201 chars) cannot be read as !!int; fix: quote it to keep it a string, or correct the "
            "value",
        ),
        (
            "version: 0.2\nx: !!float abc\n",
            "2: 'abc' cannot be read as !!float; fix: quote it to keep it a string, or correct the value",
        ),
        (
            "version: 0.2\nx: &a [1, [*a]]\n",
            "2: alias *a is inside the node it names (a cycle); fix: write the values out instead of the "
            "alias",
        ),
        (
            "version: 0.2\nx: " + "b" * 8193 + "\n",
            "2: a value of 8193 characters, over 8192; fix: put a long script in a file in the source and "
            "run that",
        ),
        (
            "version: 0.2\nx: &a [" + ", ".join(["1"] * 100) + "]\ny: [" + ", ".join(["*a"] * 100) + "]\n",
            f"3: over {MAX_NODES} nodes with aliases expanded; fix: use fewer aliases (a buildspec needs a "
            "few hundred nodes)",
        ),
        (
            "version: 0.2\nx: [a, b\n",
            "3: expected ',' or ']', but got '<stream end>'; fix: correct the YAML (quote commands "
            "with ': ')",
        ),
    ],
)
def test_a_document_it_cannot_read_is_one_line_naming_file_line_and_fix(
    buildspec: Write, text: str, message: str
) -> None:
    path = buildspec(text) if text else buildspec("")
    with pytest.raises(BadInput) as raised:
        load_document(path)
    assert str(raised.value) == f"{path}:{message}"


def test_a_value_of_exactly_the_bound_and_a_thousand_aliased_nodes_load(buildspec: Write) -> None:
    text = (
        "version: 0.2\nx: "
        + "b" * 8192
        + "\na: &a ["
        + ", ".join(["1"] * 99)
        + "]\ny: ["
        + ", ".join(["*a"] * 90)
        + "]\n"
    )
    document = load_document(buildspec(text))
    assert len(document.plain()["y"]) == 90 and len(document.plain()["x"]) == 8192


def flat_list(items: int) -> str:
    return "version: 0.2\nx: [" + ", ".join(["1"] * items) + "]\n"


def test_the_node_bound_counts_every_key_value_and_item(buildspec: Write) -> None:
    # root, version, 0.2, x, the list: 5 nodes besides the items
    assert len(load_document(buildspec(flat_list(MAX_NODES - 5))).plain()["x"]) == MAX_NODES - 5
    path = buildspec(flat_list(MAX_NODES - 4))
    with pytest.raises(BadInput, match=rf"^{path}:2: over {MAX_NODES} nodes with aliases expanded; "):
        load_document(path)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("x" * 160, repr("x" * 160)), ("x" * 161, repr("x" * 60) + "... (161 chars)"), ("abc", "'abc'")],
)
def test_a_value_its_tag_cannot_read_is_shown_whole_up_to_160_characters(
    buildspec: Write, value: str, shown: str
) -> None:
    path = buildspec(f"version: 0.2\nx: !!int {value}\n")
    with pytest.raises(BadInput) as raised:
        load_document(path)
    assert str(raised.value) == (
        f"{path}:2: {shown} cannot be read as !!int; fix: quote it to keep it a string, or correct the value"
    )


def test_an_anchor_defined_again_is_taken_by_later_aliases_without_a_warning(
    buildspec: Write, recwarn: pytest.WarningsRecorder
) -> None:
    document = load_document(buildspec("version: 0.2\na: &x 1\nb: &x 2\nc: *x\n"))
    assert document.plain() == {"version": 0.2, "a": 1, "b": 2, "c": 2}
    assert [str(w.message) for w in recwarn] == []


def test_findings_on_one_line_are_ordered_by_message(buildspec: Write) -> None:
    path = buildspec("version: 0.2\nphases: {zzz: {}, build: {commands: [1]}, aaa: {}}\n")
    assert [(f.line, f.message.split(":")[0]) for f in schema_findings(load_document(path))] == [
        (2, "phases.build.commands.0"),
        (2, "phases.zzz"),  # the first key not allowed
    ]


def test_phases_run_in_codebuild_s_order_whatever_the_file_s(buildspec: Write) -> None:
    path = buildspec(
        "version: 0.2\nphases:\n  post_build:\n    commands: [c]\n  build:\n    commands: [b]\n"
        "  pre_build:\n    commands: [a]\n  install:\n    commands: [i]\n"
    )
    assert [(p.name, p.line) for p in load_buildspec(path).phases] == [
        ("install", 9),
        ("pre_build", 7),
        ("build", 5),
        ("post_build", 3),
    ]


def test_a_character_yaml_refuses_is_named_at_its_line_counting_leading_blank_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "buildspec.yml"
    path.write_text("\nversion: 0.2\nx: a\0b\n")
    with pytest.raises(BadInput, match=rf"^{path}:3: character U\+0000 is not allowed in YAML; fix: "):
        load_document(path)


def test_a_yaml_error_with_only_a_context_is_named_by_it_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "buildspec.yml"
    path.write_text("version: 0.2\nx: |\n \n   \n  a\n")
    with pytest.raises(BadInput) as raised:
        load_document(path)
    assert str(raised.value) == (
        f"{path}:5: more indented follow up line than first in a block scalar; fix: correct the YAML "
        "(quote commands with ': ')"
    )
