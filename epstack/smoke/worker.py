"""One rank of the elastic smoke, on a GPU: `python -m epstack.smoke.worker --config C --run-dir D`.

Started by epstack.smoke.supervise with the env:// variables (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). Writes its stage to D/rank<N>.stage and its figures to
D/rank<N>.json; rank 0 also writes D/all_ranks.json with every rank's figures. Each stage is a
function returning a typed value (epstack.smoke.result); `run` strings them together. Exit 0 pass,
1 a check failed, 3 the environment is wrong (classified).
"""

from __future__ import annotations

import argparse  # its own `python -m` entry point (a rank process), not an epstack command
import functools
import json
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch  # type: ignore[import-not-found, unused-ignore]
import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]

from epstack import host
from epstack.errors import CHECK_FAILED, ENVIRONMENT, OK
from epstack.smoke.classify import classify
from epstack.smoke.config import SmokeConfig
from epstack.smoke.nccl import NcclInfo, loaded_nccl
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
from epstack.smoke.result import (
    Bench,
    BufferFacts,
    CaseCheck,
    DeepEpFacts,
    FabricFacts,
    JitFacts,
    NcclFacts,
    OpFigures,
    RankResult,
)
from epstack.smoke.stage import StageWriter
from epstack.stack import DEEPEP_NUM_SMS_ENV, DEEPEP_V2_MIN_NCCL

EXPERT_ALIGNMENT = 128  # test_ep's first mode, the one its printed figures come from
# (name, masked ratio, hot-rank ratio); "uniform" is test_ep's routing and the one timed.
CASES: tuple[tuple[str, float | None, float | None], ...] = (
    ("uniform", 0.0, 1.0),
    ("masked", None, 1.0),
    ("unbalanced", None, None),
)


class EnvironmentError_(Exception):
    """The stack or host is wrong; the message carries words the classifier knows."""


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


@dataclass(frozen=True, kw_only=True)
class Rank:
    """Who this process is in the group, and its device."""

    rank: int
    world: int
    local_rank: int
    device: Any  # torch.device


@dataclass(frozen=True, kw_only=True)
class BufferUse:
    """The ElasticBuffer and what every call on it passes: SMs and QPs DeepEP's hints give."""

    buffer: Any
    num_sms: int
    num_qps: int
    exact_combine: bool  # one scale-out rank: combine is bitwise

    @classmethod
    def of(cls, buffer: Any, cfg: SmokeConfig, env: Mapping[str, str] = os.environ) -> BufferUse:
        """DeepEP's SM count, else the one the job sets in SGLang's variable, as SGLang's dispatcher
        takes it (EFA jobs across nodes: stack.DEEPEP_MIN_SMS_WITHOUT_OVERLAP)."""
        fixed = int(env.get(DEEPEP_NUM_SMS_ENV) or 0)
        num_sms = fixed or buffer.get_theoretical_num_sms(cfg.num_experts, cfg.num_topk)
        return cls(
            buffer=buffer,
            num_sms=num_sms,
            num_qps=buffer.get_theoretical_num_qps(num_sms),
            exact_combine=int(buffer.num_scaleout_ranks) == 1,
        )


@dataclass(frozen=True, kw_only=True)
class Dispatched:
    """One checked dispatch/combine round trip: what the benchmark repeats for the uniform case."""

    args: dict[str, Any]  # buffer.dispatch's keyword arguments
    combine_x: Any
    recv_x: Any
    recv_idx: Any
    recv_w: Any
    handle: Any
    received: int


@dataclass(frozen=True, kw_only=True)
class Checked:
    checks: list[CaseCheck]
    first_call_s: dict[str, float]  # first_dispatch_bf16_s, first_dispatch_fp8_s, first_combine_s
    uniform: dict[bool, Dispatched]  # by fp8


# ---- stages ----------------------------------------------------------------------------------


def nccl_stage() -> tuple[NcclInfo, NcclFacts]:
    """The NCCL mapped after `import torch`; EnvironmentError_ when none or too old for DeepEP V2."""
    nccl = loaded_nccl()
    if nccl is None:
        raise EnvironmentError_("no libnccl is mapped after importing torch")
    facts = NcclFacts(
        version=nccl.text,
        code=nccl.code,
        path=nccl.path,
        mapped=list(nccl.paths),
        torch_compiled=".".join(map(str, torch.cuda.nccl.version())),  # type: ignore[no-untyped-call]
    )
    return nccl, facts


def check_nccl(nccl: NcclInfo) -> None:
    if not nccl.new_enough:
        raise EnvironmentError_(f"loaded NCCL {nccl.text} is older than {DEEPEP_V2_MIN_NCCL} ({nccl.path})")


