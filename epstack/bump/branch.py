"""A bump as one commit on a branch of its own, pushed for a pull request (`pins bump --open-pr`).

The commit is made on HEAD with a temporary index: the user's branch, index and other changes stay as
they are. It is dated as HEAD and made by one identity (unless GIT_AUTHOR_*/GIT_COMMITTER_* say
otherwise), so the same bump on the same HEAD is the same commit, and a second run pushes nothing.
The push authenticates with GITHUB_TOKEN through a credential helper that reads it from the
environment: the token is on no command line and in no file.

Before the files are written, the pull request they are for is recorded in the checkout's git folder
(`Pending`): when the push or the forge fails, the same request run again finds the files as that run
wrote them and resumes at the commit, instead of refusing a value the pins already hold.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epstack.bump.forge import TOKEN_VARIABLE
from epstack.cmd import call, run
from epstack.document import Schema
from epstack.errors import BadInput, EnvironmentProblem, printable
from epstack.output import write_file

BRANCH_PREFIX = "epstack/pins-bump-"
IDENTITY = {"NAME": "epstack pins bump", "EMAIL": "epstack-pins-bump@users.noreply.github.com"}
GIT_TIMEOUT_S = 120.0
# A helper git runs through the shell: it prints the token from the environment when git asks.
CREDENTIAL_HELPER = f'!f() {{ echo username=x-access-token; echo "password=${TOKEN_VARIABLE}"; }}; f'


@dataclass(frozen=True, kw_only=True)
class Pushed:
    branch: str
    commit: str
    moved: bool  # False: the remote branch already held this very commit


def checkout_of(path: Path) -> Path:
    """The top of the git checkout holding `path`; BadInput where there is none."""
    try:
        result = run("git", "-C", path.resolve().parent, "rev-parse", "--show-toplevel", echo=False)
    except EnvironmentProblem:
        raise EnvironmentProblem("--open-pr: git: command not found; fix: install git") from None
    if result.returncode != 0:
        raise BadInput(f"--open-pr: {path} is not in a git checkout; fix: run in a clone of the repository")
    return Path(result.stdout.strip())


def remote_url(root: Path, remote: str) -> str:
    """The URL of `remote`; BadInput when the checkout has no such remote."""
    result = run("git", "-C", root, "remote", "get-url", remote, echo=False)
    if result.returncode != 0:
        raise BadInput(f"--open-pr: {root} has no git remote {remote!r}; fix: git remote add {remote} URL")
    return result.stdout.strip()


def branch_name(label: str) -> str:
    """The bump's branch: one per group, per set of keys, or for the digests; a later bump of the same
    pins updates it (and its pull request)."""
    return BRANCH_PREFIX + "".join(c if c.isalnum() or c in "-." else "-" for c in label.lower())


def _git_env(root: Path, index: Path) -> dict[str, str]:
    date = call("git", "-C", root, "log", "-1", "--format=%cI", "HEAD", capture=True, echo=False).strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(index), "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    for role in ("AUTHOR", "COMMITTER"):
        for part, value in IDENTITY.items():
            env.setdefault(f"GIT_{role}_{part}", value)
    return env


def commit_files(root: Path, files: Sequence[Path], *, message: str) -> str:
    """One commit on HEAD holding `files` as they are in the working tree; its hash. HEAD, the index and
    the branch are left as they were."""
    with tempfile.TemporaryDirectory(prefix="epstack-bump-") as folder:
        env = _git_env(root, Path(folder) / "index")
        call("git", "-C", root, "read-tree", "HEAD", env=env, timeout=GIT_TIMEOUT_S)
        relative = [str(file.resolve().relative_to(root.resolve())) for file in files]
        call("git", "-C", root, "add", "--", *relative, env=env, timeout=GIT_TIMEOUT_S)
        tree = call("git", "-C", root, "write-tree", env=env, capture=True, timeout=GIT_TIMEOUT_S).strip()
        commit = call(
            "git", "-C", root, "commit-tree", tree, "-p", "HEAD", "-m", message,
            env=env, capture=True, timeout=GIT_TIMEOUT_S,
        )  # fmt: skip
    return commit.strip()


def push(root: Path, commit: str, *, remote: str, branch: str) -> Pushed:
    """`commit` as the remote's `branch` (forced: the branch is the bump's own); nothing pushed when
    the remote branch is already that commit."""
    auth = ("-c", "credential.helper=", "-c", f"credential.helper={CREDENTIAL_HELPER}")
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    listed = run("git", *auth, "-C", root, "ls-remote", "--", remote, f"refs/heads/{branch}",
                 env=env, timeout=GIT_TIMEOUT_S)  # fmt: skip
    if listed.returncode != 0:
        detail = (listed.stderr.strip().splitlines() or [f"exit {listed.returncode}"])[-1]
        raise EnvironmentProblem(f"--open-pr: git ls-remote {remote}: {printable(detail)}")
    if listed.stdout.split("\t")[0].strip() == commit:
        return Pushed(branch=branch, commit=commit, moved=False)
    call("git", *auth, "-C", root, "push", "--force", "--", remote, f"{commit}:refs/heads/{branch}",
         env=env, timeout=GIT_TIMEOUT_S)  # fmt: skip
    return Pushed(branch=branch, commit=commit, moved=True)


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A bump written to the checkout for a pull request not made yet: the request that made it (its
    words), the pull request's title and body, and each file's sha256 as written (relative paths)."""

    request: str
    title: str
    body: str
    files: dict[str, str]


PENDING = Schema(
    name="pins-bump-pending",
    version=1,
    model=Pending,
    what="a pending pull request of pins bump",
    fix="remove it; the next pins bump --open-pr writes it again",
)


def _pending_path(root: Path, branch: str) -> Path:
    """Where the pending pull request of `branch` is recorded: the git folder, never the work tree."""
    git_dir = call("git", "-C", root, "rev-parse", "--absolute-git-dir", capture=True, echo=False).strip()
    return Path(git_dir) / "epstack-pins-bump" / f"{branch.removeprefix(BRANCH_PREFIX)}.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_pending(root: Path, branch: str, *, request: str, title: str, body: str,
                   texts: Mapping[Path, str]) -> Pending:  # fmt: skip
    """Record the pull request the files about to be written (`texts`) are for; the record."""
    files = {
        str(Path(os.path.realpath(path)).relative_to(root.resolve())): _sha256(text.encode())
        for path, text in texts.items()
    }
    path = _pending_path(root, branch)
    path.parent.mkdir(exist_ok=True)
    record = Pending(request=request, title=title, body=body, files=files)
    write_file(path, PENDING.dumps(record), what="the pending pull request")
    return record


def pending(root: Path, branch: str, request: str) -> Pending | None:
    """The pull request a run of the same `request` recorded and did not make, while every file it wrote
    is still as it wrote it; None otherwise (none recorded, another request, a file changed since)."""
    path = _pending_path(root, branch)
    if not path.is_file():
        return None
    try:
        found = PENDING.read(path)
    except BadInput:
        return None
    for name, digest in found.files.items():
        try:
            if _sha256((root / name).read_bytes()) != digest:
                return None
        except OSError:
            return None
    return found if found.request == request else None


def made(root: Path, branch: str) -> None:
    """The pull request of `branch` is made: nothing is pending."""
    _pending_path(root, branch).unlink(missing_ok=True)
