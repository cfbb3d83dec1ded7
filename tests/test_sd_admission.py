"""The engine's cap on running requests under SD (`engines.profile.SpeculativeAdmission`): SGLang resets
max_running_requests to 48 for EAGLE / NEXTN when the server is not given one (0.5.23
`srt/arg_groups/speculative_hook.py`), so at batch B above the cap an SD run serves 48 sequences while the
run without SD serves B."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.engines.profile import (
    SpeculativeAdmission,
    load_serving_engine,
    profile_from_dict,
    profile_to_dict,
)
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.drafters import parse_drafter
from moesim.simulator.speculative.point import engine_point, scenario_timers
from moesim.validation.runs.predict import profile_for_run
from moesim.validation.runs.schema import MeasuredRun
from tests.core_fixtures import h200, model


def _timers():  # type: ignore[no-untyped-def]
    scenario = Scenario(model=model("qwen3-30b-a3b"), hardware=h200(), routing="independent", launch="graph")
    return scenario_timers(scenario.resolve(check_fit=False), FastTimer(h200()))


def _capped(cap: int):  # type: ignore[no-untyped-def]
    return replace(load_serving_engine("sglang"), scheduler=SpeculativeAdmission(cap))


def test_both_sglang_presets_cap_sd_at_48_and_no_other_preset_caps() -> None:
    for name in ("sglang", "sglang-spec-v1"):
        assert load_serving_engine(name).scheduler.sd_max_running_requests == 48
    for name in ("ideal", "vllm", "vllm-v0", "trtllm"):
        assert load_serving_engine(name).scheduler == SpeculativeAdmission()


@given(batch=st.integers(1, 10_000), cap=st.integers(0, 10_000))
def test_an_sd_round_runs_the_batch_or_the_cap_below_it(batch: int, cap: int) -> None:
    got = SpeculativeAdmission(cap).sd_sequences(batch)
    assert got == (batch if cap == 0 else min(batch, cap))


def test_below_the_cap_nothing_moves_and_above_it_the_sd_side_serves_cap_over_batch() -> None:
    timers = _timers()
    drafter = parse_drafter("eagle")
    uncapped, capped = _capped(0), _capped(48)
    for batch in (1, 16, 48):
        a, b = (engine_point(p, drafter, batch, 3, 2.5, "graph", *timers) for p in (uncapped, capped))
        assert a.speedup == b.speedup and a.sd_sequences == b.sd_sequences == batch
    point = engine_point(capped, drafter, 64, 3, 2.5, "graph", *timers)
    at_cap = engine_point(uncapped, drafter, 48, 3, 2.5, "graph", *timers)
    assert point.sd_sequences == 48 and point.batch == 64
    assert point.round_s == at_cap.round_s  # the round is the round of 48 sequences
    # SD tokens/s (48 × tokens ÷ round) over no-SD tokens/s (64 ÷ decode at 64)
    assert point.speedup == pytest.approx(2.5 * point.decode.step_s / at_cap.round_s * 48 / 64, rel=1e-12)
    assert point.step_ratio == pytest.approx(point.tokens_per_step / point.speedup, rel=1e-12)
    assert point.speedup < engine_point(uncapped, drafter, 64, 3, 2.5, "graph", *timers).speedup


def test_the_cap_round_trips_through_toml_and_a_bad_value_names_the_field() -> None:
    profile = _capped(32)
    assert profile_from_dict(profile_to_dict(profile), "t").scheduler.sd_max_running_requests == 32
    data = profile_to_dict(profile)
    data["scheduler"] = {"sd_max_running_requests": -1}
    with pytest.raises(MoesimError, match=r"scheduler\.sd_max_running_requests"):
        profile_from_dict(data, "t")
    data["scheduler"] = {"sd_max_running_request": 4}
    with pytest.raises(MoesimError, match="sd_max_running_request"):
        profile_from_dict(data, "t")


@settings(max_examples=20, deadline=None)
@given(cap=st.integers(1, 512))
def test_a_run_that_sets_its_own_limit_overrides_the_preset(cap: int) -> None:
    run = MeasuredRun(
        {
            "engine_preset": "sglang",
            "serving_engine": "sglang",
            "draft_shape": "chain",
            "drafter_launch": None,
            "max_running_requests": cap,
        }
    )
    assert profile_for_run(run, "per-run").scheduler.sd_max_running_requests == cap
    default = MeasuredRun({**run.values, "max_running_requests": None})
    assert profile_for_run(default, "per-run").scheduler.sd_max_running_requests == 48


def test_simulate_says_when_the_cap_binds_and_serve_admits_at_most_the_cap() -> None:
    from click.testing import CliRunner

    from moesim.cli import cli
    from moesim.simulator.serving.options import ServeOptions
    from moesim.simulator.serving.run import sd_serve_options

    args = ["simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--draft-len", "3"]
    result = CliRunner().invoke(cli, [*args, "--batch", "64", "--serving-engine", "sglang"])
    assert result.exit_code == 0, result.output
    assert "at most 48 running requests, so the SD round runs 48 of the 64 sequences" in result.output
    assert "× 48 / 64)" in result.output
    below = CliRunner().invoke(cli, [*args, "--batch", "32", "--serving-engine", "sglang"])
    assert below.exit_code == 0 and "running requests" not in below.output
    resolved = Scenario(model=model("qwen3-30b-a3b"), hardware=h200(), serving_engine="sglang").resolve(
        check_fit=False
    )
    options = ServeOptions()
    assert sd_serve_options(resolved, options).limits.max_num_seqs == 48
    assert options.limits.max_num_seqs == 1024  # the run without SD keeps the engine's limit
    ideal = Scenario(model=model("qwen3-30b-a3b"), hardware=h200()).resolve(check_fit=False)
    assert sd_serve_options(ideal, options) is options
