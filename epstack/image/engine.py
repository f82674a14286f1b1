"""The Docker engine as epstack uses it: a CLI that can drive BuildKit, and a few queries."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epstack.cmd import call, output_if_ok, pipe, status_and_output, succeeds
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
        cache: Sequence[str] = (),
        attest: Sequence[str] = (),
    ) -> None:
        """`cache`: extra --cache-from/--cache-to arguments (registry_cache_args), buildx only;
        `attest`: attestation arguments (PROVENANCE_ARGS), where provenance_supported()."""
        build = ["buildx", "build", "--load"] if self.buildx else ["build"]
        argv = [self.cli, *build, "--progress", progress, "-f", dockerfile, "--target", stage, "-t", tag]
        argv += [*cache, *attest]
        for key, value in sorted(args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(labels.items()):
            argv += ["--label", f"{key}={value}"]
        call(*argv, ".", cwd=context, env=self._env())

    def free_disk(self) -> tuple[Path, int] | None:
        """The engine's data root (images, BuildKit's cache) and its free bytes, where that folder is
        on this machine; None for a remote engine (DOCKER_HOST) or one that does not say."""
        root = output_if_ok(self.cli, "info", "--format", "{{.DockerRootDir}}")
        path = Path(root.strip()) if root and root.strip() else None
        if path is None or not path.is_dir():
            return None
        return path, shutil.disk_usage(path).free

    def provenance_supported(self) -> bool:
        """BuildKit attaches a provenance attestation through buildx, and `--load` keeps it only in the
        containerd image store; the classic CLI's BuildKit (docker 20.10 here) has no such flag."""
        if not self.buildx:
            return False
        status = output_if_ok(self.cli, "info", "--format", "{{json .DriverStatus}}") or ""
        return "io.containerd.snapshotter" in status

    def run(self, image: str, command: Sequence[str]) -> str:
        return call(self.cli, "run", "--rm", image, *command, capture=True)

    def _inspect(self, ref: str, template: str) -> str:
        return call(self.cli, "image", "inspect", "--format", template, ref, capture=True, echo=False).strip()

    def image_id(self, ref: str) -> str:
        """sha256:... of the image config: equal in every registry the image is pushed to."""
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

    # ---- registries (publish, pull by digest) ---------------------------------------------------

    def tag(self, source: str, target: str) -> None:
        call(self.cli, "tag", source, target)

    def push(self, ref: str) -> None:
        call(self.cli, "push", ref)

    def pull_quiet(self, ref: str) -> None:
        """Pull or fail with the registry's reason (pull() only says whether it worked)."""
        call(self.cli, "pull", "--quiet", ref, capture=True)

    def remove(self, ref: str) -> None:
        """Untag `ref` (the image stays while another tag names it)."""
        call(self.cli, "image", "rm", ref, capture=True)

    def repo_digests(self, ref: str) -> list[str]:
        digests: list[str] = json.loads(self._inspect(ref, "{{json .RepoDigests}}")) or []
        return digests

    def image_env(self, ref: str) -> dict[str, str]:
        pairs: list[str] = json.loads(self._inspect(ref, "{{json .Config.Env}}")) or []
        return dict(pair.split("=", 1) for pair in pairs if "=" in pair)

    def login(self, registry: str, username: str, password: str) -> None:
        """`docker login --password-stdin`: the password never appears in argv or the log."""
        call(self.cli, "login", "--username", username, "--password-stdin", registry, stdin=password.encode())

    def run_check(self, image: str, entrypoint: str, command: Sequence[str]) -> tuple[int, str]:
        """Run a check inside the image: its exit status and stdout (stderr goes to the log)."""
        return status_and_output(self.cli, "run", "--rm", "--entrypoint", entrypoint, image, *command)

    def registry_cache_args(self, ref: str) -> list[str]:
        """BuildKit's registry cache in `ref`, in a form ECR accepts (OCI, image manifest)."""
        cache = f"type=registry,ref={ref}"
        export = f"{cache},mode=max,image-manifest=true,oci-mediatypes=true"
        return ["--cache-from", cache, "--cache-to", export]
