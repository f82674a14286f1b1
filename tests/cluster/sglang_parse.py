"""Runs inside the SGLang parser environment (see sglang_env.py): reads [{"id", "argv"}] on stdin,
parses each argv with sglang.srt.server_args.prepare_server_args, and prints for each: whether it
parsed, argparse's error, every warning (Python warnings and SGLang's logged warnings, where its
deprecated-flag messages go), and the parsed values the tests compare with the plan."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import warnings

FIELDS = (
    "model_path",
    "tp_size",
    "dp_size",
    "attn_dp_size",
    "ep_size",
    "moe_a2a_backend",
    "deepep_v2_mode",
    "deepep_mode",
    "chunked_prefill_size",
    "cuda_graph_max_bs_decode",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "host",
    "port",
    "trust_remote_code",
    "load_format",
    "attention_backend",
    "revision",
    "enable_metrics",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "disaggregation_bootstrap_port",
)


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def main() -> None:
    commands = json.load(sys.stdin)
    handler = Collect()
    # prepare_server_args reconfigures the root logger (basicConfig force=True); SGLang's own logger
    # keeps this handler, and its deprecation messages propagate through it.
    logging.getLogger("sglang").addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from sglang.srt.server_args import prepare_server_args  # noqa: PLC0415

        import_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    results = []
    for command in commands:
        handler.messages.clear()
        stderr = io.StringIO()
        entry = {"id": command["id"], "ok": False, "error": "", "warnings": list(import_warnings)}
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
            warnings.simplefilter("always")
            try:
                args = prepare_server_args(list(command["argv"]))
                entry["ok"] = True
                entry["values"] = {name: getattr(args, name, None) for name in FIELDS}
            except SystemExit as exc:
                lines = stderr.getvalue().strip().splitlines()
                entry["error"] = f"exit {exc.code}: {lines[-1] if lines else ''}"
            except Exception as exc:  # anything else the parser raises is a failure too
                entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["warnings"] += [f"{w.category.__name__}: {w.message}" for w in caught] + handler.messages
        results.append(entry)
    json.dump(results, sys.stdout, default=str)


if __name__ == "__main__":
    main()
