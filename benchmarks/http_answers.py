"""Benchmark: the peak memory of reading a 300 MiB answer, through epstack.httpclient and as urllib reads it.

A server on 127.0.0.1 (a thread of this process) streams 300 MiB: with its Content-Length announced, or
without one (the end is the connection's close, so the size is known only once read). Each case runs in
a new Python process that makes one request and reports its peak resident memory (VmHWM) and how
the request ended; the interpreter with epstack.httpclient imported and no request is the baseline, and
`urllib.request.urlopen(url).read()` (what the forge, registry, index and SGLang clients did before
httpclient) the comparison, in the same run. Writes benchmarks/results/http_answers.json.
"""

from __future__ import annotations

import argparse
import http.server
import json
import platform
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "http_answers.json"
ANSWER_BYTES = 300 << 20  # 300 MiB
CHUNK = b"x" * (1 << 20)

# What each child runs; argv[1] is the URL. It prints {"peak_mib": ..., "ended": ...}.
CHILD = """
import json, sys
from epstack import httpclient
from epstack.errors import EpstackError
url = sys.argv[1]
try:
{action}
except EpstackError as exc:
    ended = f"exit {{exc.exit_code}}: {{exc}}"
# VmHWM: this process's peak resident memory (ru_maxrss keeps a forking parent's across exec)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024
print(json.dumps({{"peak_mib": round(peak, 1), "ended": ended}}))
"""
CASES: dict[str, tuple[str, str]] = {
    # name: (path on the server, what the child does with the URL)
    "baseline: the interpreter, httpclient imported, no request": (
        "/announced",
        "    ended = 'no request'",
    ),
    "urllib.request.urlopen(url).read(), Content-Length announced": (
        "/announced",
        "    import urllib.request\n"
        "    ended = f'read {len(urllib.request.urlopen(url, timeout=60).read()):,} bytes whole'",
    ),
    "urllib.request.urlopen(url).read(), no Content-Length": (
        "/unannounced",
        "    import urllib.request\n"
        "    ended = f'read {len(urllib.request.urlopen(url, timeout=60).read()):,} bytes whole'",
    ),
    "httpclient.request, 16 MiB cap (forge, registry), Content-Length announced": (
        "/announced",
        "    ended = str(httpclient.request('GET', url, timeout=60).status)",
    ),
    "httpclient.request, 16 MiB cap (forge, registry), no Content-Length": (
        "/unannounced",
        "    ended = str(httpclient.request('GET', url, timeout=60).status)",
    ),
    "python.releases (the package index, 64 MiB cap), no Content-Length": (
        "/unannounced",
        "    from epstack.python.releases import releases\n"
        "    ended = str(releases('sglang', index=url.removesuffix('/sglang/'), timeout=60))",
    ),
}


def _handler() -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            if not self.path.startswith("/unannounced"):
                self.send_header("Content-Length", str(ANSWER_BYTES))
            self.end_headers()
            try:
                for _ in range(ANSWER_BYTES // len(CHUNK)):
                    self.wfile.write(CHUNK)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped at its cap
                pass

    return Handler


@contextmanager
def served() -> Iterator[str]:
    """The 300 MiB server on 127.0.0.1 (HTTP/1.0: the close ends an unannounced body)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler())
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def measure(url: str, action: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(action=action), url],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=REPO,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each case (the median is kept)")
    args = parser.parse_args()
    cases = {}
    with served() as base:
        for name, (path, action) in CASES.items():
            runs = [measure(f"{base}{path}/sglang/", action) for _ in range(args.runs)]
            peaks = sorted(run["peak_mib"] for run in runs)
            cases[name] = {"peak_mib": peaks[len(peaks) // 2], "peaks_mib": peaks, "ended": runs[0]["ended"]}
    baseline = next(iter(cases.values()))["peak_mib"]
    for case in cases.values():
        case["over_baseline_mib"] = round(case["peak_mib"] - baseline, 1)
    results = {
        "command": "python benchmarks/http_answers.py",
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
        "answer_bytes": ANSWER_BYTES,
        "cases": cases,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
