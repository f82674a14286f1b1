"""commands.common.from_args: a settings dataclass from parsed arguments, field by same-named flag."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from epstack.commands import smoke
from epstack.commands.common import from_args, parse
from epstack.commands.main import build_parser
from epstack.smoke.serving import run as serving_run
from epstack.smoke.serving.checks import Asked


@dataclass(frozen=True, kw_only=True)
class _Wanted:
    seed: int
    timeout_s: float = 60.0


def test_each_field_is_the_same_named_argument_unless_computed() -> None:
    args = argparse.Namespace(seed=7, timeout_s=5.0, other="ignored")
    assert from_args(_Wanted, args) == _Wanted(seed=7, timeout_s=5.0)
    assert from_args(_Wanted, args, timeout_s=9.0) == _Wanted(seed=7, timeout_s=9.0)


def test_a_field_no_argument_gives_is_an_error_naming_it_even_with_a_default() -> None:
    with pytest.raises(TypeError, match=r"^_Wanted\.timeout_s: no such argument and none computed$"):
        from_args(_Wanted, argparse.Namespace(seed=1))


def _parsed(*argv: str) -> argparse.Namespace:
    args = parse(build_parser("smoke"), ["smoke", *argv])
    assert isinstance(args, argparse.Namespace)
    return args


def test_smoke_elastic_flags_reach_its_settings(tmp_path: Path) -> None:
    args = _parsed("elastic", "--profile", "tiny", "--num-tokens", "256", "--seed", "7", "--iters", "3",
                   "--nodes", "2", "--node-rank", "1", "--master-addr", "head", "--master-port", "29511",
                   "--timeout", "90", "--json", str(tmp_path / "r.json"), "--run-dir", str(tmp_path / "run"),
                   "--upstream-only")  # fmt: skip
    settings = smoke._settings(args)
    assert (settings.config.hidden, settings.config.num_tokens, settings.config.seed) == (512, 256, 7)
    assert settings.config.iters == 3
    assert settings.config.num_max_tokens_per_rank == 256  # the batch, unless given
    assert settings.config.report_path == str(tmp_path / "r.json")
    assert (settings.nnodes, settings.node_rank, settings.master_addr, settings.master_port) == (
        2,
        1,
        "head",
        29511,
    )
    assert (settings.timeout_s, settings.run_dir, settings.upstream_only) == (90, tmp_path / "run", True)


def test_smoke_serve_flags_reach_its_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[serving_run.Settings] = []

    def run(settings: serving_run.Settings, printer: serving_run.Printer) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(serving_run, "run", run)
    args = _parsed("serve", "--url", "http://127.0.0.1:30000", "--seed", "3", "--tokens", "16",
                   "--isl", "64", "--osl", "32", "--requests-per-level", "9", "--request-timeout", "11",
                   "--level-timeout", "22", "--health-timeout", "33", "--no-sweep",
                   "--json", str(tmp_path / "s.json"))  # fmt: skip
    assert smoke.cmd_serve(args, Console(file=None, quiet=True)) == 0
    [settings] = seen
    assert settings.url == "http://127.0.0.1:30000"
    assert settings.asked == Asked(seed=3, tokens=16, timeout_s=11)
    assert (settings.isl, settings.osl, settings.requests_per_level) == (64, 32, 9)
    assert (settings.level_timeout_s, settings.health_timeout_s) == (22, 33)
    assert (settings.report, settings.concurrencies, settings.compare) == (tmp_path / "s.json", (), False)
