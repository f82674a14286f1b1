"""A real registry for the push and pull-by-digest tests: Debian's docker-registry (distribution
2.8) on 127.0.0.1 at a free port, its storage under the test's tmp directory, stopped by its PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REGISTRY = "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def local_registry(directory: Path) -> Iterator[str]:
    """Yield HOST:PORT of a running registry; stop it (by PID) and remove its storage after."""
    binary = shutil.which("docker-registry") or REGISTRY
    if not Path(binary).exists():
        if os.environ.get("CI"):
            pytest.fail("docker-registry is missing on CI (scripts/dev/docker-engine.sh start installs it)")
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {directory / 'storage'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    log = (directory / "registry.log").open("w")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"docker-registry did not start: {(directory / 'registry.log').read_text()[-500:]}"
                    )
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(directory / "storage", ignore_errors=True)
