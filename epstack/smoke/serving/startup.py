"""Where a server's start-up went, read from its own log (SGLang 0.5.23's lines, or vLLM 0.33.0's):
seconds from launch to each milestone, SGLang's "Engine startup timings" summary, and each DeepGEMM JIT
session (the kernel, its N, K and groups, the Ms and the seconds its warm-up bar took). A cold start's
minutes are named here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

# a stamped line; a progress bar may come before it on the same line
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$")
# (milestone, what its first line starts with)
MILESTONES: tuple[tuple[str, str], ...] = (
    ("first_log_line", ""),
    ("weights_loaded", "Load weight end."),
    ("kv_cache_allocated", "KV Cache is allocated."),
    ("deepep_v2_buffer", "Initialized DeepEP v2 ElasticBuffer"),
    ("cuda_graphs_captured", "Capture target decode CUDA graph end."),
    ("http_listening", "INFO:     Uvicorn running on"),
    ("warmup_request_done", "The server is fired up and ready to roll!"),
)
# vLLM's lines: "(EngineCore pid=7) INFO 12-07 16:35:23 [gpu_worker.py:773] message", no year (its
# logger's _DATE_FORMAT); the milestones from vLLM 0.33.0's own messages.
_VLLM_STAMP = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]*\] (.*)$")
VLLM_MILESTONES: tuple[tuple[str, str], ...] = (
    ("first_log_line", ""),
    ("weights_loaded", "Loading weights took"),
    ("model_loaded", "Model loading took"),
    ("compiled_or_loaded", "torch.compile took"),
    ("kv_cache_allocated", "Available KV cache memory"),
    ("cuda_graphs_captured", "Graph capturing finished"),
    ("engine_ready", "init engine (profile, create kv cache, warmup model) took"),
    ("http_listening", "Starting vLLM server on"),
)
_TIMINGS = re.compile(r"Engine startup timings \(s\): (.*)$")
_TIMING = re.compile(r"(\w+)=([\d.]+)")
_DEEPGEMM = re.compile(r"Try DeepGEMM JIT Compiling for <(\w+)> N=(\d+), K=(\d+), num_groups=(\d+)")
# the session's end: tqdm's last bar, "DeepGEMM warmup: 100%|...| 4096/4096 [00:07<00:00, ...]"
_WARMUP_DONE = re.compile(r"DeepGEMM warmup: 100%\|[^|]*\| (\d+)/\d+ \[(?:(\d+):)?(\d+):(\d+)<")


@dataclass(frozen=True, kw_only=True)
class DeepGemmSession:
    kernel: str  # SGLang's kernel type, e.g. GROUPED_GEMM_NT_BF16_MASKED
    n: int
    k: int
    num_groups: int
    ms: int  # the M values it compiled or loaded ("with all Ms", bounded by free memory)
    at_s: float  # from launch
    seconds: int  # its warm-up bar's elapsed time


@dataclass(frozen=True, kw_only=True)
class Startup:
    milestones_s: dict[str, float]  # seconds from launch (the log's whole seconds)
    engine_timings_s: dict[str, float]  # SGLang's own summary, cuda_graph's parts as cuda_graph.<part>
    deepgemm: list[DeepGemmSession]

    @property
    def deepgemm_s(self) -> int:
        return sum(s.seconds for s in self.deepgemm)


def _timings(text: str) -> dict[str, float]:
    graphs = re.search(r"cuda_graph=\{([^}]*)\}", text)
    found = {k: float(v) for k, v in _TIMING.findall(re.sub(r"cuda_graph=\{[^}]*\}", "", text))}
    if graphs:
        found |= {f"cuda_graph.{k}": float(v) for k, v in _TIMING.findall(graphs.group(1))}
    return found


def _sessions(log: str, launched: datetime) -> list[DeepGemmSession]:
    sessions = []
    for found in _DEEPGEMM.finditer(log):
        line_start = log.rfind("\n", 0, found.start()) + 1
        stamp = _STAMP.search(log[line_start : found.end()])
        done = _WARMUP_DONE.search(log, found.end())
        if stamp is None or done is None:
            continue  # the server stopped inside the session
        hours, minutes, secs = (int(part or 0) for part in done.group(2, 3, 4))
        sessions.append(DeepGemmSession(
            kernel=found.group(1), n=int(found.group(2)), k=int(found.group(3)),
            num_groups=int(found.group(4)), ms=int(done.group(1)),
            at_s=round((datetime.fromisoformat(stamp.group(1)) - launched).total_seconds(), 1),
            seconds=hours * 3600 + minutes * 60 + secs,
        ))  # fmt: skip
    return sessions


def read_vllm(log: str, launched: datetime) -> Startup:
    """The start-up of the vLLM server whose log is `log`, launched at `launched` (local time, as vLLM
    stamps its lines, in `launched`'s year)."""
    milestones: dict[str, float] = {}
    for found in map(_VLLM_STAMP.search, log.splitlines()):
        if found is None:
            continue
        at_time = datetime.strptime(f"{launched.year}-{found.group(1)}", "%Y-%m-%d %H:%M:%S")
        for name, start in VLLM_MILESTONES:
            if name not in milestones and found.group(2).startswith(start):
                milestones[name] = round((at_time - launched).total_seconds(), 1)
    return Startup(milestones_s=milestones, engine_timings_s={}, deepgemm=[])


def read(log: str, launched: datetime) -> Startup:
    """The start-up of the server whose log is `log`, launched at `launched` (local time, as SGLang
    stamps its lines)."""
    milestones: dict[str, float] = {}
    timings: dict[str, float] = {}
    for found in map(_STAMP.search, log.splitlines()):
        if found is None:
            continue
        at = round((datetime.fromisoformat(found.group(1)) - launched).total_seconds(), 1)
        text = found.group(2)
        for name, start in MILESTONES:
            if name not in milestones and text.startswith(start):
                milestones[name] = at
        if (summary := _TIMINGS.search(text)) and not timings:
            timings = _timings(summary.group(1))
    return Startup(milestones_s=milestones, engine_timings_s=timings, deepgemm=_sessions(log, launched))
