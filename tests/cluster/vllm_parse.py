"""Runs inside the vLLM parser environment (see vllm_env.py): reads [{"id", "argv"}] on stdin, each argv
what follows `vllm serve`, parses it as vLLM 0.33.0's CLI does (`vllm serve`: ServeSubcommand's
subparser, then its validate, validate_parsed_serve_args), and prints one JSON line: for each, whether
it parsed, the error, every warning (Python's and vLLM's logged ones, where deprecations go), and the
parsed values the tests compare with the plan."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import warnings

FIELDS = (
    "model_tag",
    "revision",
    "load_format",
    "trust_remote_code",
    "tensor_parallel_size",
    "data_parallel_size",
    "data_parallel_size_local",
    "data_parallel_address",
    "data_parallel_rpc_port",
    "nnodes",
    "node_rank",
    "headless",
    "enable_expert_parallel",
    "all2all_backend",
    "max_num_batched_tokens",
    "max_cudagraph_capture_size",
    "host",
    "port",
    "attention_backend",
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: PLC0415
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

        import_warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    logging.getLogger("vllm").addHandler(handler)
    results = []
    for command in commands:
        handler.messages.clear()
        parser = FlexibleArgumentParser()
        serve = ServeSubcommand()
        serve.subparser_init(parser.add_subparsers(dest="subparser"))
        stderr = io.StringIO()
        entry = {
            "id": command["id"],
            "ok": False,
            "error": "",
            "warnings": [],
            "import_warnings": import_warnings,
        }
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
            warnings.simplefilter("always")
            try:
                args = parser.parse_args(["serve", *command["argv"]])
                serve.validate(args)
                entry["ok"] = True
                entry["values"] = {name: getattr(args, name, None) for name in FIELDS}
            except SystemExit as exc:
                lines = stderr.getvalue().strip().splitlines()
                entry["error"] = f"exit {exc.code}: {lines[-1] if lines else ''}"
            except Exception as exc:  # anything else the parser raises is a failure too
                entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["warnings"] += [f"{w.category.__name__}: {w.message}" for w in caught] + handler.messages
        results.append(entry)
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
