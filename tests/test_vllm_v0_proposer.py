"""vLLM V0's proposer as the `vllm-v0` preset runs it (vLLM 0.6.3.post1 `vllm/spec_decode/`): the drafter's
tensor parallelism, drafter passes prepared on the host, and the bonus-token rows every draft pass re-runs."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from moesim.cli import cli
from moesim.errors import MoesimError
from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.profile import (
    DrafterStyle,
    HostCosts,
    ServingEngineProfile,
    load_serving_engine,
    profile_from_dict,
    profile_to_dict,
)
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.hardware.profile import load_profile
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.acceptance import all_accepted_share, tokens_per_step
from moesim.simulator.speculative.drafters import parse_drafter
from moesim.simulator.speculative.point import engine_point, scenario_timers
from tests.core_fixtures import model

TARGET, DRAFT = "qwen2-57b-a14b", "model:qwen2-0.5b"


@functools.cache
def _timers(drafter: str, gpus: int):  # type: ignore[no-untyped-def]
    hardware = load_profile("a800")
    scenario = Scenario(
        model=model(TARGET if drafter == DRAFT else "mixtral-8x7b"),
        hardware=hardware,
        drafter=drafter,
        layout=ParallelLayout(gpus=gpus, tp=gpus),
        routing="independent",
    )
    return scenario_timers(scenario.resolve(check_fit=False), FastTimer(hardware))


def _v0(**drafter: object) -> ServingEngineProfile:
    v0 = load_serving_engine("vllm-v0")
    return replace(v0, drafter=replace(v0.drafter, **drafter))  # type: ignore[arg-type]


def _point(profile: ServingEngineProfile, drafter: str, gpus: int, batch: int = 24, tokens: float = 3.0):  # type: ignore[no-untyped-def]
    return engine_point(profile, parse_drafter(drafter), batch, 3, tokens, "graph", *_timers(drafter, gpus))


def test_the_v0_preset_carries_the_proposer_facts_read_from_the_source() -> None:
    style = load_serving_engine("vllm-v0").drafter
    assert (style.draft_tp, style.head_tp) == ("target", "one")  # config.py; spec_decode_worker.py (EAGLE)
    assert style.pass_preparation == "host_unless_tp1" and style.bonus_rows  # multi_step_worker.py
    for name in ("ideal", "vllm", "sglang", "sglang-spec-v1", "trtllm"):
        other = load_serving_engine(name).drafter
        assert (other.draft_tp, other.head_tp, other.pass_preparation, other.bonus_rows) == (
            "target",
            "target",
            "device",
            False,
        )


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("drafter", "draft_tp", "two"),
        ("drafter", "pass_preparation", "cpu"),
        ("drafter", "bonus_rows", 1),
        ("sampler", "bytes_per_logit", -1.0),
        ("sampler", "typo", 1.0),
    ],
)
def test_bad_proposer_fields_name_the_field(section: str, key: str, value: object) -> None:
    data = profile_to_dict(load_serving_engine("vllm-v0"))
    data[section][key] = value
    with pytest.raises(MoesimError) as info:
        profile_from_dict(data, "mine.toml")
    assert info.value.field == f"mine.toml: {section}.{key}"


def test_a_drafter_at_tp_one_runs_unsplit_and_only_a_multi_gpu_layout_tells_them_apart() -> None:
    """EAGLE under vLLM 0.6.3 runs at TP 1 (its TP > 1 raises NotImplementedError), on one GPU of the target's
    two: a memory-bound head reads all its weights on one GPU, so its passes take longer than split in two
    (collectives included) — on one GPU the rule changes nothing."""
    split = _point(_v0(head_tp="target", pass_preparation="device", bonus_rows=False), "eagle", 2)
    one = _point(_v0(head_tp="one", pass_preparation="device", bonus_rows=False), "eagle", 2)
    assert (split.draft_tp, one.draft_tp) == (2, 1)
    assert one.draft_s > split.draft_s
    assert one.decode.step_s == split.decode.step_s and one.verify.step_s == split.verify.step_s
    single = [
        _point(_v0(head_tp=rule, pass_preparation="device", bonus_rows=False), "eagle", 1)
        for rule in ("one", "target")
    ]
    assert single[0].draft_s == single[1].draft_s and single[0].draft_tp == 1


def test_host_prepared_passes_are_all_k_above_tp_one_and_only_the_first_at_tp_one() -> None:
    host = ov.host_prepared_passes
    assert [host(DrafterStyle(), 4, tp) for tp in (1, 2)] == [0, 0]
    assert [host(DrafterStyle(pass_preparation="host_unless_tp1"), 4, tp) for tp in (1, 2, 8)] == [1, 4, 4]


@given(st.integers(1, 256), st.integers(1, 6), st.sampled_from([1, 2, 4]))
def test_draft_host_time_is_the_closed_form_of_its_passes(rows: int, k: int, tp: int) -> None:
    profile = replace(
        _v0(),
        host=HostCosts(draft_step_us=30.0, runner_pass_us=300.0, runner_per_row_us=4.0),
    )
    prepared = k if tp > 1 else 1
    expected_us = (k - prepared) * 30.0 + prepared * (300.0 + 4.0 * rows)
    assert ov.draft_host_s(profile, k, rows, tp) == pytest.approx(expected_us * 1e-6)
    device = replace(profile, drafter=replace(profile.drafter, pass_preparation="device"))
    assert ov.draft_host_s(device, k, rows, tp) == pytest.approx(k * 30e-6)


def test_host_prepared_passes_cost_a_draft_model_split_over_two_gpus_a_host_trip_per_pass() -> None:
    """The 0.5B draft model at the target's TP 2: each of the K passes is a full host-prepared model-runner
    pass whose cost grows with the rows, so its host share of the round grows with the batch."""
    device = _v0(pass_preparation="device", bonus_rows=False)
    prepared = _v0(pass_preparation="host_unless_tp1", bonus_rows=False)
    host = prepared.effective_host
    gaps = []
    for batch in (1, 24, 96):
        a, b = _point(device, DRAFT, 2, batch), _point(prepared, DRAFT, 2, batch)
        assert b.host_prepared_passes == 3 and a.host_prepared_passes == 0 and b.draft_tp == 2
        expected = 3 * (host.runner_pass_us + host.runner_per_row_us * batch) * 1e-6
        assert b.draft_host_s == pytest.approx(expected)
        gaps.append(b.round_s - a.round_s)
    assert 0.0 < gaps[0] < gaps[1] < gaps[2]


@given(st.floats(0.05, 0.99), st.integers(1, 6))
def test_all_accepted_share_is_alpha_to_the_k_of_the_geometric_acceptance(alpha: float, k: int) -> None:
    tokens = float(tokens_per_step(alpha, k))
    assert all_accepted_share(tokens, k) == pytest.approx(alpha**k, rel=1e-6, abs=1e-9)


def test_all_accepted_share_edges_and_bad_inputs() -> None:
    assert all_accepted_share(1.0, 3) == 0.0 and all_accepted_share(4.0, 3) == 1.0
    assert all_accepted_share(2.0, 3) < all_accepted_share(3.0, 3) < all_accepted_share(3.9, 3)
    with pytest.raises(MoesimError, match="acceptance_length"):
        all_accepted_share(5.0, 3)
    with pytest.raises(MoesimError, match="all_accepted_share"):
        ov.proposer_sequences(DrafterStyle(bonus_rows=True), 4, 1.5)


def test_bonus_rows_grow_the_draft_batch_with_the_acceptance() -> None:
    """A round that accepts every draft leaves the drafter without the KV of the position before the bonus
    token; V0 re-runs it as one more row in every draft pass, so the draft batch grows to B·(1 + α^K): nothing
    at one token per step, twice the batch when every draft is accepted."""
    assert ov.proposer_sequences(DrafterStyle(), 24, 0.8) == 24
    assert [ov.proposer_sequences(DrafterStyle(bonus_rows=True), 24, s) for s in (0.0, 0.5, 1.0)] == [
        24,
        36,
        48,
    ]
    plain = _v0(bonus_rows=False)
    rows = [_point(_v0(), DRAFT, 2, 24, tokens).draft_rows for tokens in (1.0, 2.5, 3.9)]
    assert rows[0] == 24 and 24 < rows[1] < rows[2] <= 48
    low, high = _point(_v0(), DRAFT, 2, 24, 1.0), _point(_v0(), DRAFT, 2, 24, 3.9)
    assert _point(plain, DRAFT, 2, 24, 3.9).draft_rows == 24
    assert high.draft_s > low.draft_s  # more rows: more host rows and a larger draft pass


def test_simulate_prints_the_drafter_line_under_vllm_v0() -> None:
    args = ["simulate", "--model", TARGET, "--hardware", "a800", "--gpus", "2", "--batch", "24"]
    args += ["--draft-len", "3", "--draft", DRAFT, "--serving-engine", "vllm-v0", "--routing", "independent"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (
        "vllm-v0 drafter: 3 passes of 36 rows (24 sequences + 12 re-run before their bonus tokens) at TP 2"
        in (result.output)
    )
    assert "3 prepared on the host" in result.output
    ideal = CliRunner().invoke(cli, [*args[:-4], "--routing", "independent"])
    assert ideal.exit_code == 0 and "drafter:" not in ideal.output


def test_sampler_and_acceptance_bytes_are_the_counted_passes() -> None:
    """vLLM 0.6.3's sampler runs fp32 softmax and log-softmax over the whole vocabulary at every step, and an
    SD round copies the draft and target probabilities and runs the rejection sampler over them (greedy
    too): bytes per vocabulary entry counted from the source; greedy, 0 for the presets whose greedy path is an
    argmax (`tests/test_sampler_passes.py` has the sampled passes)."""
    v0 = load_serving_engine("vllm-v0")
    passes = v0.sampler
    assert (passes.bytes_per_logit, passes.sd_bytes_per_logit) == (38.0, 4.0)
    assert (passes.draft_bytes_per_logit, passes.verify_bytes_per_logit) == (104.0, 8.0)
    assert ov.sampler_bytes(v0, 10, 1000) == 10 * 1000 * 38.0
    assert (
        ov.sampler_bytes(v0, 10, 1000, "verify")
        == 10 * 1000 * 42.0
        == ov.sampler_bytes(v0, 10, 1000, "draft")
    )
    assert ov.acceptance_bytes(v0, 4, 3, 1000) == 4 * 1000 * (3 * 104.0 + 4 * 8.0)
    for name in ("ideal", "vllm", "sglang", "trtllm"):  # greedy: one argmax over the logits, the plan's read
        other = load_serving_engine(name)
        for kind in ("decode", "verify", "draft"):
            assert (
                ov.sampler_bytes(other, 64, 151936, kind) == 0.0 == ov.acceptance_bytes(other, 64, 3, 151936)
            )


def test_sampler_passes_are_a_breakdown_row_that_grows_with_the_vocabulary() -> None:
    """The regime where they matter: a 152k vocabulary (Qwen2) at batch; with Mixtral's 32k they are a fifth
    per row. The verification's row carries the round's acceptance; decode only its own sampler."""
    qwen = _point(_v0(), DRAFT, 2, 24, 3.0)
    mixtral = _point(_v0(), "eagle", 2, 24, 3.0)
    for point in (qwen, mixtral):
        breakdown = point.verify.breakdown_s()
        assert breakdown["sampler"] == point.verify.sampler_s > point.decode.sampler_s > 0.0
        assert sum(breakdown.values()) == pytest.approx(point.verify.step_s)
    assert qwen.verify.sampler_s / mixtral.verify.sampler_s == pytest.approx(151936 / 32000, rel=1e-9)
    plain = replace(_v0(), sampler=replace(_v0().sampler, bytes_per_logit=0.0, sd_bytes_per_logit=0.0))
    assert _point(plain, DRAFT, 2, 24, 3.0).draft_s < qwen.draft_s  # the drafter's passes sample too
    ideal = _point(load_serving_engine("ideal"), DRAFT, 2, 24, 3.0)
    assert ideal.verify.sampler_s == 0.0 == ideal.decode.sampler_s


def test_the_v0_round_runs_its_acceptance_ops_eagerly_and_syncs_three_times_beside_the_readback() -> None:
    """vLLM 0.6.3's rejection sampler, _verify_tokens and the proposer's merges run as eager torch ops after
    the captured forward (73 counted), with 3 `.tolist()` syncs beside the acceptance readback (which host.accept_sync_us prices); V0 keeps no overlap under SD, so the round
    pays every launch: 73 × launch_eager_us + 3 × sync_us on the A800 profile."""
    style = load_serving_engine("vllm-v0").drafter
    assert (style.round_eager_ops, style.round_syncs, style.draft_step_ops) == (73, 3, 0)
    em = load_profile("a800").empirical
    point = _point(_v0(), DRAFT, 2, 24, 3.0)
    assert point.verify.round_ops_s == pytest.approx((73 * em.launch_eager_us + 3 * em.sync_us) * 1e-6)
    assert point.verify.breakdown_s()["sd_round_ops"] == point.verify.round_ops_s
