"""The serve smoke's pure parts: SGLang's /generate answer read strictly, two greedy generations
compared (identical, parted at a near tie, parted beyond one), and the load generator's result line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from epstack.errors import CommandFailed
from epstack.smoke.serving import checks, generation, sweep
from epstack.smoke.serving.client import RequestFailed
from epstack.smoke.serving.generation import Generation

DATA = Path(__file__).parent / "data"


def gen(
    ids: list[int], logprobs: list[float] | None = None, top: list[dict[int, float]] | None = None
) -> Generation:
    logprobs = logprobs or [-1.0] * len(ids)
    return Generation(
        output_ids=ids, logprobs=logprobs, top=top or [{i: lp} for i, lp in zip(ids, logprobs, strict=True)]
    )


def sglang_answer(ids: list[int]) -> dict[str, Any]:
    """One /generate answer as SGLang 0.5.23 sends it with return_logprob and top_logprobs_num=2."""
    return {
        "text": "",
        "output_ids": ids,
        "meta_info": {
            "id": "a1",
            "finish_reason": {"type": "length", "length": len(ids)},
            "prompt_tokens": 64,
            "completion_tokens": len(ids),
            "output_token_logprobs": [[-0.5, i, None] for i in ids],
            "output_top_logprobs": [[[-0.5, i, None], [-1.25, i + 1, None]] for i in ids],
        },
    }


# ---- compare ----

generations = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.builds(
        gen,
        st.lists(st.integers(0, 151_935), min_size=n, max_size=n),
        st.lists(st.floats(-30, 0), min_size=n, max_size=n),
    )
)


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Generation, Generation]:
    """Two generations of one length over a few token ids, so that they part and tie often."""
    n = draw(st.integers(1, 8))

    def one() -> Generation:
        ids = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        logprobs = draw(st.lists(st.floats(-5, 0), min_size=n, max_size=n))
        others = draw(
            st.lists(st.dictionaries(st.integers(0, 3), st.floats(-9, 0), max_size=4), min_size=n, max_size=n)
        )
        return gen(ids, logprobs, [o | {i: lp} for o, i, lp in zip(others, ids, logprobs, strict=True)])

    return one(), one()


@given(generations)
def test_a_generation_is_identical_to_itself(a: Generation) -> None:
    agreement = generation.compare(a, a)
    assert agreement.identical and agreement.close and agreement.matched == "identical"
    assert agreement.first_divergence is None and agreement.max_logprob_diff == 0.0


@given(pairs())
def test_compare_is_symmetric(pair: tuple[Generation, Generation]) -> None:
    a, b = pair
    ab, ba = generation.compare(a, b), generation.compare(b, a)
    assert (ab.identical, ab.close, ab.first_divergence) == (ba.identical, ba.close, ba.first_divergence)
    assert ab.max_logprob_diff == ba.max_logprob_diff
    assert ab.identical == (a.output_ids == b.output_ids)
    assert ab.close == (ab.in_top and ab.max_logprob_diff <= generation.TOLERANCE)


@given(generations, st.data())
def test_nothing_after_the_parting_counts(a: Generation, data: st.DataObject) -> None:
    """b is a up to position k, then another token and any logprobs: a parts at k, and the logprob
    difference is over the positions before k only."""
    k = data.draw(st.integers(0, len(a.output_ids) - 1))
    tail = len(a.output_ids) - k
    parted = [(a.output_ids[k] + 1) % 151_936, *data.draw(st.lists(st.integers(0, 9), min_size=tail - 1))]
    after = data.draw(st.lists(st.floats(-30, 0), min_size=tail, max_size=tail))
    b = gen(a.output_ids[:k] + parted[:tail], a.logprobs[:k] + after)
    agreement = generation.compare(a, b)
    assert agreement.first_divergence == k and not agreement.identical
    assert agreement.max_logprob_diff == 0.0
    assert not agreement.close  # each top holds only its own token: not a near tie


def test_identical_tokens_with_logprobs_apart_are_not_close() -> None:
    """What a combine scaled does to a model whose greedy choices it does not change: the same tokens,
    every logprob moved. Within rounding (the tolerance) they are close; beyond it not."""
    agreement = generation.compare(gen([5, 6, 7], [-1.0, -2.0, -0.5]), gen([5, 6, 7], [-1.0, -2.25, -0.5]))
    assert agreement.identical and agreement.first_divergence is None and agreement.in_top
    assert agreement.max_logprob_diff == pytest.approx(0.25) and not agreement.close
    rounding = generation.compare(gen([5, 6, 7], [-1.0, -2.0, -0.5]), gen([5, 6, 7], [-1.0, -2.03, -0.5]))
    assert rounding.close and rounding.max_logprob_diff == pytest.approx(0.03)


def test_parted_at_a_near_tie_is_close() -> None:
    """Each run's token at the parting is in the other's top 5, and each token's logprob agrees across
    the runs there as before it; nothing after the parting counts."""
    a = gen([5, 6, 7, 8], [-1.0, -2.0, -0.70, -3.0], [{5: -1.0}, {6: -2.0}, {7: -0.70, 9: -0.71}, {8: -3.0}])
    b = gen(
        [5, 6, 9, 1], [-1.0, -2.05, -0.69, -9.0], [{5: -1.0}, {6: -2.05}, {9: -0.69, 7: -0.72}, {1: -9.0}]
    )
    agreement = generation.compare(a, b)
    assert not agreement.identical and agreement.close
    assert agreement.first_divergence == 2 and agreement.matched == "parted at token 2"
    assert agreement.max_logprob_diff == pytest.approx(0.05)  # position 1; the parting's are 0.02 apart


def test_parted_where_the_runs_disagree_on_the_candidates_is_not_close() -> None:
    """Both tokens in both tops, but the other run's token is 0.5 below in one run and 0.01 in the other:
    what a broken combine gives, not rounding."""
    a = gen([5, 7], [-1.0, -0.5], [{5: -1.0}, {7: -0.5, 9: -1.0}])
    b = gen([5, 9], [-1.0, -0.49], [{5: -1.0}, {9: -0.49, 7: -0.50}])
    agreement = generation.compare(a, b)
    assert agreement.in_top and not agreement.close
    assert agreement.max_logprob_diff == pytest.approx(0.51)


def test_parted_with_a_token_outside_the_others_top_is_not_close() -> None:
    top_a = [{5: -1.0}, {7: -0.5, 9: -0.9, 10: -1.0, 11: -1.1, 12: -1.2}]
    a = gen([5, 7], [-1.0, -0.5], top_a)
    b = gen([5, 9], [-1.0, -0.4], [{5: -1.0}, {9: -0.4, 3: -2.0}])  # 9 is in a's top, 7 not in b's
    agreement = generation.compare(a, b)
    assert not agreement.identical and not agreement.close and agreement.first_divergence == 1
    assert not generation.compare(b, a).close


def test_parted_at_the_first_token() -> None:
    agreement = generation.compare(gen([1, 2]), gen([3, 2]))
    assert agreement.first_divergence == 0 and agreement.max_logprob_diff == 0.0 and not agreement.close


# ---- parse ----


def test_parse_reads_sglangs_answer() -> None:
    parsed = generation.parse(sglang_answer([11, 12, 13]), 3)
    assert parsed.output_ids == [11, 12, 13] and parsed.logprobs == [-0.5, -0.5, -0.5]
    assert parsed.top[1] == {12: -0.5, 13: -1.25}


def test_parse_batch_reads_each_and_refuses_a_wrong_size() -> None:
    parsed = generation.parse_batch([sglang_answer([1, 2]), sglang_answer([3, 4])], 2, 2)
    assert [p.output_ids for p in parsed] == [[1, 2], [3, 4]]
    with pytest.raises(RequestFailed, match="a batch of 3 prompts"):
        generation.parse_batch([sglang_answer([1, 2])] * 2, 3, 2)
    with pytest.raises(RequestFailed, match="a batch of 2 prompts"):
        generation.parse_batch(sglang_answer([1, 2]), 2, 2)


def _broken(change: str) -> dict[str, Any]:
    answer = sglang_answer([11, 12, 13])
    meta = answer["meta_info"]
    if change == "no meta_info":
        del answer["meta_info"]
    elif change == "meta_info not an object":
        answer["meta_info"] = [1]
    elif change == "ids not ints":
        answer["output_ids"] = ["11", 12, 13]
    elif change == "ids not a list":
        answer["output_ids"] = "11 12 13"
    elif change == "short ids":
        answer["output_ids"] = [11, 12]
    elif change == "completion_tokens":
        meta["completion_tokens"] = 2
    elif change == "no output_token_logprobs":
        del meta["output_token_logprobs"]
    elif change == "short output_token_logprobs":
        meta["output_token_logprobs"] = meta["output_token_logprobs"][:2]
    elif change == "short output_top_logprobs":
        meta["output_top_logprobs"] = meta["output_top_logprobs"][:2]
    elif change == "top entry not a pair":
        meta["output_top_logprobs"][0] = [[-0.5]]
    elif change == "logprob not a number":
        meta["output_token_logprobs"][1] = [None, 12, None]
    elif change == "top id not an id":
        meta["output_top_logprobs"][2] = [[-0.5, "thirteen", None]]
    return answer


EXPECTED = {
    "no meta_info": "no meta_info",
    "meta_info not an object": "no meta_info",
    "ids not ints": 'output_ids[0] is "11", not a token id',
    "short ids": "asked for 3 tokens (ignore_eos), got 2 output ids, completion_tokens 3",
    "completion_tokens": "asked for 3 tokens (ignore_eos), got 3 output ids, completion_tokens 2",
    "no output_token_logprobs": "output_token_logprobs is not a list of",
    "short output_token_logprobs": "logprobs do not cover every output token",
    "short output_top_logprobs": "logprobs do not cover every output token",
    "top entry not a pair": "output_top_logprobs is not a list of",
    "logprob not a number": "output_token_logprobs[1] is null, not a finite logprob",
    "top id not an id": 'output_top_logprobs[2][0][1] is "thirteen", not a token id',
    "ids not a list": "output_ids is not a list of token ids",
}


@pytest.mark.parametrize("change", sorted(EXPECTED))
def test_parse_refuses_a_malformed_or_short_answer(change: str) -> None:
    with pytest.raises(RequestFailed) as caught:
        generation.parse(_broken(change), 3)
    assert str(caught.value).startswith("/generate: ") and EXPECTED[change] in str(caught.value)


VALUES = {
    "NaN logprob": (("meta_info", "output_token_logprobs", 1, 0), "NaN", "output_token_logprobs[1] is NaN"),
    "Infinity logprob": (("meta_info", "output_token_logprobs", 0, 0), "Infinity", "[0] is Infinity"),
    "-Infinity top logprob": (
        ("meta_info", "output_top_logprobs", 2, 1, 0),
        "-Infinity",
        "[2][1][0] is -Infinity",
    ),
    "true id": (("output_ids", 1), "true", "output_ids[1] is true, not a token id"),
    "false top id": (
        ("meta_info", "output_top_logprobs", 0, 0, 1),
        "false",
        "[0][0][1] is false, not a token",
    ),
    "true logprob": (
        ("meta_info", "output_token_logprobs", 2, 0),
        "true",
        "[2] is true, not a finite logprob",
    ),
    "negative id": (("output_ids", 0), "-1", "output_ids[0] is -1, not a token id"),
    "fractional id": (("output_ids", 2), "13.5", "output_ids[2] is 13.5, not a token id"),
}


@pytest.mark.parametrize("case", sorted(VALUES))
def test_parse_refuses_a_value_no_model_gives(case: str) -> None:
    """The answer as JSON text (NaN, Infinity and true are what a server can send), one value replaced."""
    path, value, expected = VALUES[case]
    answer = sglang_answer([11, 12, 13])
    node: Any = answer
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@"
    text = json.dumps(answer).replace('"@@"', value)
    with pytest.raises(generation.BadValue) as caught:
        generation.parse(json.loads(text), 3)
    assert str(caught.value).startswith("/generate: ") and expected in str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@given(
    path=st.sampled_from(
        [
            ("output_ids",),
            ("meta_info", "completion_tokens"),
            ("meta_info", "output_token_logprobs"),
            ("meta_info", "output_token_logprobs", 0),
            ("meta_info", "output_token_logprobs", 1, 0),
            ("meta_info", "output_top_logprobs"),
            ("meta_info", "output_top_logprobs", 0),
            ("meta_info", "output_top_logprobs", 1, 0),
            ("meta_info", "output_top_logprobs", 1, 1, 1),
        ]
    ),
    value=json_values,
)
def test_any_answer_parses_or_is_a_named_request_failure(path: tuple[Any, ...], value: object) -> None:
    """Whatever a server sends where SGLang sends a value: a Generation, or RequestFailed (never a
    TypeError that would end the smoke with a traceback and no report)."""
    answer = sglang_answer([11, 12])
    node: Any = answer
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = copy.deepcopy(value)
    try:
        parsed = generation.parse(json.loads(json.dumps(answer)), 2)
    except RequestFailed as exc:
        assert str(exc).startswith("/generate: ")
        return
    assert len(parsed.output_ids) == len(parsed.logprobs) == len(parsed.top) == 2


def test_request_asks_for_greedy_exact_counts_with_top_logprobs() -> None:
    body = generation.request([[1, 2, 3]], 7)
    assert body["input_ids"] == [1, 2, 3]  # one prompt: one answer object, not a list
    assert body["sampling_params"] == {"temperature": 0, "max_new_tokens": 7, "ignore_eos": True}
    assert body["return_logprob"] and body["top_logprobs_num"] == generation.TOP_N
    assert generation.request([[1], [2]], 7)["input_ids"] == [[1], [2]]


def test_prompts_are_reproducible_and_differ_by_index() -> None:
    assert generation.prompt(0, 1, 64, 30_000) == generation.prompt(0, 1, 64, 30_000)
    assert generation.prompt(0, 1, 64, 30_000) != generation.prompt(0, 2, 64, 30_000)
    assert generation.prompt(0, 1, 64, 30_000) != generation.prompt(1, 1, 64, 30_000)
    assert all(1 <= t < 30_000 for t in generation.prompt(3, 0, 512, 30_000))


# ---- the load generator's result ----


def _h200() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "sweep-c1-h200.json").read_text())
    return data


def test_sweep_parse_reads_a_real_h200_result() -> None:
    level = sweep.parse(_h200(), concurrency=1, requests=8)
    assert (level.completed, level.errors, level.first_error) == (8, 0, "")
    assert level.ttft_p50_ms == 17.71 and level.ttft_p99_ms == 19.89
    assert level.itl_p50_ms == 2.422 and level.e2e_p50_ms == 321.82
    assert level.output_tokens == 1024 and level.output_tokens_per_s == 391.3
    assert level.duration_s == 2.617


def test_sweep_parse_counts_missing_requests_and_keeps_the_first_errors_last_line() -> None:
    result = _h200() | {"completed": 6}
    result["errors"] = [
        "",
        "Traceback (most recent call last):\n  ...\naiohttp.ClientError: reset\n",
        "",
        "x",
    ]
    level = sweep.parse(result, concurrency=1, requests=8)
    assert level.errors == 2 and level.first_error == "aiohttp.ClientError: reset"


@pytest.mark.parametrize("field", ["completed", "median_ttft_ms", "p99_itl_ms", "output_throughput"])
def test_sweep_parse_names_a_missing_field(field: str) -> None:
    result = _h200()
    del result[field]
    with pytest.raises(CommandFailed, match=f"without '{field}' at concurrency 4"):
        sweep.parse(result, concurrency=4, requests=16)


# ---- the comparison's rows ----


def test_the_control_fails_where_the_answers_do_not_depend_on_the_prompt() -> None:
    """SGLang's dummy weights gave near-flat logits: every prompt's greedy tokens were near ties of any
    other's. A model like that passes the real comparison and the control alike; the control row fails."""
    flat = [gen([5, 6, 7], [-11.9] * 3, [{5: -11.9, 6: -11.91, 7: -11.92}] * 3) for _ in range(4)]
    rows, kept = checks.without_deepep(flat, flat)
    versus, control = rows
    assert versus.verdict == "ok"
    assert (control.component, control.verdict, control.found) == (
        "deepep-v2-vs-none-control",
        "fail",
        "0/4 refused",
    )
    assert "accepted: prompts 0, 1, 2, 3" in control.detail and control.fix
    assert kept["control"]["close"] == 4 and kept["close"] == 4


def test_the_comparison_names_each_prompt_outside_the_rule() -> None:
    through = [gen([5, 6]), gen([5, 6], [-1.0, -1.5]), gen([9, 6])]
    reference = [gen([5, 6]), gen([5, 6]), gen([5, 6])]
    rows, kept = checks.without_deepep(through, reference)
    versus = rows[0]
    assert versus.verdict == "fail" and versus.found == "2/3 identical; parted: prompt 2 at token 0"
    assert versus.detail == (
        "max |logprob difference| up to the parting 0.5 (tolerance 0.15); per prompt 0 0.5 0; "
        "not within the rule: "
        "prompt 1 (logprobs 0.5 apart), prompt 2 (token 0: a token outside the other's top-5)"
    )
    assert kept["first_divergence"] == [None, None, 0] and kept["max_logprob_diff"] == [0.0, 0.5, 0.0]
