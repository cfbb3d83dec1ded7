"""The engines' sampler and acceptance passes over the vocabulary, greedy and sampled (issue 20, item 3):
each preset's `[sampler]` counts, the scenario's sampling (`--temperature`, `--sampling-top-k`,
`--sampling-top-p`), the LM head's rows in the plan, and a serving step with prefill chunks costing the
same round terms as a pure SD round."""

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
from moesim.simulator.engines.profile import load_serving_engine
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.hardware.profile import load_profile
from moesim.simulator.plan.mixed import PrefillChunks
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import Scenario
from moesim.simulator.serving.step_cost import ScenarioStepCost, StepShape
from moesim.simulator.speculative.drafters import parse_drafter
from moesim.simulator.speculative.point import (
    engine_point,
    engine_round,
    engine_sampler_s,
    round_extras,
    scenario_timers,
)
from moesim.validation.runs.predict import RunPredictor
from moesim.validation.runs.schema import parse_runs
from tests.core_fixtures import model

COUNTING = ("vllm", "vllm-v0", "sglang", "sglang-spec-v1")  # presets whose source was counted
SAMPLED = ov.Sampling(temperature=0.7)
FILTERED = ov.Sampling(temperature=0.7, top_k=50, top_p=0.9)
QWEN3_VOCAB, GPT_OSS_VOCAB = 151_936, 201_088


@pytest.mark.parametrize("name", COUNTING)
def test_sampling_moves_more_bytes_than_greedy_and_a_filter_more_again(name: str) -> None:
    """Every counted engine: a sampled request's target rows cost more than a greedy one's, a top-k / top-p
    filter more again, and each kind of row (decode, verification, drafter pass) never less sampled."""
    profile = load_serving_engine(name)
    for kind in ("decode", "verify"):
        greedy = ov.sampler_bytes(profile, 64, QWEN3_VOCAB, kind)
        sampled = ov.sampler_bytes(profile, 64, QWEN3_VOCAB, kind, SAMPLED)
        assert greedy < sampled < ov.sampler_bytes(profile, 64, QWEN3_VOCAB, kind, FILTERED)
    assert ov.sampler_bytes(profile, 64, 32_000, "draft") <= ov.sampler_bytes(
        profile, 64, 32_000, "draft", SAMPLED
    )
    assert ov.acceptance_bytes(profile, 64, 3, QWEN3_VOCAB) <= ov.acceptance_bytes(
        profile, 64, 3, QWEN3_VOCAB, SAMPLED
    )


@pytest.mark.parametrize("name", ("ideal", "trtllm"))
def test_nothing_is_added_where_the_engine_counts_nothing(name: str) -> None:
    """The ideal engine adds nothing; TensorRT-LLM's sampler is not counted (its source is not here)."""
    profile = load_serving_engine(name)
    for sampling in (ov.GREEDY, SAMPLED, FILTERED):
        for kind in ("decode", "verify", "draft"):
            assert ov.sampler_bytes(profile, 64, GPT_OSS_VOCAB, kind, sampling) == 0.0  # type: ignore[arg-type]
        assert ov.acceptance_bytes(profile, 64, 3, GPT_OSS_VOCAB, sampling) == 0.0


def test_greedy_costs_nothing_beyond_the_argmax_in_v1_engines() -> None:
    """vLLM 0.33 and SGLang 0.5.23 take one argmax over the logits when every request is greedy (the plan's
    one read); SGLang 0.5.2's drafter takes a softmax and top-k over the draft logits at any temperature."""
    for name in ("vllm", "sglang"):
        profile = load_serving_engine(name)
        for kind in ("decode", "verify", "draft"):
            assert ov.sampler_bytes(profile, 64, QWEN3_VOCAB, kind) == 0.0  # type: ignore[arg-type]
    spec_v1 = load_serving_engine("sglang-spec-v1")
    assert ov.sampler_bytes(spec_v1, 10, 32_000, "draft") == 10 * 32_000 * 8.0
    assert ov.sampler_bytes(spec_v1, 10, 32_000, "decode") == 0.0


@given(
    rows=st.integers(1, 4096),
    vocab=st.integers(1, 300_000),
    name=st.sampled_from(COUNTING),
    kind=st.sampled_from(("decode", "verify", "draft")),
)
def test_sampler_bytes_are_linear_in_rows_times_vocabulary(
    rows: int, vocab: int, name: str, kind: str
) -> None:
    profile = load_serving_engine(name)
    one = ov.sampler_bytes(profile, 1, 1, kind, FILTERED)  # type: ignore[arg-type]
    assert ov.sampler_bytes(profile, rows, vocab, kind, FILTERED) == pytest.approx(rows * vocab * one)  # type: ignore[arg-type]