def init_stage(cfg: SmokeConfig, me: Rank) -> float:
    """The NCCL process group, warmed (a lazy communicator would hand DeepEP a null comm: SIGSEGV)."""
    torch.cuda.set_device(me.local_rank)
    t0 = time.perf_counter()
    dist.init_process_group(
        backend="nccl",
        init_method="env://",
        rank=me.rank,
        world_size=me.world,
        timeout=timedelta(seconds=cfg.init_timeout),
        device_id=me.device,
    )
    warm = torch.ones(1, device=me.device)
    dist.all_reduce(warm)
    torch.cuda.synchronize()
    if int(warm.item()) != me.world:
        raise RuntimeError(f"warm-up all_reduce gave {warm.item()}, expected {me.world}")
    return time.perf_counter() - t0


def gather(value: Any, world: int) -> list[Any]:
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, value)
    return everyone


def fabric_stage(cfg: SmokeConfig, me: Rank) -> FabricFacts:
    """RDMA NICs and hosts decide GIN and the buffer's mode; no GIN across hosts is an environment error."""
    nics = [device.name for device in host.rdma_devices()]
    gin_off = os.environ.get("EP_DISABLE_GIN", "0") not in ("", "0")
    hosts = gather(socket.gethostname(), me.world)
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
    if num_hosts > 1 and gin_off:
        raise EnvironmentError_(
            f"no GIN on a multi-node run: {num_hosts} hosts ({', '.join(sorted(set(hosts)))}) "
            f"but {why}; DeepEP V2 crosses nodes only through NCCL GIN"
        )
    return FabricFacts(
        rdma_devices=nics, gin=not gin_off, hosts=num_hosts, mode="hybrid" if hybrid else "direct", why=why
    )


def buffer_stage(deep_ep: Any, cfg: SmokeConfig, hybrid: bool) -> tuple[Any, BufferFacts]:
    """ElasticBuffer at the model's shape, keywords only, and its size against num_topk=0's."""
    eb, group = deep_ep.ElasticBuffer, dist.group.WORLD
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
    return buffer, BufferFacts(
        bytes=int(buffer.num_bytes),
        num_topk=buffer_topk,
        hint_bytes=int(sizes[cfg.num_topk]),
        hint_bytes_num_topk_0=int(sizes[0]),
        num_topk_0_over_this=sizes[0] / max(sizes[cfg.num_topk], 1),
        construct_s=time.perf_counter() - t0,
        scaleout_ranks=int(buffer.num_scaleout_ranks),
        scaleup_ranks=int(buffer.num_scaleup_ranks),
        rdma_ranks=int(buffer.num_rdma_ranks),
        nvlink_ranks=int(buffer.num_nvlink_ranks),
        allow_hybrid_mode=hybrid,
    )


