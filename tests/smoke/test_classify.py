"""Known failures named from their real texts (DeepEP's, SGLang's server logs); libstdc++ interposition
found with real nm output."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from epstack.guard.loaded import defined_symbols, interposed_symbols
from epstack.smoke.classify import classify, classify_server_log

# Texts as DeepEP d4f41e4 (EPException: "<name> exception (<file>:<line>): <#cond>"), its Python
# checks, the dynamic loader and epstack's own worker print them.
REAL_TEXTS = {
    "no-gin": "RuntimeError: Assertion exception (/opt/src/DeepEP/csrc/kernels/backend/nccl.cu:85):"
    " (allow_hybrid_mode ? props.railedGinType : props.ginType) != NCCL_GIN_TYPE_NONE and "
    '"NCCL GIN is unavailable. This is usually due to a network configuration issue, such as '
    '`allow_hybrid_mode=0` (disable direct RDMA kernels) in multi-plane network."',
    "nccl-too-old": "AssertionError: Invalid NCCL versions: /usr/lib/python3/site-packages/torch/"
    "lib/../../nvidia/nccl/lib/libnccl.so.2 (loaded) v.s. /opt/nccl/lib/libnccl.so.2 (expected),"
    " please contact Chenggang or Shangyan to upgrade PyTorch NCCL version",
    "nvcc-missing": "RuntimeError: Assertion exception (/opt/src/DeepEP/csrc/jit/compiler.hpp:187):"
    " std::filesystem::exists(nvcc_path)",
    "max-tokens-too-small": "RuntimeError: Assertion exception (/opt/src/DeepEP/csrc/elastic/"
    "buffer.hpp:716): num_tokens <= num_max_tokens_per_rank",
}


@pytest.mark.parametrize(("key", "text"), sorted(REAL_TEXTS.items()))
def test_real_texts(key: str, text: str) -> None:
    finding = classify(text)
    assert finding is not None and finding.key == key and finding.environment
    assert finding.fix


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "ImportError: /x/deep_ep/_C.cpython-312-x86_64-linux-gnu.so: undefined symbol: ncclDevCommCreate",
            "nccl-too-old",
        ),
        ("EnvironmentError_: loaded NCCL 2.28.9 is older than 2.30.4 (/x/libnccl.so.2)", "nccl-too-old"),
        ("EnvironmentError_: no GIN on a multi-node run: 2 hosts (a, b) but no RDMA NIC", "no-gin"),
        ("sh: 1: nvcc: not found", "nvcc-missing"),
        ("error: --num-max-tokens-per-rank 1024 is smaller than the batch", "max-tokens-too-small"),
    ],
)
def test_epstack_and_loader_texts(text: str, key: str) -> None:
    finding = classify(text)
    assert finding is not None and finding.key == key


SUMMARY_WORDS = {
    "no-gin": ("no GIN transport", "EP_DISABLE_GIN=1"),
    "nccl-too-old": ("NCCL loaded at run time is older than", "same libnccl.so.2"),
    "nvcc-missing": ("found no usable nvcc", "EP_JIT_CACHE_DIR"),
    "max-tokens-too-small": ("smaller than the batch a rank dispatched", "num_max_tokens_per_rank >="),
}


@pytest.mark.parametrize(("key", "text"), sorted(REAL_TEXTS.items()))
def test_a_finding_says_what_went_wrong_and_the_fix(key: str, text: str) -> None:
    finding = classify(text)
    summary, fix = SUMMARY_WORDS[key]
    assert finding is not None and summary in finding.summary and fix in finding.fix


def test_unknown_failures_stay_unclassified() -> None:
    assert classify("RuntimeError: CUDA error: an illegal memory access was encountered") is None
    assert classify("AssertionError: Diff: 0.0012") is None


# SGLang 0.5.23's texts as its server log shows them: the raise sites' messages with their values
# filled in (sglang/srt/arg_groups/moe_hook.py, sglang/srt/model_executor/pool_configurator.py), torch's
# OutOfMemoryError, and DeepEP's NCCL_CHECK in the format of its other exceptions above.
SERVER_TEXTS = {
    # a real H200 run with --cuda-graph-max-bs-decode=1024 (benchmarks/serve/results/serve-budget-fail)
    "deepep-v2-token-budget": "ValueError: DeepEP v2 per-rank decode CUDA graph exceeds "
    "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: required=1024, capacity=512 (requests=1024, "
    "tokens/request=1). Raise the environment value or lower --cuda-graph-max-bs-decode.",
    "deepep-v2-architecture": "ValueError: DeepEP v2 MoE is not validated for 'LlamaForCausalLM'. The "
    "model package must register its architecture with register_deepep_v2_model, because its combine "
    "and post-expert reduction semantics must be validated first.",
    "deepep-v2-runner": "ValueError: DeepEP v2 MoE currently supports only --moe-runner-backend deep_gemm. "
    "Got 'triton'. Add a runner adapter before enabling DeepEP v2 with other MoE runners.",
    "cuda-out-of-memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
    "has a total capacity of 139.81 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this "
    "process has 138.74 GiB memory in use.",
    "nccl-cumem": "RuntimeError: NCCL exception (/opt/src/DeepEP/csrc/kernels/comm/symmetric.hpp:131): "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    "import-error": "ModuleNotFoundError: No module named 'deep_ep'",
}
# A healthy start, in SGLang's words: none of it is a failure.
HEALTHY_LOG = """\
[2026-02-03 10:00:01] server_args=ServerArgs(model_path='/tmp/tiny-qwen3-moe', moe_a2a_backend='deepep_v2')
[2026-02-03 10:00:02] DeepEP v2 MoE: resolved --moe-runner-backend auto -> deep_gemm.
[2026-02-03 10:00:09] Load weight end. elapsed=0.41 s, type=Qwen3MoeForCausalLM, avail mem=137.12 GB, \
mem usage=0.52 GB.
[2026-02-03 10:00:10] Initialized DeepEP v2 ElasticBuffer: world_size=1 hidden_size=2048 num_topk=8 \
max_dispatch_tokens_per_rank=512 use_fp8_dispatch=False allow_hybrid_mode=False num_bytes=1073741824
[2026-02-03 10:00:31] The server is fired up and ready to roll!
"""


def _log(*lines: str) -> str:
    """A server log: the healthy start's first lines, then a traceback ending in `lines`."""
    head = HEALTHY_LOG.splitlines()[:3]
    return "\n".join(
        [*head, "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', *lines]
    )


@pytest.mark.parametrize(("key", "text"), sorted(SERVER_TEXTS.items()))
def test_server_log_rules(key: str, text: str) -> None:
    finding = classify_server_log(_log(text))
    assert finding is not None and finding.key == key and finding.environment and finding.fix


def test_the_token_budget_rule_names_both_of_sglangs_refusals() -> None:
    prefill = (
        "ValueError: DeepEP v2 per-rank prefill budget exceeds "
        "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK: required=1024, capacity=512. "
        "Raise the environment value or lower --chunked-prefill-size/--max-prefill-tokens."
    )
    finding = classify_server_log(_log(prefill))
    assert finding is not None and finding.key == "deepep-v2-token-budget"
    assert "required=" in finding.fix and "epstack cluster render" in finding.fix


def test_sglangs_memory_message_is_out_of_memory() -> None:
    text = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    finding = classify_server_log(_log(text + "mem_fraction_static=0.88"))
    assert finding is not None and finding.key == "cuda-out-of-memory"


def test_an_import_error_names_the_module_it_could_not_load() -> None:
    finding = classify_server_log(_log("ImportError: libcudart.so.13: cannot open shared object file"))
    assert finding is not None and finding.key == "import-error"
    assert finding.summary.endswith(": ImportError: libcudart.so.13: cannot open shared object file")


def test_deepeps_own_text_wins_over_the_import_error_it_causes() -> None:
    """A deep_ep that fails to load on an old NCCL is nccl-too-old, not a generic import error."""
    text = "ImportError: /opt/deep_ep/_C.cpython-312-x86_64-linux-gnu.so: undefined symbol: ncclDevCommCreate"
    finding = classify_server_log(_log(text))
    assert finding is not None and finding.key == "nccl-too-old"


def test_sglangs_refusal_wins_over_deepeps_texts_in_one_log() -> None:
    log = _log(SERVER_TEXTS["deepep-v2-token-budget"]) + "\n" + REAL_TEXTS["nvcc-missing"]
    finding = classify_server_log(log)
    assert finding is not None and finding.key == "deepep-v2-token-budget"


def test_a_healthy_server_log_is_no_failure() -> None:
    assert classify_server_log(HEALTHY_LOG) is None
    assert classify_server_log("") is None
    assert (
        classify_server_log(_log("RuntimeError: CUDA error: an illegal memory access was encountered"))
        is None
    )


NM_SAMPLE = """\
0000000000123450 T PyInit__C
00000000001a2b30 W _ZNSt6vectorIiSaIiEE17_M_realloc_insertIJRKiEEEvN9__gnu_cxx17__normal_iteratorIPiS1_EEDpOT_
00000000003f0e00 T _ZNKSt7codecvtIcc11__mbstate_tE6do_outERS0_PKcS4_RS4_PcS6_RS6_
0000000000400000 B _ZNSt7codecvtIcc11__mbstate_tE2idE
                 w __gmon_start__
"""
LIBSTDCXX_SAMPLE = """\
00000000000c1e20 T _ZNKSt7codecvtIcc11__mbstate_tE6do_outERS0_PKcS4_RS4_PcS6_RS6_@@GLIBCXX_3.4
0000000000224e28 B _ZNSt7codecvtIcc11__mbstate_tE2idE@@GLIBCXX_3.4
00000000000a0000 T _ZSt9terminatev@@GLIBCXX_3.4
"""


def test_interposed_symbols_from_nm_text() -> None:
    assert defined_symbols(NM_SAMPLE)["PyInit__C"] == "T"
    found = interposed_symbols(NM_SAMPLE, LIBSTDCXX_SAMPLE)
    assert found == sorted(
        [
            "_ZNKSt7codecvtIcc11__mbstate_tE6do_outERS0_PKcS4_RS4_PcS6_RS6_",
            "_ZNSt7codecvtIcc11__mbstate_tE2idE",
        ]
    )
    # the weak vector<int> instantiation is normal and never reported
    assert not any("vector" in s for s in interposed_symbols(NM_SAMPLE, None))


def _nm(path: Path) -> str:
    return subprocess.run(
        ["nm", "-D", "--defined-only", str(path)], capture_output=True, check=True, text=True
    ).stdout


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("nm")), reason="needs g++ and nm")
def test_real_shared_objects(tmp_path: Path) -> None:
    """A real .so that explicitly instantiates libstdc++'s codecvt_byname (strong definitions of
    symbols libstdc++.so.6 exports) is flagged; an ordinary one is not."""
    clean = tmp_path / "clean.cpp"
    clean.write_text(
        '#include <vector>\nextern "C" int f() { std::vector<int> v{1}; '
        "v.push_back(2); return (int)v.size(); }\n"
    )
    bad = tmp_path / "bad.cpp"
    bad.write_text(
        "#include <locale>\n#include <cwchar>\n"
        "template class std::codecvt_byname<char, char, std::mbstate_t>;\n"
    )
    libstdcxx = subprocess.run(
        ["g++", "-print-file-name=libstdc++.so.6"], capture_output=True, check=True, text=True
    ).stdout.strip()
    if not Path(libstdcxx).is_file():
        pytest.skip("libstdc++.so.6 not found")
    ref = _nm(Path(libstdcxx))
    for src in (clean, bad):
        subprocess.run(
            ["g++", "-shared", "-fPIC", "-O1", "-o", str(src.with_suffix(".so")), str(src)], check=True
        )
    assert interposed_symbols(_nm(clean.with_suffix(".so")), ref) == []
    found = interposed_symbols(_nm(bad.with_suffix(".so")), ref)
    assert found and all("codecvt" in s for s in found)
    finding = classify("deep_ep/_C.so exports libstdc++ symbols")
    assert finding is not None and finding.key == "libstdcxx-interposition"