def test_sampling_is_checked_and_top_k_and_top_p_filter_only_a_sampled_request() -> None:
    assert not ov.Sampling(0.0, top_k=50, top_p=0.5).filtered  # greedy: the argmax, no filter
    assert ov.Sampling(1.0, top_p=0.9).filtered and not ov.Sampling(1.0).filtered
    assert Scenario("qwen3-30b-a3b", temperature=0.7, sampling_top_p=0.9).sampling == ov.Sampling(0.7, 0, 0.9)
    assert Scenario("qwen3-30b-a3b").sampling == ov.GREEDY  # the library's default: greedy
    for bad, field in (
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"sampling_top_k": -1}, "sampling_top_k"),
        ({"sampling_top_p": 0.0}, "sampling_top_p"),
        ({"sampling_top_p": 1.5}, "sampling_top_p"),
    ):
        with pytest.raises(MoesimError) as error:
            Scenario("qwen3-30b-a3b", **bad).resolve(check_fit=False)  # type: ignore[arg-type]
        assert error.value.field == field


@functools.cache
def _timers(temperature: float, hardware: str = "h100-sxm"):  # type: ignore[no-untyped-def]
    device = load_profile(hardware)
    scenario = Scenario(
        model=model("gpt-oss-120b"), hardware=device, routing="independent", temperature=temperature
    )
    return scenario_timers(scenario.resolve(check_fit=False), FastTimer(device))


def _sglang_point(temperature: float, batch: int):  # type: ignore[no-untyped-def]
    profile = load_serving_engine("sglang")
    return engine_point(profile, parse_drafter("eagle"), batch, 3, 2.5, "graph", *_timers(temperature))


def test_a_sampled_sglang_point_pays_its_passes_and_they_grow_with_the_batch() -> None:
    """R8's regime (gpt-oss-120b, 201,088 entries, temperature 0.7, SGLang 0.5.23): the decode step and the
    verification carry the sampled passes in the `sampler` breakdown row, zero at greedy; per step they
    grow with the rows (closed form: rows × vocabulary × bytes ÷ elementwise bandwidth)."""
    greedy, sampled = _sglang_point(0.0, 8), _sglang_point(0.7, 8)
    assert greedy.decode.sampler_s == 0.0 == greedy.verify.sampler_s
    costs = _timers(0.7)[2]
    passes = load_serving_engine("sglang").sampler
    assert sampled.decode.sampler_s == pytest.approx(
        8 * GPT_OSS_VOCAB * passes.sampled_bytes_per_logit / costs.elementwise_bytes_per_s
    )
    verify_bytes = (
        8 * GPT_OSS_VOCAB * (4 * passes.sampled_verify_bytes_per_logit + passes.sampled_round_bytes_per_logit)
    )
    assert sampled.verify.sampler_s == pytest.approx(verify_bytes / costs.elementwise_bytes_per_s)
    assert sampled.verify.breakdown_s()["sampler"] == sampled.verify.sampler_s
    # both the step without SD and the round pay more; SGLang's sampled decode step (48 B per row) costs
    # more per row than its target-only verification (16 B per verified position), so the speedup barely moves
    assert sampled.decode.step_s > greedy.decode.step_s and sampled.round_s > greedy.round_s
    assert sampled.speedup == pytest.approx(greedy.speedup, rel=0.01)
    assert _sglang_point(0.7, 32).decode.sampler_s == pytest.approx(4 * sampled.decode.sampler_s)


def test_simulate_prints_the_sampled_passes_as_a_breakdown_row() -> None:
    args = ["simulate", "--model", "gpt-oss-120b", "--hardware", "h100-sxm", "--batch", "8"]
    args += ["--serving-engine", "sglang", "--routing", "independent"]
    sampled = CliRunner().invoke(cli, [*args, "--temperature", "0.7"])
    assert sampled.exit_code == 0, sampled.output
    assert "engine sampler and acceptance passes" in sampled.output
    assert "requests sampled at temperature 0.7" in sampled.output
    greedy = CliRunner().invoke(cli, args)
    assert greedy.exit_code == 0 and "engine sampler and acceptance passes" not in greedy.output
    bad = CliRunner().invoke(cli, [*args, "--sampling-top-p", "2"])
    assert bad.exit_code != 0 and "sampling_top_p" in bad.output and "Traceback" not in bad.output


def test_sweep_states_the_requests_sampling_beside_its_table() -> None:
    args = [
        "sweep",
        "--model",
        "olmoe-1b-7b",
        "--batch",
        "1,2",
        "--draft-len",
        "1",
        "--serving-engine",
        "sglang",
    ]
    sampled = CliRunner().invoke(cli, [*args, "--temperature", "0.5", "--sampling-top-k", "20"])
    assert sampled.exit_code == 0, sampled.output
    assert "requests sampled at temperature 0.5, top-k 20" in " ".join(sampled.output.split())
    greedy = CliRunner().invoke(cli, args)
    assert greedy.exit_code == 0 and "requests sampled" not in greedy.output


