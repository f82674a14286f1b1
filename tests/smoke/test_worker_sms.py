"""The SM count each dispatch and combine of the elastic smoke passes: DeepEP's own model, unless the job
sets SGLang's SGLANG_DEEPEP_V2_NUM_SMS, as EFA jobs across nodes do (DeepEP d4f41e4 reads the RDMA rate
from `ibstat`, which lists no EFA device, and its model then divides by 0: DeepEP PR #734)."""

from __future__ import annotations

from typing import Any

import pytest

from epstack.fabric import EFA, IB
from epstack.smoke.config import SmokeConfig
from epstack.smoke.worker import BufferUse
from epstack.stack import DEEPEP_MIN_SMS_WITHOUT_OVERLAP, DEEPEP_NUM_SMS_ENV

CONFIG = SmokeConfig(hidden=7168, num_topk=8, num_experts=256, num_tokens=128, num_max_tokens_per_rank=128)


class ProbingBuffer:
    """An ElasticBuffer across nodes whose RDMA rate probe found no NIC, as d4f41e4's does over EFA."""

    num_scaleout_ranks = 2

    def get_theoretical_num_sms(self, num_experts: int, num_topk: int) -> int:
        rdma_traffic, rdma_gbs = 0.15, 0.0
        return int(rdma_traffic / rdma_gbs)  # what deep_ep/buffers/elastic.py does with the 0

    def get_theoretical_num_qps(self, num_sms: int) -> int:
        return num_sms * 16 + 1


def test_deepeps_own_model_divides_by_the_rate_it_could_not_read() -> None:
    with pytest.raises(ZeroDivisionError):
        BufferUse.of(ProbingBuffer(), CONFIG, env={})


def test_an_efa_job_across_nodes_passes_the_sm_count_deepep_would_reach() -> None:
    env: dict[str, Any] = dict(EFA.job_env)
    use = BufferUse.of(ProbingBuffer(), CONFIG, env=env)
    assert (use.num_sms, use.num_qps) == (64, 64 * 16 + 1) and DEEPEP_MIN_SMS_WITHOUT_OVERLAP == 64
    assert env[DEEPEP_NUM_SMS_ENV] == "64" and DEEPEP_NUM_SMS_ENV not in dict(IB.job_env)
    assert use.exact_combine is False, "two scale-out ranks: combine sums in another order"
