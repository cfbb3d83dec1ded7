"""The serving loop: Little's law, agreement with the step model at concurrency 1, a full KV cache,
reproducibility, throughput against concurrency, and the pieces (workloads, acceptance draws, KV blocks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.draws import AcceptanceDraws, rate_for_length, tokens_of_rounds
from moesim.simulator.serving.kv import KvBlocks, kv_capacity
from moesim.simulator.serving.options import SchedulerLimits
from moesim.simulator.serving.run import (
    ServeOptions,
    capacity_for,
    draws_for,
    resolve_serving,
    serve,
    simulate_serving,
)
from moesim.simulator.serving.step_cost import ScenarioStepCost, StepShape, bucket
from moesim.simulator.serving.workload import (
    RequestSpec,
    Workload,
    chat_workload,
    jsonl_workload,
    random_workload,
    send_times_s,
    sglang_random_workload,
)
from moesim.simulator.speculative.acceptance import tokens_per_step
from moesim.simulator.speculative.point import speculative_point
from tests.core_fixtures import h200, model

MODEL = "qwen3-30b-a3b"
SCENARIO = Scenario(MODEL, "h200")  # typical routing, EAGLE drafter, K = 3, α = 0.8


@pytest.fixture(scope="module")
def cost() -> ScenarioStepCost:
    return ScenarioStepCost(resolve_serving(SCENARIO))


def _run(workload, cost, *, speculative=True, options=None, seed=0, **kwargs):  # type: ignore[no-untyped-def]
    options = options or ServeOptions()
    resolved = cost.resolved
    capacity = capacity_for(resolved, options, with_drafter=speculative)
    draws = draws_for(resolved, seed) if speculative else None
    return simulate_serving(workload, cost, capacity, draws, options=options, seed=seed, **kwargs)


def test_littles_law_closed_loop(cost: ScenarioStepCost) -> None:
    concurrency = 8
    workload = random_workload(96, 512, 64, range_ratio=0.5, seed=3)
    run = _run(workload, cost, max_concurrency=concurrency)
    latency_s = run.values["mean_e2el_ms"] / 1e3
    # L = λ W, with L counted over time by the loop, apart from the latencies
    assert run.time_average_in_system == pytest.approx(run.values["request_throughput"] * latency_s, rel=1e-9)
    # closed loop: C requests in the system except while the last ones drain
    max_latency_s = run.values["p99_e2el_ms"] / 1e3 * 1.5
    assert concurrency * (1 - max_latency_s / run.duration_s) <= run.time_average_in_system <= concurrency
    assert run.completed == 96


def test_concurrency_one_matches_the_step_model() -> None:
    """Fixed lengths, one request at a time (no prefill beside decode), every draft accepted: TPOT is the
    speculative point's decode step and the SD speedup of TPOT is the point's speedup, at the same context."""
    k, prompt = 3, 2048
    output = 1 + 6 * (k + 1)  # the first token from prefill, then six full rounds
    scenario = SCENARIO.replace(draft_len=k, acceptance=1.0, context_len=prompt)
    cost = ScenarioStepCost(resolve_serving(scenario))
    workload = Workload((RequestSpec(prompt, output),) * 3, "fixed")
    sd = _run(workload, cost, max_concurrency=1)
    base = _run(workload, cost, speculative=False, max_concurrency=1)
    point = speculative_point(scenario.resolve(), FastTimer(h200()))
    assert base.values["mean_tpot_ms"] == pytest.approx(point.decode.step_s * 1e3, rel=1e-9)
    assert base.values["mean_tpot_ms"] / sd.values["mean_tpot_ms"] == pytest.approx(point.speedup, rel=1e-9)
    assert sd.mean_decode_batch <= 1.0


def test_full_kv_cache_makes_requests_wait_not_fail(cost: ScenarioStepCost) -> None:
    workload = random_workload(40, 300, 200, seed=1)
    roomy = _run(workload, cost, max_concurrency=40)
    tight = _run(workload, cost, max_concurrency=40, options=ServeOptions(kv_cache_tokens=2048))
    assert tight.completed == roomy.completed == 40
    assert tight.total_output_tokens == roomy.total_output_tokens
    assert tight.peak_kv_fraction <= 1.0
    assert tight.preemptions > 0 and roomy.preemptions == 0
    assert tight.values["mean_ttft_ms"] > roomy.values["mean_ttft_ms"]


def test_a_request_larger_than_the_cache_is_refused_before_running(cost: ScenarioStepCost) -> None:
    workload = Workload((RequestSpec(4000, 100),), "too long")
    with pytest.raises(MoesimError, match="kv_cache_tokens"):
        _run(workload, cost, options=ServeOptions(kv_cache_tokens=1024))


def test_same_seed_same_numbers(cost: ScenarioStepCost) -> None:
    def once(seed: int) -> str:
        workload = random_workload(48, 256, 64, range_ratio=0.5, seed=seed)
        result = serve(SCENARIO, workload, concurrencies=[8], request_rates=[20.0], seed=seed, step_cost=cost)
        return json.dumps(result.to_json(), sort_keys=True)

    assert once(7) == once(7)
    assert once(7) != once(8)


def test_raising_concurrency_never_lowers_throughput(cost: ScenarioStepCost) -> None:
    workload = random_workload(128, 512, 128, range_ratio=0.5, seed=2)
    result = serve(SCENARIO, workload, concurrencies=[1, 2, 4, 8, 16, 32, 64], step_cost=cost)
    for mode in ("sd", "baseline"):
        runs = [getattr(point, mode) for point in result.points]
        assert all(run.preemptions == 0 for run in runs)
        throughputs = [run.values["output_throughput"] for run in runs]
        assert throughputs == sorted(throughputs)


def test_open_loop_at_a_low_rate_has_no_queueing(cost: ScenarioStepCost) -> None:
    workload = Workload((RequestSpec(1024, 16),) * 20, "fixed")
    run = _run(workload, cost, speculative=False, request_rate=0.5, burstiness=50.0)  # ~2 s apart
    prefill_s = cost(StepShape(0, 1, 0, _chunks(1024)))
    assert run.values["p99_ttft_ms"] == pytest.approx(prefill_s * 1e3, rel=1e-9)
    assert run.time_average_in_system < 1.0


def _chunks(tokens: int):  # type: ignore[no-untyped-def]
    from moesim.simulator.plan.mixed import PrefillChunks

    return PrefillChunks.of([(tokens, 0)])


def test_mixed_step_costs_more_than_its_parts_alone_and_grows_with_the_chunk(cost: ScenarioStepCost) -> None:
    decode = cost(StepShape(32, 1, 1500))
    prefill = cost(StepShape(0, 1, 0, _chunks(2048)))
    mixed = [cost(StepShape(32, 1, 1500, _chunks(p))) for p in (256, 1024, 2048, 4096)]
    assert mixed[0] > decode
    assert mixed[2] > prefill
    assert mixed == sorted(mixed)
    assert mixed[2] < decode + prefill  # one pass reads the weights once


def test_bucket_is_close_and_exact_for_small_values() -> None:
    assert [bucket(v) for v in range(16)] == list(range(16))
    for value in (17, 100, 1000, 2071, 123_456.7):
        assert abs(bucket(value) - value) <= value / 32


@given(st.integers(1, 8), st.integers(0, 300), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_tokens_of_rounds_is_one_plus_the_leading_accepted_drafts(
    draft_len: int, rounds: int, rate: float, seed: int
) -> None:
    """The column-at-a-time count equals the cumulative-product form, integers and dtype alike."""
    accepted = np.random.default_rng(seed).random((rounds, draft_len)) < rate
    expected = 1 + np.cumprod(accepted, axis=1).sum(axis=1)
    got = tokens_of_rounds(accepted)
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


def test_acceptance_draws_match_the_acceptance_model() -> None:
    for alpha, k in ((0.8, 3), (0.5, 5), (0.95, 1)):
        draws = AcceptanceDraws(k, alpha, seed=0).draw(200_000)
        assert draws.min() >= 1 and draws.max() <= k + 1
        mean = float(tokens_per_step(alpha, k))
        assert abs(draws.mean() - mean) < 4 * draws.std() / math.sqrt(draws.size)
    assert float(tokens_per_step(rate_for_length(2.5, 3), 3)) == pytest.approx(2.5, rel=1e-12)
    assert (AcceptanceDraws(3, 0.0, acceptance_length=4.0).draw(100) == 4).all()
    with pytest.raises(MoesimError, match="acceptance_length"):
        AcceptanceDraws(3, 0.8, acceptance_length=0.5)


def test_kv_blocks_account_for_every_block() -> None:
    kv = KvBlocks(160, block_tokens=16, state_tokens=20)  # 10 blocks, 2 of state per request
    assert kv.reserve(1, 30)  # 2 + 2
    assert kv.reserve(1, 31) and kv.used_blocks == 4  # same blocks
    assert kv.reserve(2, 64)  # 4 + 2
    assert not kv.reserve(3, 1)  # needs 3, 0 free
    kv.release(1)
    assert kv.free_blocks == 4 and kv.peak_used_blocks == 10
    assert kv.fits_alone(128) and not kv.fits_alone(129)


@given(st.integers(0, 3), st.integers(1, 32), st.lists(st.integers(1, 200), min_size=1, max_size=20))
def test_kv_covered_tokens_is_where_reserve_starts_taking_blocks(
    state_tokens: int, block_tokens: int, asks: list[int]
) -> None:
    """The serving loop skips `reserve` for requests within their blocks: those calls take nothing."""
    kv = KvBlocks(10_000, block_tokens=block_tokens, state_tokens=state_tokens)
    for tokens in sorted(asks):
        assert kv.reserve(7, tokens)
        covered = kv.covered_tokens(7)
        assert covered >= tokens
        held = kv.used_blocks
        assert kv.reserve(7, covered) and kv.used_blocks == held  # up to it: nothing taken
        assert kv.reserve(7, covered + 1) and kv.used_blocks == held + 1  # one past it: a block
    kv.release(7)
    assert kv.covered_tokens(7) <= 0


# Distinct owners, each asking for its tokens (a step's reservations).
OWNER_ASKS = st.lists(
    st.tuples(st.integers(1, 100), st.integers(1, 300)), min_size=1, max_size=12, unique_by=lambda x: x[0]
)


@given(st.integers(0, 40), OWNER_ASKS, st.integers(1, 60))
def test_reserve_all_is_reserve_in_turn_or_nothing(
    state_tokens: int, asks: list[tuple[int, int]], blocks: int
) -> None:
    """A whole step's reservations at once: the blocks and peak of `reserve` called in turn when every call
    succeeds, else nothing taken."""
    one, many = (KvBlocks(blocks * 16, 16, state_tokens) for _ in range(2))
    owners = [owner for owner, _ in asks]
    for kv in (one, many):  # each owner already holds its first block (the loop reserves on admission)
        for owner in owners:
            kv.reserve(owner, 1)
    before = many.free_blocks
    ok = many.reserve_all(np.array(owners), np.array([tokens for _, tokens in asks]))
    if ok:
        assert all(one.reserve(owner, tokens) for owner, tokens in asks)
        assert (many.free_blocks, many.peak_used_blocks) == (one.free_blocks, one.peak_used_blocks)
        assert many.covered_tokens_of(np.array(owners)).tolist() == [one.covered_tokens(o) for o in owners]
    else:
        assert many.free_blocks == before
        assert not all(one.reserve(owner, tokens) for owner, tokens in asks)


@given(st.integers(0, 40), OWNER_ASKS, st.integers(1, 60))
def test_extend_all_is_reserve_all_for_owners_past_their_cover(
    state_tokens: int, asks: list[tuple[int, int]], blocks: int
) -> None:
    """A decode step's reservations (each owner's tokens past what its blocks cover): the same blocks, peak
    and covered tokens as `reserve_all` and `covered_tokens_of`, or nothing taken when they do not fit."""
    one, many = (KvBlocks(blocks * 16, 16, state_tokens) for _ in range(2))
    for kv in (one, many):
        for owner, _ in asks:
            kv.reserve(owner, 1)
    asks = [(owner, tokens) for owner, tokens in asks if tokens > many.covered_tokens(owner)]
    owners = np.array([o for o, _ in asks], dtype=np.intp)
    tokens = np.array([t for _, t in asks], dtype=np.int64)
    before = many.free_blocks
    covered = many.extend_all(owners, tokens)
    ok = one.reserve_all(owners, tokens)
    assert ok == (covered is not None)
    assert (many.free_blocks, many.peak_used_blocks) == (one.free_blocks, one.peak_used_blocks)
    if covered is not None:
        assert covered.tolist() == one.covered_tokens_of(owners).tolist()
    else:
        assert many.free_blocks == before


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25),
    kv_tokens=st.integers(400, 4000),
    concurrency=st.one_of(st.none(), st.integers(1, 12)),
    budget=st.integers(8, 512),
    draft_len=st.integers(0, 4),
    rate=st.sampled_from([math.inf, 300.0]),
)
def test_the_array_step_is_the_request_by_request_step(  # type: ignore[no-untyped-def]
    lengths, kv_tokens, concurrency, budget, draft_len, rate
) -> None:
    """A step's per-request work runs over arrays from `loop.ARRAY_FROM` running requests, one request at a
    time below it, and a step in which every running request decodes is scheduled in one array pass; every
    figure is bit for bit alike whichever path each step takes (the request-by-request scheduling is the only
    one for steps with prompt chunks or a KV shortage)."""
    from moesim.simulator.serving import loop

    requests = tuple(RequestSpec(i, o) for i, o in lengths)
    kv_tokens = max(kv_tokens, max(i + o for i, o in lengths) + 24)
    sends = send_times_s(len(requests), rate, 1.0, 0)

    def run(array_from: int, one_pass: bool = True) -> list[object]:
        kv = KvBlocks(kv_tokens, 16)
        acceptance = AcceptanceDraws(draft_len, 0.6, seed=1) if draft_len else None
        limits = SchedulerLimits(max_num_batched_tokens=max(budget, draft_len + 1))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(loop, "ARRAY_FROM", array_from)
            if not one_pass:
                patch.setattr(loop, "_all_decode", lambda state, running, budget: None)
            states, state = loop.run_serving_loop(
                requests, sends, _LinearCost(), kv, limits, acceptance, concurrency
            )
        per_request = [
            (r.generated, r.preemptions, r.sent_s, r.first_token_s, r.finish_s, list(r.itls_s))
            for r in states
        ]
        return [per_request, state.steps, state.decode_rows, state.in_system_area, kv.peak_used_blocks]

    arrays = run(1)
    assert run(1, one_pass=False) == arrays
    assert run(3) == arrays
    assert run(10**9) == arrays  # every step one request at a time


def test_kv_capacity_from_the_memory_model() -> None:
    qwen = model(MODEL)
    capacity = kv_capacity(qwen, h200())
    # Qwen3-30B-A3B: 48 layers × 4 KV heads × 128 × 2 (K, V) × 2 bytes = 96 KiB per token
    assert capacity.bytes_per_token == 48 * 4 * 128 * 2 * 2
    tighter = kv_capacity(qwen, h200(), gpu_memory_utilization=0.8)
    assert tighter.tokens < capacity.tokens
    with pytest.raises(MoesimError, match="memory"):
        kv_capacity(model("deepseek-v3"), h200())


def test_vllm_random_lengths_stay_in_range() -> None:
    workload = random_workload(5000, 1000, 100, range_ratio=0.25, seed=0)
    inputs = np.array([r.input_len for r in workload.requests])
    outputs = np.array([r.output_len for r in workload.requests])
    assert inputs.min() == 750 and inputs.max() == 1250
    assert outputs.min() == 75 and outputs.max() == 125
    fixed = random_workload(10, 1000, 100)
    assert {(r.input_len, r.output_len) for r in fixed.requests} == {(1000, 100)}
    with pytest.raises(MoesimError, match="random_range_ratio"):
        random_workload(10, 1000, 100, range_ratio=1.0)


def test_sglang_random_lengths_stay_in_range() -> None:
    workload = sglang_random_workload(5000, 1000, 100, range_ratio=0.5, seed=0)
    inputs = np.array([r.input_len for r in workload.requests])
    assert inputs.min() == 500 and inputs.max() == 1000


def test_chat_lengths_have_the_documented_medians() -> None:
    workload = chat_workload(20_000, seed=0)
    assert np.median([r.input_len for r in workload.requests]) == pytest.approx(1020, rel=0.05)
    assert np.median([r.output_len for r in workload.requests]) == pytest.approx(129, rel=0.05)


def test_jsonl_workload_and_its_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "w.jsonl"
    good.write_text('{"input_len": 10, "output_len": 5}\n\n{"input_len": 7, "output_len": 2}\n')
    assert jsonl_workload(good).requests == (RequestSpec(10, 5), RequestSpec(7, 2))
    assert len(jsonl_workload(good, num_prompts=1).requests) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_len": 10, "output_len": 5}\n{"input_len": "x"}\n')
    with pytest.raises(MoesimError, match=r"bad\.jsonl:2"):
        jsonl_workload(bad)


def test_send_times_follow_vllm() -> None:
    assert (send_times_s(5, math.inf) == 0).all()
    poisson = send_times_s(4000, 10.0, 1.0, seed=0)
    assert poisson[-1] == pytest.approx(400.0)
    assert (np.diff(poisson) >= 0).all()
    bursty = np.diff(send_times_s(4000, 10.0, 0.25, seed=0))
    smooth = np.diff(send_times_s(4000, 10.0, 4.0, seed=0))
    assert bursty.std() / bursty.mean() > 1.5 > 0.75 > smooth.std() / smooth.mean()
    with pytest.raises(MoesimError, match="burstiness"):
        send_times_s(5, 1.0, 0.0)


def test_scheduler_limits_are_checked(cost: ScenarioStepCost) -> None:
    workload = Workload((RequestSpec(10, 10),), "one")
    limits = SchedulerLimits(max_num_batched_tokens=2)
    with pytest.raises(MoesimError, match="max_num_batched_tokens"):
        _run(workload, cost, options=ServeOptions(limits=limits))


def test_tensor_parallel_concurrency_one_matches_the_parallel_step_model() -> None:
    k, prompt = 3, 2048
    scenario = SCENARIO.replace(
        draft_len=k, acceptance=1.0, context_len=prompt, layout=ParallelLayout(gpus=2, tp=2)
    )
    tp_cost = ScenarioStepCost(resolve_serving(scenario))
    workload = Workload((RequestSpec(prompt, 1 + 4 * (k + 1)),) * 2, "fixed")
    sd = _run(workload, tp_cost, max_concurrency=1)
    base = _run(workload, tp_cost, speculative=False, max_concurrency=1)
    point = speculative_point(scenario.resolve(), FastTimer(h200()))
    assert point.decode.parallel is not None
    assert base.values["mean_tpot_ms"] == pytest.approx(point.decode.step_s * 1e3, rel=1e-9)
    assert base.values["mean_tpot_ms"] / sd.values["mean_tpot_ms"] == pytest.approx(point.speedup, rel=1e-9)


def test_tensor_parallel_prefill_adds_work_and_the_kv_cache_grows() -> None:
    layout = ParallelLayout(gpus=4, tp=4)
    tp_cost = ScenarioStepCost(resolve_serving(SCENARIO.replace(layout=layout)))
    decode = tp_cost(StepShape(16, 1, 1024))
    mixed = [tp_cost(StepShape(16, 1, 1024, _chunks(p))) for p in (512, 2048, 8192)]
    assert decode < mixed[0] < mixed[1] < mixed[2]
    assert tp_cost(StepShape(0, 1, 0, _chunks(2048))) < mixed[1]
    one = capacity_for(resolve_serving(SCENARIO), ServeOptions(), with_drafter=False)
    four = capacity_for(tp_cost.resolved, ServeOptions(), with_drafter=False)
    assert four.tokens > 4 * one.tokens  # the weights are split too


EP_DP = ParallelLayout(gpus=4, tp=1, ep=4)  # SGLang --tp 4 --enable-dp-attention --dp 4 --ep-size 4


@pytest.mark.parametrize("layout", [EP_DP, ParallelLayout(gpus=4, tp=4, ep=4)], ids=["ep-dp", "ep-tp"])
def test_expert_parallel_concurrency_one_matches_the_parallel_step_model(layout: ParallelLayout) -> None:
    """A serving run at concurrency 1 decodes with the parallel step model's steps: the busiest DP group's
    attention, the all-to-all dispatch and combine, the busiest expert rank."""
    k, prompt = 3, 2048
    scenario = SCENARIO.replace(draft_len=k, acceptance=1.0, context_len=prompt, layout=layout)
    cost = ScenarioStepCost(resolve_serving(scenario))
    workload = Workload((RequestSpec(prompt, 1 + 4 * (k + 1)),) * 2, "fixed")
    sd = _run(workload, cost, max_concurrency=1)
    base = _run(workload, cost, speculative=False, max_concurrency=1)
    point = speculative_point(scenario.resolve(), FastTimer(h200()))
    assert point.decode.parallel is not None and "dispatch" in point.decode.parallel.collectives
    assert base.values["mean_tpot_ms"] == pytest.approx(point.decode.step_s * 1e3, rel=1e-9)
    assert base.values["mean_tpot_ms"] / sd.values["mean_tpot_ms"] == pytest.approx(point.speedup, rel=1e-9)


def test_dp_attention_holds_dp_pools_of_its_own_sequences_kv() -> None:
    """Each DP attention group keeps only its own sequences' KV, so the pool is dp × one rank's."""
    from moesim.simulator.plan.memory import weight_bytes_per_rank

    resolved = resolve_serving(SCENARIO.replace(layout=EP_DP))
    capacity = capacity_for(resolved, ServeOptions(), with_drafter=False)
    weights = sum(weight_bytes_per_rank(resolved.model, EP_DP).values())
    free = 0.9 * resolved.hardware.datasheet.memory_capacity_bytes - weights
    assert capacity.tokens == EP_DP.dp * int(free // capacity.bytes_per_token)
    assert "4 attention groups" in capacity.description


def test_expert_parallel_prefill_adds_its_tokens_to_the_all_to_all() -> None:
    cost = ScenarioStepCost(resolve_serving(SCENARIO.replace(layout=EP_DP)))
    comm = [cost._communication_s(16, chunk) for chunk in (0, 512, 2048, 8192)]
    assert 0.0 < comm[0] < comm[1] < comm[2] < comm[3]
    decode = cost(StepShape(16, 1, 1024))
    mixed = [cost(StepShape(16, 1, 1024, _chunks(p))) for p in (512, 2048, 8192)]
    assert decode < mixed[0] < mixed[1] < mixed[2]


class _LinearCost:
    """A stand-in step cost (1 ms + 1 µs per token): the loop's bookkeeping, not the physics, under test."""

    description = "linear"

    def __call__(self, shape: StepShape) -> float:
        prefill = shape.chunks.tokens if shape.chunks else 0
        return 1e-3 + 1e-6 * (shape.decode_seqs * shape.tokens_per_seq + prefill)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25),
    kv_tokens=st.integers(400, 4000),
    concurrency=st.one_of(st.none(), st.integers(1, 12)),
    budget=st.integers(8, 512),
    speculative=st.booleans(),
)
def test_every_request_finishes_whatever_the_cache_and_budget(  # type: ignore[no-untyped-def]
    lengths, kv_tokens, concurrency, budget, speculative
) -> None:
    from moesim.simulator.serving.loop import run_serving_loop

    requests = tuple(RequestSpec(i, o) for i, o in lengths)
    if max(i + o for i, o in lengths) + 4 > kv_tokens:
        kv_tokens = max(i + o for i, o in lengths) + 20
    kv = KvBlocks(kv_tokens, 16)
    acceptance = AcceptanceDraws(3, 0.6, seed=1) if speculative else None
    states, state = run_serving_loop(
        requests,
        np.zeros(len(requests)),
        _LinearCost(),
        kv,
        SchedulerLimits(max_num_batched_tokens=budget),
        acceptance,
        concurrency,
    )
    assert state.finished == len(requests) and kv.free_blocks == kv.total_blocks
    assert kv.peak_used_blocks <= kv.total_blocks
    for r in states:
        assert r.generated == r.spec.output_len
        assert r.sent_s <= r.first_token_s <= r.finish_s
        assert len(r.itls_s) <= r.spec.output_len - 1 + r.preemptions
        assert math.isclose(sum(r.itls_s), r.finish_s - r.first_token_s, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("serving_engine", ["vllm", "sglang"])
def test_concurrency_one_matches_the_point_under_a_serving_engine(serving_engine: str) -> None:
    """Host work, graph padding and the acceptance sync reach the serving run exactly as the speculative
    point has them; a mixed step (prefill beside decode) costs the engine's host time on top."""
    k, prompt = 3, 2048
    scenario = SCENARIO.replace(
        draft_len=k, acceptance=1.0, context_len=prompt, serving_engine=serving_engine
    )
    cost = ScenarioStepCost(resolve_serving(scenario))
    workload = Workload((RequestSpec(prompt, 1 + 6 * (k + 1)),) * 2, "fixed")
    sd = _run(workload, cost, max_concurrency=1)
    base = _run(workload, cost, speculative=False, max_concurrency=1)
    point = speculative_point(scenario.resolve(), FastTimer(h200()))
    assert base.values["mean_tpot_ms"] == pytest.approx(point.decode.step_s * 1e3, rel=1e-9)
    assert base.values["mean_tpot_ms"] / sd.values["mean_tpot_ms"] == pytest.approx(point.speedup, rel=1e-9)
    ideal = ScenarioStepCost(resolve_serving(SCENARIO))
    mixed = StepShape(8, 1, 1024, _chunks(1024))
    assert cost(mixed) > ideal(mixed)