def test_the_lm_head_runs_over_every_verified_row_and_the_drafter_over_its_own_vocabulary() -> None:
    """The LM head and the plan's one read of the logits cover B·(K + 1) rows of a verification; an EAGLE-3
    head's passes run its reduced vocabulary."""
    target = model("qwen3-30b-a3b")
    plan = build_plan(target, 8, 4, 2048)
    head = next(k for k in plan.kernels if k.name == "lm_head")
    sampling = next(k for k in plan.kernels if k.name == "sampling")
    assert head.m_tokens == 8 * 4 and head.flops == pytest.approx(2.0 * 32 * target.vocab * target.hidden)
    assert sum(r.size_bytes for r in sampling.reads) == 32 * target.vocab * 4
    eagle3 = parse_drafter("eagle").pass_target(target, 32_000)
    draft_head = next(
        k for k in build_plan(parse_drafter("eagle").model(eagle3), 8, 1, 2048).kernels if k.name == "lm_head"
    )
    assert draft_head.m_tokens == 8 and draft_head.flops == pytest.approx(2.0 * 8 * 32_000 * target.hidden)


def _v0_cost(temperature: float = 0.0) -> ScenarioStepCost:
    hardware = load_profile("a800")
    scenario = Scenario(
        model=model("qwen2-57b-a14b"),
        hardware=hardware,
        drafter="model:qwen2-0.5b",
        routing="independent",
        serving_engine="vllm-v0",
        acceptance_length=3.0,
        temperature=temperature,
    )
    return ScenarioStepCost(scenario.resolve(check_fit=False))


@pytest.mark.parametrize("temperature", (0.0, 0.7))
def test_a_mixed_sd_step_costs_the_round_terms_of_a_pure_round(temperature: float) -> None:
    """`moesim serve`'s SD step with prefill chunks adds what a pure SD round adds beside its verification:
    V0's bonus rows in every drafter pass, their sampler passes, the round's own ops, the acceptance sync,
    and the verification's sampler and acceptance bytes (plus one sampled row per prompt chunk)."""
    cost = _v0_cost(temperature)
    r, batch, k, context = cost.resolved, 16, 3, 2048
    steps, drafts, costs = cost._timers_at(context)
    sd = engine_round(r.serving_engine, r.drafter, batch, k, 3.0, r.launch, steps, drafts, costs)
    assert sd.draft_rows > batch  # bonus rows: the V0 proposer re-runs the position before each bonus token
    profile, launch = r.serving_engine, sd.verify.launch  # a mixed step's terms, as `mixed_s` asks them
    extras = round_extras(
        profile, r.drafter, batch, k, 3.0, launch, launch, sd.verify.device_s, drafts, costs
    )
    assert extras.seconds == pytest.approx(sd.draft_s + sd.verify.round_ops_s + sd.accept_sync_s, rel=1e-12)
    chunk_rows_s = costs.bytes_s(ov.sampler_bytes(profile, 2, costs.vocab, "decode", costs.sampling))
    acceptance = ov.acceptance_bytes(profile, batch, k, costs.vocab, costs.sampling)
    assert engine_sampler_s(profile, costs, batch * (k + 1), True, acceptance, 2) == pytest.approx(
        sd.verify.sampler_s + chunk_rows_s, rel=1e-12
    )
    assert cost(StepShape(batch, k + 1, context)) == pytest.approx(sd.round_s, rel=1e-12)


def test_a_sampled_run_costs_serve_more_than_a_greedy_one() -> None:
    shape = StepShape(
        16, 4, 2048, PrefillChunks(tokens=512, chunks=2, kv_tokens=512, query_key_pairs=512 * 256.5)
    )
    assert _v0_cost(0.7)(shape) > _v0_cost(0.0)(shape)


RUN_ROW = (
    "run_id,source,model,hardware,gpus,tp,ep,serving_engine,engine_preset,cuda_graphs,drafter,draft_shape,"
    "draft_len,acceptance_length,batch,temperature,metric,ratio_of,speedup\n"
    "t,T,gpt-oss-120b,h100-sxm,1,1,1,sglang,sglang,yes,eagle,chain,3,2.5,8,{t},speedup_per_user,tokens/s,1.3\n"
)


def test_validate_runs_prices_a_row_at_its_temperature() -> None:
    """measured_runs.csv's `temperature` column reaches the row's scenario: R8 ran at 0.7."""
    profile = load_serving_engine("sglang")
    speedups = {}
    for t in ("0", "0.7"):
        (run,) = parse_runs(RUN_ROW.format(t=t), "runs.csv")
        predictor = RunPredictor(run, model, load_profile)
        point = predictor.point(profile, 8)
        speedups[t] = point.speedup
        assert (point.decode.sampler_s > 0.0) == (t == "0.7") == (point.verify.sampler_s > 0.0)
    assert speedups["0.7"] != speedups["0"]
    with pytest.raises(MoesimError, match="temperature"):
        parse_runs(RUN_ROW.format(t="-1"), "runs.csv")


def test_moesim_engines_shows_the_proposer_and_sampler_fields() -> None:
    result = CliRunner().invoke(cli, ["engines", "vllm-v0", "sglang"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for shown in ("draft_tp target", "head_tp one", "pass_preparation host_unless_tp1", "bonus_rows yes"):
        assert shown in text
    assert (
        "sampler greedy" in text and "sampled_verify 16" in text and "sampler source: sglang 0.5.23" in text
    )
    assert "at most 48 running requests" in text
    assert (
        replace(load_serving_engine("vllm"), sampler=load_serving_engine("ideal").sampler).sampler.sources
        == ()
    )
