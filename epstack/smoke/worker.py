"""One rank of the elastic smoke, on a GPU: `python -m epstack.smoke.worker --config C --run-dir D`.

Started by epstack.smoke.supervise with the env:// variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). Writes its stage to D/rank<N>.stage and its figures to
D/rank<N>.json; rank 0 also writes D/all_ranks.json with every rank's figures. Exit 0 pass,
1 a check failed, 2 the environment is wrong (classified).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch  # type: ignore[import-not-found, unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

from epstack.smoke.classify import classify
from epstack.smoke.config import SmokeConfig
from epstack.smoke.nccl import loaded_nccl
from epstack.smoke.reference import (
    Mismatch,
    Received,
    Routing,
    cast_to_fp8,
    combine_input,
    dequantize,
    expected_combine,
    first_combine_mismatch,
    first_dispatch_mismatch,
    make_routing,
    reference_dispatch,
)
from epstack.smoke.stage import StageWriter
from epstack.stack import DEEPEP_V2_MIN_NCCL

EXPERT_ALIGNMENT = 128  # test_ep's first mode, the one its printed figures come from
# (name, masked ratio, hot-rank ratio); "uniform" is test_ep's routing and the one timed.
CASES: tuple[tuple[str, float | None, float | None], ...] = (
    ("uniform", 0.0, 1.0),
    ("masked", None, 1.0),
    ("unbalanced", None, None),
)


class EnvironmentError_(Exception):
    """The stack or host is wrong; the message carries words the classifier knows."""


def _stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)
    return {
        "n": n,
        "median": statistics.median(ordered),
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p10": ordered[max(0, int(0.1 * (n - 1)))],
        "p90": ordered[min(n - 1, round(0.9 * (n - 1)))],
    }


def _count_bytes(*tensors: Any) -> int:
    """deep_ep.utils.math.count_bytes: tuples (fp8 data + scales) count every part."""
    total = 0
    for t in tensors:
        if isinstance(t, tuple | list):
            total += _count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def _kernel_times(
    fn: Callable[[], object], kernel: str, iters: int, barrier: Callable[[], None]
) -> list[float]:
    """Per-call duration (s) of the CUDA kernel named `...::kernel` under torch.profiler, each
    call after an L2 flush, a ~10 ms sleep and a barrier: DeepEP's bench_kineto, per call."""
    flush = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    fn()
    torch.cuda.synchronize()
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    with prof:
        for _ in range(iters):
            flush.zero_()
            torch.cuda._sleep(int(2e7))  # type: ignore[no-untyped-call]
            barrier()
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    durations = [
        float(e["dur"]) / 1e6
        for e in events
        if e.get("ph") == "X"
        and str(e.get("cat", "")).lower() == "kernel"
        and f"::{kernel}" in str(e.get("name", ""))
    ]
    if len(durations) != iters:
        raise RuntimeError(f"profiler saw {len(durations)} {kernel} kernels for {iters} calls")
    return durations


def _event_times(fn: Callable[[], object], iters: int, barrier: Callable[[], None]) -> list[float]:
    """Whole-call duration (s) with CUDA events on the calling stream, same preamble per call."""
    flush = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    pairs = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        flush.zero_()
        torch.cuda._sleep(int(2e7))  # type: ignore[no-untyped-call]
        barrier()
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def _figures(num_bytes: float, kernel_s: list[float], call_s: list[float]) -> dict[str, Any]:
    k, c = _stats(kernel_s), _stats(call_s)
    return {
        "bytes": num_bytes,
        "kernel_us": {key: v * 1e6 if key != "n" else v for key, v in k.items()},
        "call_us": {key: v * 1e6 if key != "n" else v for key, v in c.items()},
        # GB/s from the median; *_mean_gbps from the mean time, as test_ep prints it
        "kernel_gbps": num_bytes / k["median"] / 1e9,
        "kernel_mean_gbps": num_bytes / k["mean"] / 1e9,
        "call_gbps": num_bytes / c["median"] / 1e9,
    }


