"""An example for every command's --help, and the help formatter that shows it: `document(parser)`
(commands.main.build_parser runs it) gives each parser registered its example as the epilog, and prints
each option's default after its help where the help does not say it. tests/commands/test_help.py fails
on a command without an example or an option without help."""

from __future__ import annotations

import argparse

from epstack.commands.common import commands

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/epstack"

# Command (as typed after `epstack`) -> its example lines, shown under "examples:".
EXAMPLES: dict[str, str] = {
    "": "epstack pins check\nepstack build hopper-ib\nepstack COMMAND --help",
    "pins check": "epstack pins check\nepstack pins check --json - | jq .NCCL_VERSION",
    "pins get": "epstack pins get NCCL_VERSION TORCH_VERSION",
    "pins predict": "epstack pins predict --pins pins.env",
    "pins bump": "epstack pins bump SGLANG_VERSION=0.5.24 --dry-run\n"
    "epstack pins bump --group sglang --open-pr",
    "pins outdated": "epstack pins outdated --json build/outdated.json",
    "render": "epstack render --out build/render",
    "build": "epstack build hopper-ib --report build/report.json",
    "guard": "epstack guard --layer sglang --json -",
    "image guard": "epstack image guard --layer sglang --json reports/sglang.json --record",
    "jit probe": "epstack jit probe --layer sglang --cuda-arch 9.0a --json build/jit.json",
    "image jit-unpack": "epstack image jit-unpack kernels.tar.gz --sha256 "
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "jit export": "epstack jit export --out /results/deep_ep-kernels.tar.gz",
    "jit layer": f"epstack jit layer --image {IMAGE}:sglang-TAG --export deep_ep-kernels.tar.gz",
    "image jit-install": "epstack image jit-install",
    "pins lock": "epstack pins lock --check\nepstack pins lock --upgrade pydantic==2.13.0",
    "image sbom": "epstack image sbom --layer sglang --out sglang.cdx.json\n"
    "epstack image sbom --validate sglang.cdx.json",
    "image deepep-build": "epstack image deepep-build --wheel-dir build/wheels --cuda-arch 9.0 --fabric ib",
    "image nccl-check": "epstack image nccl-check --loaded\n"
    "epstack image nccl-check --library /usr/lib/libnccl.so.2",
    "image sources-verify": "epstack image sources-verify sources/deepep.tar.gz "
    "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb",
    "doctor": "epstack doctor --json -",
    "smoke elastic": "epstack smoke elastic --gpus-per-node 8 --profile deepseek-v3 --json smoke.json",
    "smoke serve": "epstack smoke serve --profile tiny --gpus-per-node 2 --json serve.json\n"
    "epstack smoke serve --url http://10.0.0.1:30000 --no-sweep",
    "smoke tiny-model": "epstack smoke tiny-model --out-dir /models/tiny-qwen3-moe",
    "smoke plot": "epstack smoke plot serve.json --out sweep.png",
    "cluster render": "epstack cluster render --platform k8s --job serve --nodes 2 --gpus-per-node 8 "
    "--manifest build/manifest.json --out serve.yaml",
    "cluster metrics": "epstack cluster metrics --report reports/guard.json --out metrics/epstack-guard.prom",
    "cluster prepull": "epstack cluster prepull --platform slurm --manifest build/manifest.json --nodes 16",
    "publish push": f"epstack publish push build/report.json --registry {IMAGE.rsplit('/', 1)[0]}",
    "publish pull": f"epstack publish pull --registry {IMAGE.rsplit('/', 1)[0]} --target hopper-ib",
    "codebuild lint": "epstack codebuild lint buildspecs/*.yml",
    "codebuild run-local": "epstack codebuild run-local buildspecs/build.yml --env EPSTACK_TARGET=hopper-ib",
    "codebuild start": "epstack codebuild start --project epstack-images --target hopper-ib --watch",
    "codebuild batchspec": "epstack codebuild batchspec --no-smoke > buildspecs/batch.yml\n"
    "epstack codebuild batchspec --smoke-fleet arn:aws:codebuild:us-east-1:123456789012:fleet/h100:1 "
    "> batch.yml\n"
    "epstack codebuild batchspec --no-smoke --compare buildspecs/batch.yml",
    "publish login": f"epstack publish login {IMAGE.rsplit('/', 1)[0]}",
    "publish digest": f"epstack publish digest {IMAGE}:sglang-TAG",
    "publish promote": f"epstack publish promote {IMAGE}:sglang-TAG {IMAGE}:stable",
    "completion": "epstack completion bash > ~/.local/share/bash-completion/completions/epstack\n"
    'epstack completion zsh > "${fpath[1]}/_epstack"\n'
    "epstack completion fish > ~/.config/fish/completions/epstack.fish",
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; an option's default after its help unless the help says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = not (default is None or isinstance(default, bool) or default in ("", [], argparse.SUPPRESS))
        if shown and action.option_strings and "default" not in text and str(action.default) not in text:
            return f"{text} (default: %(default)s)"
        return text


def example(command: str) -> str:
    """The epilog of `command`'s --help: its examples; a group's, the first of each of its commands'."""
    lines = EXAMPLES[command].splitlines() if command in EXAMPLES else [
        text.splitlines()[0] for path, text in EXAMPLES.items() if path.startswith(f"{command} ")
    ]  # fmt: skip
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def document(parser: argparse.ArgumentParser) -> None:
    """Give `parser` and every command under it the help formatter and its examples."""
    for path, command in commands(parser):
        command.formatter_class = HelpFormatter
        command.epilog = example(path)
