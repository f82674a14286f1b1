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
    environment: bool  # True: the stack or the host is wrong (exit 2), not DeepEP's results


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
        "CUDAHOSTCXX unset (`epstack deepep build` does this)",
    ),
)

ENV_KEYS = frozenset(r.key for r in _RULES)


def classify(text: str) -> Finding | None:
    """The first known failure whose text occurs in `text` (a log, an exception message)."""
    for rule in _RULES:
        if rule.pattern.search(text):
            return Finding(key=rule.key, summary=rule.summary, fix=rule.fix, environment=True)
    return None
