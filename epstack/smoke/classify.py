"""Known failures named in words, matched on the real texts DeepEP, NCCL and the loader print.

Each rule quotes where its text comes from (DeepEP at the pinned d4f41e4), so a moved message
shows up as an unclassified failure rather than a wrong name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from epstack.fabric import EFA
from epstack.stack import DEEPEP_V2_MIN_NCCL, GIN_PROXY


@dataclass(frozen=True, kw_only=True)
class Finding:
    key: str
    summary: str  # what went wrong, in words
    fix: str
    environment: bool  # True: the stack or the host is wrong (exit 3), not DeepEP's results


@dataclass(frozen=True, kw_only=True)
class _Rule:
    key: str
    pattern: re.Pattern[str]
    summary: str
    fix: str


_RULES = (
    _Rule(
        # csrc/kernels/backend/nccl.cu: EP_HOST_ASSERT(... != NCCL_GIN_TYPE_NONE and "NCCL GIN is
        # unavailable. ...") when EP_DISABLE_GIN is unset and NCCL found no GIN transport.
        key="no-gin",
        pattern=re.compile(r"NCCL GIN is unavailable|no GIN on a multi-node run"),
        summary="NCCL has no GIN transport (no RDMA NIC, or no IB/EFA plugin able to do GIN); "
        "DeepEP V2 needs GIN to go between nodes",
        fix="multi-node: give the pods RDMA NICs (IB/RoCE, or EFA with aws-ofi-nccl >= 1.21, "
        f"NCCL >= {EFA.gin_min_nccl} and NCCL_GIN_TYPE={GIN_PROXY}); single node: EP_DISABLE_GIN=1 "
        "with allow_hybrid_mode=False",
    ),
    _Rule(
        # deep_ep/__init__.py check_nccl_so(); the loader when libnccl lacks the 2.30 device API;
        # epstack's own check of the loaded version.
        key="nccl-too-old",
        pattern=re.compile(
            r"Invalid NCCL versions: .* \(loaded\) v\.s\."
            r"|undefined symbol: (ncclDevComm\w*|ncclCommQueryProperties|ncclGin\w*|ncclWin\w*)"
            r"|loaded NCCL [0-9.]+ is older than [0-9.]+"
        ),
        summary=f"the NCCL loaded at run time is older than {DEEPEP_V2_MIN_NCCL} (or is not the one "
        "deep_ep was built against); DeepEP V2 needs the GIN device API",
        fix=f"install the nvidia-nccl wheel of your CUDA major >= {DEEPEP_V2_MIN_NCCL} --no-deps (or build "
        "NCCL) so torch and deep_ep load the same libnccl.so.2",
    ),
    _Rule(
        # csrc/jit/compiler.hpp: EP_HOST_ASSERT(std::filesystem::exists(nvcc_path)) and the
        # version check "NVCC version should be >= 12.3"; a shell's "nvcc: not found".
        key="nvcc-missing",
        pattern=re.compile(
            r"exists\(nvcc_path\)|NVCC version should be >= 12\.3|nvcc: (command )?not found"
            r"|exists\(cuobjdump_path\)"
        ),
        summary="DeepEP V2 compiles its kernels at first use and found no usable nvcc (or cuobjdump)",
        fix="put the CUDA toolkit's nvcc, cuobjdump and headers in the runtime image "
        "(CUDA_HOME), or ship a warmed EP_JIT_CACHE_DIR",
    ),
    _Rule(
        # csrc/elastic/buffer.hpp: EP_HOST_ASSERT(num_tokens <= num_max_tokens_per_rank).
        key="max-tokens-too-small",
        pattern=re.compile(
            r"num_tokens <= num_max_tokens_per_rank|num_combined_tokens <= num_max_tokens_per_rank"
            r"|is smaller than the batch"
        ),
        summary="num_max_tokens_per_rank is smaller than the batch a rank dispatched",
        fix="construct ElasticBuffer with num_max_tokens_per_rank >= the largest batch per rank",
    ),
    _Rule(
        # A rank killed by SIGSEGV; with libstdc++ symbols exported from deep_ep/_C.so the JIT's
        # std::regex reaches the wrong codecvt and crashes (see epstack.guard.loaded.interposed_symbols).
        key="libstdcxx-interposition",
        pattern=re.compile(r"deep_ep/_C\.so exports libstdc\+\+ symbols"),
        summary="deep_ep/_C.so defines and exports libstdc++ symbols (built with a second g++); "
        "DeepEP's JIT then crashes with SIGSEGV in std::regex/locale",
        fix="rebuild DeepEP with the system toolchain: CC=/usr/bin/gcc CXX=/usr/bin/g++, "
        "CUDAHOSTCXX unset (`epstack image deepep-build` does this)",
    ),
)

# SGLang 0.5.23's own refusals and the failures of a server start, matched before the rules above
# (its log holds DeepEP's and NCCL's texts too). Import errors come last: a failed import of deep_ep
# prints DeepEP's own text first.
_SERVER_RULES = (
    _Rule(
        # sglang/srt/arg_groups/moe_hook.py validate_deepep_v2_dispatch_token_budget
        key="deepep-v2-token-budget",
        pattern=re.compile(r"DeepEP v2 per-rank (prefill budget|decode CUDA graph) exceeds"),
        summary="SGLang refused DeepEP V2's per-rank dispatch token budget: "
        "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK is below the prefill chunk or the decode graph",
        fix="serve with the environment epstack's serve plan sets (`epstack cluster render` prints it), "
        "or raise the variable to the `required=` value the log shows",
    ),
    _Rule(
        # sglang/srt/arg_groups/moe_hook.py validate_deepep_v2_model_architecture
        key="deepep-v2-architecture",
        pattern=re.compile(r"DeepEP v2 MoE is not validated for"),
        summary="the model's architecture is not registered for --moe-a2a-backend deepep_v2 in this SGLang",
        fix="serve it with --a2a deepep (DeepEP V1), or a model SGLang registers for deepep_v2 "
        "(DeepSeek-V3, Qwen3-MoE)",
    ),
    _Rule(
        # sglang/srt/arg_groups/moe_hook.py: the runner DeepEP v2 requires
        key="deepep-v2-runner",
        pattern=re.compile(r"DeepEP v2 MoE currently supports only --moe-runner-backend deep_gemm"),
        summary="DeepEP V2 in SGLang 0.5.23 runs only with the deep_gemm MoE runner",
        fix="drop --moe-runner-backend (auto resolves to deep_gemm) or pass deep_gemm",
    ),
    _Rule(
        # torch.OutOfMemoryError's text; SGLang's KV-cache sizing when nothing is left for it
        key="cuda-out-of-memory",
        pattern=re.compile(r"CUDA out of memory|OutOfMemoryError|Not enough memory\. Please try to increase"),
        summary="the GPU ran out of memory while the server started",
        fix="free the GPU (nvidia-smi shows what holds it), change --mem-fraction-static the way "
        "SGLang's message says, or serve on more GPUs",
    ),
    _Rule(
        # DeepEP's NCCL_CHECK (deep_ep/include/deep_ep/common/exception.cuh) around ncclMemAlloc and
        # ncclCommWindowRegister: its symmetric memory needs NCCL's cuMem allocator.
        key="nccl-cumem",
        pattern=re.compile(r"NCCL exception \([^)]*(symmetric\.hpp|nccl\.cu):\d+\)"),
        summary="NCCL could not allocate or register DeepEP V2's symmetric memory "
        "(NCCL's cuMem allocator off, or a container without cuMem IPC)",
        fix="leave NCCL_CUMEM_ENABLE unset or 1 (SGLang sets 1 for deepep_v2), and give the container "
        "the IPC namespace of the host (--ipc=host, k8s hostIPC) so cuMem handles can be shared",
    ),
)
_IMPORT_RULE = _Rule(
    key="import-error",
    pattern=re.compile(r"(ModuleNotFoundError|ImportError): .*"),
    summary="a module the server imports is missing or does not load",
    fix="run the server in the sglang image epstack built (its guard names what differs), or install "
    "what the log names at the pinned version",
)


def _finding(rules: tuple[_Rule, ...], text: str) -> Finding | None:
    for rule in rules:
        if rule.pattern.search(text):
            return Finding(key=rule.key, summary=rule.summary, fix=rule.fix, environment=True)
    return None


def classify(text: str) -> Finding | None:
    """The first known failure whose text occurs in `text` (a log, an exception message)."""
    return _finding(_RULES, text)


def classify_server_log(text: str) -> Finding | None:
    """The known failure an SGLang server's log shows: SGLang's refusals, then DeepEP's and NCCL's."""
    found = _finding((*_SERVER_RULES, *_RULES), text)
    if found is None and (line := _IMPORT_RULE.pattern.search(text)):
        summary = f"{_IMPORT_RULE.summary}: {line.group(0).strip()[:200]}"
        found = Finding(key=_IMPORT_RULE.key, summary=summary, fix=_IMPORT_RULE.fix, environment=True)
    return found