def _combined_weights_mismatch(combined_w: Any, routing: Routing, rank: int) -> Mismatch | None:
    if combined_w is None:
        return None
    valid = routing.topk_idx >= 0
    got = combined_w.float().masked_fill(~valid, 0)
    want = routing.topk_weights.masked_fill(~valid, 0)
    if torch.equal(got, want):
        return None
    row = int((got != want).any(dim=1).nonzero()[0])
    return Mismatch(rank=rank, src_rank=rank, token=row, expert=-1, what="combined top-k weights differ")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One routing and dtype to check."""

    name: str
    routing: Routing
    fp8: bool
    num_tokens: int


def round_trip(
    use: BufferUse,
    cfg: SmokeConfig,
    *,
    me: Rank,
    case: Case,
    gen: Any,
    stage: StageWriter,
    first: dict[str, float],
) -> tuple[CaseCheck, Dispatched]:
    """Dispatch and combine one case; every received token, index and weight checked against the
    all_to_all reference, then the combine against the expected reduction."""
    stage.enter("route")
    x = torch.randn((case.num_tokens, cfg.hidden), dtype=torch.bfloat16, device=me.device, generator=gen)
    if case.fp8:
        xq, sf = cast_to_fp8(x)
        x_in: Any = (xq, sf)
        x_src = dequantize(xq, sf)
    else:
        xq, sf, x_in, x_src = x, None, x, x
    ref = reference_dispatch(
        xq,
        sf,
        case.routing,
        rank=me.rank,
        world=me.world,
        num_experts=cfg.num_experts,
        num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
    )
    torch.cuda.synchronize()

    stage.enter("dispatch")
    args = dict(
        x=x_in,
        topk_idx=case.routing.topk_idx,
        topk_weights=case.routing.topk_weights,
        num_experts=cfg.num_experts,
        num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
        expert_alignment=EXPERT_ALIGNMENT,
        num_sms=use.num_sms,
        num_qps=use.num_qps,
        do_cpu_sync=True,
    )
    t0 = time.perf_counter()
    recv_x, recv_idx, recv_w, handle, _ = use.buffer.dispatch(**args)
    torch.cuda.synchronize()
    first.setdefault(f"first_dispatch_{'fp8' if case.fp8 else 'bf16'}_s", time.perf_counter() - t0)
    n = int(handle.psum_num_recv_tokens_per_scaleup_rank[-1].item())
    got = Received(
        x=recv_x[0][:n].view(torch.uint8) if case.fp8 else recv_x[:n],
        sf=recv_x[1][:n] if case.fp8 else None,
        topk_idx=recv_idx[:n],
        topk_weights=recv_w[:n],
        src=handle.recv_src_metadata[:n, 0].to(torch.int64),
    )
    bad = first_dispatch_mismatch(
        got,
        ref,
        rank=me.rank,
        experts_per_rank=cfg.num_experts // me.world,
        num_max_tokens_per_rank=cfg.num_max_tokens_per_rank,
    )

    stage.enter("combine")
    recv_bf16 = dequantize(recv_x[0], recv_x[1]) if case.fp8 else recv_x
    y = torch.zeros_like(recv_bf16)
    y[:n] = combine_input(recv_bf16[:n], rank=me.rank)
    t0 = time.perf_counter()
    combined, combined_w, _ = use.buffer.combine(
        x=y, handle=handle, topk_weights=recv_w, num_sms=args["num_sms"], num_qps=args["num_qps"]
    )
    torch.cuda.synchronize()
    first.setdefault("first_combine_s", time.perf_counter() - t0)
    expected = expected_combine(x_src, case.routing.topk_idx, num_experts=cfg.num_experts, num_ranks=me.world)
    bad_combine = first_combine_mismatch(
        combined, expected, case.routing.topk_idx, rank=me.rank, exact=use.exact_combine
    )
    bad_combine = bad_combine or _combined_weights_mismatch(combined_w, case.routing, me.rank)
    check = CaseCheck(
        case=case.name,
        dtype="fp8" if case.fp8 else "bf16",
        tokens=case.num_tokens,
        masked_slots=int((case.routing.topk_idx < 0).sum()),
        received=n,
        dispatch="ok" if bad is None else str(bad),
        combine="ok" if bad_combine is None else str(bad_combine),
        combine_compare="bitwise" if use.exact_combine else "within one bf16 step",
    )
    dispatched = Dispatched(
        args=args, combine_x=y, recv_x=recv_x, recv_idx=recv_idx, recv_w=recv_w, handle=handle, received=n
    )
    return check, dispatched


def correctness_stage(
    deep_ep: Any, use: BufferUse, cfg: SmokeConfig, me: Rank, stage: StageWriter
) -> Checked:
    """Every case of CASES in bf16 and fp8, seeded routing, ragged batches as test_ep uses."""
    num_tokens = max(1, cfg.num_tokens - me.rank)
    gen = torch.Generator(device=me.device).manual_seed(cfg.seed * 7919 + me.rank)
    checks: list[CaseCheck] = []
    first: dict[str, float] = {}
    uniform: dict[bool, Dispatched] = {}
    for name, masked, hot in CASES:
        routing = make_routing(
            num_tokens=num_tokens,
            num_experts=cfg.num_experts,
            num_topk=cfg.num_topk,
            num_ranks=me.world,
            seed=cfg.seed + len(checks),
            rank=me.rank,
            masked_ratio=cfg.masked_ratio if masked is None else masked,
            hot_rank_ratio=cfg.hot_rank_ratio if hot is None else hot,
        )
        routing = Routing(
            topk_idx=routing.topk_idx.to(me.device, deep_ep.topk_idx_t),
            topk_weights=routing.topk_weights.to(me.device),
        )
        for fp8 in (False, True):
            case = Case(name=name, routing=routing, fp8=fp8, num_tokens=num_tokens)
            check, dispatched = round_trip(use, cfg, me=me, case=case, gen=gen, stage=stage, first=first)
            checks.append(check)
            if name == "uniform":
                uniform[fp8] = dispatched
    return Checked(checks=checks, first_call_s=first, uniform=uniform)


def bench_stage(
    use: BufferUse, cfg: SmokeConfig, uniform: dict[bool, Dispatched], stage: StageWriter
) -> Bench:
    """Dispatch (fp8, bf16) and combine timed as DeepEP's bench_kineto does, with its byte counts."""
    buffer, barrier = use.buffer, use.buffer.barrier
    dispatch: dict[bool, OpFigures] = {}
    for fp8 in (True, False):
        stage.enter("bench-dispatch")
        d = uniform[fp8]
        per_token = _count_bytes(d.recv_x, d.recv_idx, d.recv_w) / max(d.recv_idx.size(0), 1)
        call_dispatch = functools.partial(buffer.dispatch, **d.args)
        kernel = _kernel_times(call_dispatch, "dispatch_impl", cfg.iters, barrier)
        dispatch[fp8] = OpFigures.of(
            per_token * d.received, kernel, _event_times(call_dispatch, cfg.iters, barrier)
        )
    stage.enter("bench-combine")
    d = uniform[False]
    per_token = _count_bytes(d.combine_x, d.recv_w) / max(d.combine_x.size(0), 1)

    def do_combine() -> object:
        return buffer.combine(
            x=d.combine_x,
            handle=d.handle,
            topk_weights=d.recv_w,
            num_sms=use.num_sms,
            num_qps=use.num_qps,
        )

    combine = OpFigures.of(
        per_token * d.received,
        _kernel_times(do_combine, "combine_impl", cfg.iters, barrier),
        _event_times(do_combine, cfg.iters, barrier),
    )
    return Bench(dispatch_fp8=dispatch[True], dispatch_bf16=dispatch[False], combine=combine)


