"""The Docker engine as epstack uses it: a CLI that can drive BuildKit, and a few queries."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epstack.cmd import call, pipe, succeeds
from epstack.errors import EnvironmentProblem

START_HINT = (
    "no Docker engine answers; start one (on a root Debian/Ubuntu machine: "
    "scripts/dev/docker-engine.sh start) or set DOCKER_HOST"
)


@dataclass(frozen=True, kw_only=True)
class DockerEngine:
    """A docker CLI plus how it reaches BuildKit: `buildx build --load` or DOCKER_BUILDKIT=1."""

    cli: str
    buildx: bool

    @classmethod
    def find(cls) -> DockerEngine:
        """The first docker CLI (EPSTACK_DOCKER, PATH, Debian's) that answers and can use BuildKit."""
        candidates = [os.environ.get("EPSTACK_DOCKER", ""), shutil.which("docker") or "", "/usr/bin/docker"]
        answered = False
        for cli in dict.fromkeys(c for c in candidates if c):
            if not succeeds(cli, "info"):
                continue
            answered = True
            if succeeds(cli, "buildx", "version"):
                return cls(cli=cli, buildx=True)
            version = call(cli, "version", "--format", "{{.Client.Version}}", capture=True, echo=False)
            if int(version.split(".")[0]) < 23:  # before 23 the classic CLI carries BuildKit itself
                return cls(cli=cli, buildx=False)
        if answered:
            raise EnvironmentProblem(
                "the Docker engine answers but no CLI here can use BuildKit; install docker-buildx"
            )
        raise EnvironmentProblem(START_HINT)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_BUILDKIT": "1"}

    def image_exists(self, ref: str) -> bool:
        return succeeds(self.cli, "image", "inspect", ref)

    def pull(self, ref: str) -> bool:
        """Try to pull; False when the registry cannot be reached or refuses."""
        return succeeds(self.cli, "pull", "--quiet", ref)

    def build(
        self,
        *,
        context: Path,
        dockerfile: str,
        stage: str,
        tag: str,
        args: Mapping[str, str],
        labels: Mapping[str, str],
        progress: str = "plain",
    ) -> None:
        build = ["buildx", "build", "--load"] if self.buildx else ["build"]
        argv = [self.cli, *build, "--progress", progress, "-f", dockerfile, "--target", stage, "-t", tag]
        for key, value in sorted(args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(labels.items()):
            argv += ["--label", f"{key}={value}"]
        call(*argv, ".", cwd=context, env=self._env())

    def run(self, image: str, command: Sequence[str]) -> str:
        return call(self.cli, "run", "--rm", image, *command, capture=True)

    def _inspect(self, ref: str, template: str) -> str:
        return call(self.cli, "image", "inspect", "--format", template, ref, capture=True, echo=False).strip()

    def image_id(self, ref: str) -> str:
        """sha256:... of the local image (its config digest)."""
        return self._inspect(ref, "{{.Id}}")

    def image_size(self, ref: str) -> int:
        return int(self._inspect(ref, "{{.Size}}"))

    def labels(self, ref: str) -> dict[str, str]:
        out = call(self.cli, "image", "inspect", "--format", "{{json .Config.Labels}}", ref, capture=True)
        labels: dict[str, str] = json.loads(out) or {}
        return labels

    def import_rootfs(self, rootfs: Path, ref: str, changes: Sequence[str]) -> None:
        """`tar -C rootfs -c . | docker import --change ... - ref`."""
        argv: list[str] = [self.cli, "import"]
        for change in changes:
            argv += ["--change", change]
        pipe(["tar", "-C", str(rootfs), "-c", "."], [*argv, "-", ref])
