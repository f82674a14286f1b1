"""`epstack image ...`: the commands that run inside an image's build or its container start (the
Dockerfiles, scripts/image/ and the entrypoint call them), out of the way of the user's commands.

Each is registered by the module that runs it; only the chosen one's module is imported, since the
entrypoint runs `epstack image guard --at-start` and `epstack image jit-install` at every start.
"""

from __future__ import annotations

import importlib

from epstack.commands.common import SubParsers

# Each command of `epstack image` and the module:function that adds it.
IMAGE_COMMANDS: dict[str, str] = {
    "guard": "epstack.commands.guard:register_image",
    "sbom": "epstack.commands.sbom:register",
    "jit-install": "epstack.commands.jit:register_image",
    "jit-unpack": "epstack.commands.jit:register_image",
    "nccl-check": "epstack.commands.nccl:register",
    "sources-verify": "epstack.commands.sources:register",
    "deepep-build": "epstack.commands.deepep:register",
}


def register(subparsers: SubParsers, chosen: str | None = None) -> None:
    """Add `image` with `chosen`'s command, or every one when `chosen` is None or not one of them."""
    image = subparsers.add_parser(
        "image", help="what an image's build and its container start run (not needed by hand)"
    )
    commands = image.add_subparsers(dest="image_command", required=True, metavar="SUBCOMMAND")
    wanted = [IMAGE_COMMANDS[chosen]] if chosen in IMAGE_COMMANDS else IMAGE_COMMANDS.values()
    for target in dict.fromkeys(wanted):
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)(commands)