def _cache_files(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else 0


def run(cfg: SmokeConfig, stage: StageWriter, result: RankResult) -> int:
    """Every stage in order, each one's findings in `result` as soon as it has them."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    me = Rank(
        rank=int(os.environ["RANK"]),
        world=int(os.environ["WORLD_SIZE"]),
        local_rank=local_rank,
        device=torch.device("cuda", local_rank),
    )
    result.world_size, result.local_rank, result.host = me.world, me.local_rank, socket.gethostname()

    stage.enter("import")
    nccl, result.nccl = nccl_stage()
    check_nccl(nccl)
    import deep_ep  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    result.deep_ep = DeepEpFacts(file=deep_ep.__file__, version=getattr(deep_ep, "__version__", ""))

    stage.enter("init")
    result.init_s = init_stage(cfg, me)

    stage.enter("nccl")
    result.nccl = replace(result.nccl, all_ranks=gather(nccl.text, me.world))

    stage.enter("fabric")
    result.fabric = fabric_stage(cfg, me)

    stage.enter("buffer")
    buffer, result.buffer = buffer_stage(deep_ep, cfg, result.fabric.hybrid)
    use = BufferUse.of(buffer, cfg)
    result.num_sms, result.num_qps = int(use.num_sms), int(use.num_qps)

    cache = Path(os.environ.get("EP_JIT_CACHE_DIR", str(Path.home() / ".deep_ep")))
    files_before = _cache_files(cache)
    checked = correctness_stage(deep_ep, use, cfg, me, stage)
    result.checks = checked.checks
    result.jit = JitFacts(
        **checked.first_call_s,
        cache_dir=str(cache),
        cache_files_before=files_before,
        cache_files_after=_cache_files(cache),
    )
    if not cfg.skip_bench:
        result.bench = bench_stage(use, cfg, checked.uniform, stage)

    stage.enter("report")
    result.status = "pass" if result.passed else "fail"
    everyone = gather(result.to_json(), me.world)
    if me.rank == 0:
        Path(os.environ["EPSTACK_SMOKE_RUN_DIR"], "all_ranks.json").write_text(
            json.dumps(everyone, indent=2, sort_keys=True)
        )
    buffer.destroy()
    dist.barrier()
    dist.destroy_process_group()
    stage.enter("done")
    return OK if result.passed else CHECK_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epstack.smoke.worker")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ["RANK"])
    os.environ["EPSTACK_SMOKE_RUN_DIR"] = str(args.run_dir)
    stage = StageWriter.from_env(args.run_dir, rank)
    stage.enter("start")
    result = RankResult(rank=rank)
    code = CHECK_FAILED
    try:
        code = run(SmokeConfig.load(args.config), stage, result)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        finding = classify(text + "\n" + traceback.format_exc())
        result.status = "environment" if finding else "error"
        result.error, result.stage = text, stage.current
        result.finding = asdict(finding) if finding else None
        traceback.print_exc()
        code = ENVIRONMENT if finding else CHECK_FAILED
    finally:
        path = args.run_dir / f"rank{rank}.json"
        path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True, default=str))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