def run(cfg: SmokeConfig, stage: StageWriter, result: dict[str, Any]) -> int:  # noqa: PLR0912, PLR0915
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    result.update(rank=rank, world_size=world, local_rank=local_rank, host=socket.gethostname())

    stage.enter("import")
    nccl = loaded_nccl()
    if nccl is not None:
        result["nccl"] = {
            "version": nccl.text,
            "code": nccl.code,
            "path": nccl.path,
            "mapped": list(nccl.paths),
            "torch_compiled": ".".join(map(str, torch.cuda.nccl.version())),  # type: ignore[no-untyped-call]
        }
    if nccl is None:
        raise EnvironmentError_("no libnccl is mapped after importing torch")
    if not nccl.new_enough:
        raise EnvironmentError_(f"loaded NCCL {nccl.text} is older than {DEEPEP_V2_MIN_NCCL} ({nccl.path})")
    import deep_ep  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    result["deep_ep"] = {"file": deep_ep.__file__, "version": getattr(deep_ep, "__version__", "")}

    stage.enter("init")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    t0 = time.perf_counter()
    dist.init_process_group(
        backend="nccl",
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=cfg.init_timeout),
        device_id=device,
    )
    warm = torch.ones(1, device=device)
    dist.all_reduce(warm)  # a lazy communicator would hand DeepEP a null comm (SIGSEGV)
    torch.cuda.synchronize()
    if int(warm.item()) != world:
        raise RuntimeError(f"warm-up all_reduce gave {warm.item()}, expected {world}")
    result["init_s"] = time.perf_counter() - t0
    group = dist.group.WORLD

    stage.enter("nccl")
    nccls: list[Any] = [None] * world
    dist.all_gather_object(nccls, nccl.text)
    result["nccl"]["all_ranks"] = nccls

    stage.enter("fabric")
    ib = Path("/sys/class/infiniband")
    nics = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    gin_off = os.environ.get("EP_DISABLE_GIN", "0") not in ("", "0")
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    num_hosts = len(set(hosts))
    hybrid = {"auto": bool(nics) and not gin_off, "direct": False, "hybrid": True}[cfg.mode]
    if not nics and not gin_off:
        os.environ["EP_DISABLE_GIN"] = "1"  # read by DeepEP when the buffer is built
        gin_off = True
    why = (
        f"{len(nics)} RDMA device(s) ({', '.join(nics)}), GIN on"
        if nics and not gin_off
        else "no RDMA NIC: no NCCL GIN, EP_DISABLE_GIN=1"
        if not nics
        else "EP_DISABLE_GIN=1 set"
    )
    result["fabric"] = {
        "rdma_devices": nics,
        "gin": not gin_off,
        "hosts": num_hosts,
        "mode": "hybrid" if hybrid else "direct",
        "why": why,
    }
    if num_hosts > 1 and gin_off:
        raise EnvironmentError_(
            f"no GIN on a multi-node run: {num_hosts} hosts ({', '.join(sorted(set(hosts)))}) "
            f"but {why}; DeepEP V2 crosses nodes only through NCCL GIN"
        )

    stage.enter("buffer")
    eb = deep_ep.ElasticBuffer
    buffer_topk = cfg.num_topk if cfg.buffer_num_topk is None else cfg.buffer_num_topk
    sizes = {
        topk: eb.get_buffer_size_hint(
            group,
            num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
            hidden=cfg.hidden,
            num_topk=topk,
            use_fp8_dispatch=False,
            allow_hybrid_mode=hybrid,
            allow_multiple_reduction=True,
        )
        for topk in {buffer_topk, cfg.num_topk, 0}
    }
    t0 = time.perf_counter()
    buffer = eb(
        group,
        num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
        hidden=cfg.hidden,
        num_topk=buffer_topk,
        allow_hybrid_mode=hybrid,
        prefer_overlap_with_compute=cfg.prefer_overlap_with_compute,
        explicitly_destroy=True,
    )
    result["buffer"] = {
        "bytes": int(buffer.num_bytes),
        "num_topk": buffer_topk,
        "hint_bytes": int(sizes[cfg.num_topk]),
        "hint_bytes_num_topk_0": int(sizes[0]),
        "num_topk_0_over_this": sizes[0] / max(sizes[cfg.num_topk], 1),
        "construct_s": time.perf_counter() - t0,
        "scaleout_ranks": int(buffer.num_scaleout_ranks),
        "scaleup_ranks": int(buffer.num_scaleup_ranks),
        "rdma_ranks": int(buffer.num_rdma_ranks),
        "nvlink_ranks": int(buffer.num_nvlink_ranks),
        "allow_hybrid_mode": hybrid,
    }
    exact_combine = int(buffer.num_scaleout_ranks) == 1
    num_sms = buffer.get_theoretical_num_sms(cfg.num_experts, cfg.num_topk)
    num_qps = buffer.get_theoretical_num_qps(num_sms)
    result["num_sms"], result["num_qps"] = int(num_sms), int(num_qps)

    cache = Path(os.environ.get("EP_JIT_CACHE_DIR", str(Path.home() / ".deep_ep")))
    files_before = sum(1 for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else 0
    num_tokens = max(1, cfg.num_tokens - rank)  # ragged batches, as test_ep uses
    checks: list[dict[str, Any]] = []
    jit: dict[str, float] = {}
    bench_inputs: dict[bool, tuple[Any, ...]] = {}
    gen = torch.Generator(device=device).manual_seed(cfg.seed * 7919 + rank)
    for name, masked, hot in CASES:
        routing = make_routing(
            num_tokens=num_tokens,
            num_experts=cfg.num_experts,
            num_topk=cfg.num_topk,
            num_ranks=world,
            seed=cfg.seed + len(checks),
            rank=rank,
            masked_ratio=cfg.masked_ratio if masked is None else masked,
            hot_rank_ratio=cfg.hot_rank_ratio if hot is None else hot,
        )
        routing = Routing(
            topk_idx=routing.topk_idx.to(device, deep_ep.topk_idx_t),
            topk_weights=routing.topk_weights.to(device),
        )
        for fp8 in (False, True):
            stage.enter("route")
            x = torch.randn((num_tokens, cfg.hidden), dtype=torch.bfloat16, device=device, generator=gen)
            if fp8:
                xq, sf = cast_to_fp8(x)
                x_in: Any = (xq, sf)
                x_src = dequantize(xq, sf)
            else:
                xq, sf, x_in, x_src = x, None, x, x
            ref = reference_dispatch(
                xq,
                sf,
                routing,
                rank=rank,
                world=world,
                num_experts=cfg.num_experts,
                num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
            )
            torch.cuda.synchronize()

            stage.enter("dispatch")
            args = dict(
                x=x_in,
                topk_idx=routing.topk_idx,
                topk_weights=routing.topk_weights,
                num_experts=cfg.num_experts,
                num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
                expert_alignment=EXPERT_ALIGNMENT,
                num_sms=num_sms,
                num_qps=num_qps,
                do_cpu_sync=True,
            )
            t0 = time.perf_counter()
            recv_x, recv_idx, recv_w, handle, _ = buffer.dispatch(**args)
            torch.cuda.synchronize()
            key = f"first_dispatch_{'fp8' if fp8 else 'bf16'}_s"
            jit.setdefault(key, time.perf_counter() - t0)
            n = int(handle.psum_num_recv_tokens_per_scaleup_rank[-1].item())
            got = Received(
                x=recv_x[0][:n].view(torch.uint8) if fp8 else recv_x[:n],
                sf=recv_x[1][:n] if fp8 else None,
                topk_idx=recv_idx[:n],
                topk_weights=recv_w[:n],
                src=handle.recv_src_metadata[:n, 0].to(torch.int64),
            )
            bad: Mismatch | None = first_dispatch_mismatch(
                got,
                ref,
                rank=rank,
                experts_per_rank=cfg.num_experts // world,
                num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
            )

            stage.enter("combine")
            recv_bf16 = dequantize(recv_x[0], recv_x[1]) if fp8 else recv_x
            y = torch.zeros_like(recv_bf16)
            y[:n] = combine_input(recv_bf16[:n], rank=rank)
            t0 = time.perf_counter()
            combined, combined_w, _ = buffer.combine(
                x=y, handle=handle, topk_weights=recv_w, num_sms=num_sms, num_qps=num_qps
            )
            torch.cuda.synchronize()
            jit.setdefault("first_combine_s", time.perf_counter() - t0)
            expected = expected_combine(x_src, routing.topk_idx, num_experts=cfg.num_experts, num_ranks=world)
            bad_combine = first_combine_mismatch(
                combined, expected, routing.topk_idx, rank=rank, exact=exact_combine
            )
            if bad_combine is None and combined_w is not None:
                valid = routing.topk_idx >= 0
                if not torch.equal(
                    combined_w.float().masked_fill(~valid, 0), routing.topk_weights.masked_fill(~valid, 0)
                ):
                    row = int(
                        (
                            combined_w.float().masked_fill(~valid, 0)
                            != routing.topk_weights.masked_fill(~valid, 0)
                        )
                        .any(dim=1)
                        .nonzero()[0]
                    )
                    bad_combine = Mismatch(
                        rank=rank, src_rank=rank, token=row, expert=-1, what="combined top-k weights differ"
                    )
            checks.append(
                {
                    "case": name,
                    "dtype": "fp8" if fp8 else "bf16",
                    "tokens": num_tokens,
                    "masked_slots": int((routing.topk_idx < 0).sum()),
                    "received": n,
                    "dispatch": "ok" if bad is None else str(bad),
                    "combine": "ok" if bad_combine is None else str(bad_combine),
                    "combine_compare": "bitwise" if exact_combine else "within one bf16 step",
                }
            )
            if name == "uniform":
                bench_inputs[fp8] = (args, y, recv_x, recv_idx, recv_w, handle, n)
    result["checks"] = checks
    result["jit"] = jit | {
        "cache_dir": str(cache),
        "cache_files_before": files_before,
        "cache_files_after": sum(1 for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else 0,
    }
    passed = all(c["dispatch"] == "ok" and c["combine"] == "ok" for c in checks)

    if not cfg.skip_bench:
        bench: dict[str, Any] = {}
        barrier = buffer.barrier
        for fp8 in (True, False):
            stage.enter("bench-dispatch")
            args, y, recv_x, recv_idx, recv_w, handle, n = bench_inputs[fp8]
            per_token = _count_bytes(recv_x, recv_idx, recv_w) / max(recv_idx.size(0), 1)
            call_dispatch = functools.partial(buffer.dispatch, **args)
            kernel = _kernel_times(call_dispatch, "dispatch_impl", cfg.iters, barrier)
            call = _event_times(call_dispatch, cfg.iters, barrier)
            bench[f"dispatch_{'fp8' if fp8 else 'bf16'}"] = _figures(per_token * n, kernel, call)
        stage.enter("bench-combine")
        args, y, recv_x, recv_idx, recv_w, handle, n = bench_inputs[False]
        per_token = _count_bytes(y, recv_w) / max(y.size(0), 1)

        def do_combine() -> object:
            return buffer.combine(x=y, handle=handle, topk_weights=recv_w, num_sms=num_sms, num_qps=num_qps)

        bench["combine"] = _figures(
            per_token * n,
            _kernel_times(do_combine, "combine_impl", cfg.iters, barrier),
            _event_times(do_combine, cfg.iters, barrier),
        )
        result["bench"] = bench

    stage.enter("report")
    result["status"] = "pass" if passed else "fail"
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, result)
    if rank == 0:
        Path(os.environ["EPSTACK_SMOKE_RUN_DIR"], "all_ranks.json").write_text(
            json.dumps(everyone, indent=2, sort_keys=True)
        )
    buffer.destroy()
    dist.barrier()
    dist.destroy_process_group()
    stage.enter("done")
    return 0 if passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epstack.smoke.worker")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ["RANK"])
    os.environ["EPSTACK_SMOKE_RUN_DIR"] = str(args.run_dir)
    stage = StageWriter.from_env(args.run_dir, rank)
    stage.enter("start")
    result: dict[str, Any] = {"rank": rank}
    code = 1
    try:
        code = run(SmokeConfig.load(args.config), stage, result)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        finding = classify(text + "\n" + traceback.format_exc())
        result.update(
            status="environment" if finding else "error",
            error=text,
            stage=stage.current,
            finding=asdict(finding) if finding else None,
        )
        traceback.print_exc()
        code = 2 if finding else 1
    finally:
        path = args.run_dir / f"rank{rank}.json"
        path.write_text(json.dumps(result, indent=2, sort_keys=True, default=str))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
