"""A server's start-up read from SGLang's own log: the committed H200 logs, cold (deepep_v2, DeepGEMM's
JIT) and after it (none, Triton's MoE), and a log cut inside a DeepGEMM session."""

from __future__ import annotations

from datetime import datetime

from epstack.smoke.serving import startup
from tests.conftest import REPO

RESULTS = REPO / "benchmarks" / "serve" / "results"
# 287.3 s before "The server is fired up" (the report's launch_to_healthy_s), to the log's whole second
LAUNCHED = datetime.fromisoformat("2026-12-04 17:58:55")


def test_the_cold_deepep_v2_start_names_its_minutes() -> None:
    found = startup.read((RESULTS / "server-deepep_v2.log").read_text(), LAUNCHED)
    assert found.milestones_s == {
        "first_log_line": 15.0,
        "weights_loaded": 42.0,
        "kv_cache_allocated": 44.0,
        "deepep_v2_buffer": 118.0,  # its line follows a progress bar on the same line
        "cuda_graphs_captured": 148.0,
        "http_listening": 148.0,
        "warmup_request_done": 287.0,
    }
    assert found.engine_timings_s["cuda_graph.decode"] == 103.11
    assert found.engine_timings_s["load_weight"] == 0.1
    assert [(s.kernel, s.n, s.k, s.num_groups, s.ms, s.at_s, s.seconds) for s in found.deepgemm] == [
        ("GROUPED_GEMM_NT_BF16_MASKED", 1536, 2048, 128, 4096, 125.0, 7),
        ("GROUPED_GEMM_NT_BF16_MASKED", 2048, 768, 128, 8192, 132.0, 7),
        ("GROUPED_GEMM_NT_BF16_CONTIG", 1536, 2048, 128, 128, 155.0, 60),
        ("GROUPED_GEMM_NT_BF16_CONTIG", 2048, 768, 128, 128, 226.0, 51),
    ]
    assert found.deepgemm_s == 125


def test_without_deepep_there_is_no_buffer_and_no_deepgemm() -> None:
    found = startup.read(
        (RESULTS / "server-none.log").read_text(), datetime.fromisoformat("2026-12-04 18:06:23")
    )
    assert "deepep_v2_buffer" not in found.milestones_s
    assert found.deepgemm == []
    assert found.engine_timings_s["cuda_graph.prefill"] == 11.33
    assert found.milestones_s["warmup_request_done"] == 47.0


def test_a_session_the_server_never_finished_is_not_counted() -> None:
    log = (RESULTS / "server-deepep_v2.log").read_text()
    cut = log[: log.index("DeepGEMM warmup: 100%|██████████| 128/128 [01:00")]
    found = startup.read(cut, LAUNCHED)
    assert [s.at_s for s in found.deepgemm] == [125.0, 132.0]
    assert "warmup_request_done" not in found.milestones_s


def test_a_log_without_stamps_reads_as_nothing() -> None:
    found = startup.read("Traceback (most recent call last):\nImportError: no sgl_kernel\n", LAUNCHED)
    assert (found.milestones_s, found.engine_timings_s, found.deepgemm) == ({}, {}, [])
