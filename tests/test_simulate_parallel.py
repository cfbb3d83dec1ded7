"""Multi-GPU layouts end to end: simulate_step / simulate_speculative / run_sweep and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from moesim.commands.simulate import simulate_command, sweep_command
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout, default_layout
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.simulate import simulate_step
from tests.core_fixtures import h200, model, simulate_sd, sweep_grid

EIGHT = default_layout(8)


def with_link(
    hardware: HardwareProfile, bandwidth_scale: float, latency_us: float | None = None
) -> HardwareProfile:
    """The profile with its scale-up link's bandwidth scaled (and latency replaced)."""
    node = hardware.node
    return replace(
        hardware,
        node=replace(
            node,
            scale_up_bandwidth_gbps=node.scale_up_bandwidth_gbps * bandwidth_scale,
            scale_up_latency_us=node.scale_up_latency_us if latency_us is None else latency_us,
        ),
    )


def test_ep_over_one_rank_equals_the_single_gpu_result_end_to_end() -> None:
    spec = model("qwen3-30b-a3b")
    single = simulate_step(spec, h200(), 4, 4)
    for parallel in (ParallelLayout(1, 1, 1), LayoutRequest(gpus=1), LayoutRequest()):
        step = simulate_step(spec, h200(), 4, 4, parallel=parallel)
        assert step.step_s == single.step_s
        assert step.breakdown_s == single.breakdown_s
    sd = simulate_sd(spec, h200(), 4, 3)
    sd_one_rank = simulate_sd(spec, h200(), 4, 3, parallel=ParallelLayout(1, 1, 1))
    assert (sd_one_rank.speedup, sd_one_rank.draft_s) == (sd.speedup, sd.draft_s)
    assert sd_one_rank.parallel["layout"]["gpus"] == 1 and "verify" not in sd_one_rank.parallel


def test_trillion_parameter_model_runs_on_eight_gpus_and_is_refused_on_one() -> None:
    result = simulate_sd("kimi-k2", h200(), 1, 3, parallel=EIGHT)
    assert result.parallel["memory"]["fits"]
    assert result.parallel["verify"]["communication_per_step_s"] > 0
    assert result.verify.breakdown_s["communication"] > 0
    assert result.speedup > 1
    with pytest.raises(MoesimError, match="missing") as error:
        simulate_sd("kimi-k2", h200(), 1, 3, parallel=ParallelLayout())
    assert "--gpus 8" in error.value.fix


def test_the_default_request_picks_the_smallest_layout_that_fits() -> None:
    step = simulate_step("deepseek-v3", h200(), 1, 4, parallel=LayoutRequest())
    assert any("8 GPUs" in note for note in step.notes)
    assert step.step_s == simulate_step("deepseek-v3", h200(), 1, 4, parallel=EIGHT).step_s
    with pytest.raises(MoesimError, match="missing"):  # the library default stays one GPU
        simulate_step("deepseek-v3", h200(), 1, 4)


def test_slowest_rank_expected_maximum_is_never_below_the_mean() -> None:
    for batch, draft_len in ((1, 1), (1, 3), (16, 3)):
        result = simulate_sd("deepseek-v3", h200(), batch, draft_len, parallel=EIGHT)
        for part in ("decode", "verify"):
            summary = result.parallel[part]
            assert summary["max_distinct_experts_per_rank"] >= summary["mean_distinct_experts_per_rank"]
            assert summary["max_expert_tokens_per_rank"] >= summary["mean_expert_tokens_per_rank"]


def test_a_skewed_placement_is_slower_than_a_balanced_one_end_to_end() -> None:
    skew = IndependentRouting(popularity_alpha=1.0)
    packed = simulate_step(
        "deepseek-v3", h200(), 4, 4, routing=skew, parallel=ParallelLayout(8, 8, 8, "contiguous")
    )
    spread = simulate_step(
        "deepseek-v3", h200(), 4, 4, routing=skew, parallel=ParallelLayout(8, 8, 8, "round-robin")
    )
    assert packed.step_s > spread.step_s


def test_collective_time_follows_the_link() -> None:
    """A slower link lengthens the collectives and the step; with no latency, halving the bandwidth doubles
    every collective (they are pure bytes ÷ bandwidth); more tokens mean longer collectives."""
    hw = h200()
    base = simulate_sd("deepseek-v3", with_link(hw, 1.0, 0.0), 8, 3, parallel=EIGHT)
    slow = simulate_sd("deepseek-v3", with_link(hw, 0.5, 0.0), 8, 3, parallel=EIGHT)
    for part in ("decode", "verify"):
        fast_c, slow_c = base.parallel[part]["collective_s"], slow.parallel[part]["collective_s"]
        assert set(fast_c) == set(slow_c)
        for name in fast_c:
            assert slow_c[name] == pytest.approx(2 * fast_c[name], rel=1e-9)
    assert slow.verify.step_s > base.verify.step_s and slow.decode.step_s > base.decode.step_s
    assert (
        base.parallel["verify"]["communication_per_step_s"]
        > base.parallel["decode"]["communication_per_step_s"]
    )


def test_drafter_on_its_own_gpu_saves_memory_but_not_time() -> None:
    """A separate drafter GPU frees the target's memory of the drafter; drafting still precedes verification,
    and the drafter (unsplit, all B sequences, plus the hand-off) is no faster than on the target's GPUs."""
    shared = simulate_sd("kimi-k2", h200(), 4, 3, parallel=EIGHT)
    separate = simulate_sd("kimi-k2", h200(), 4, 3, parallel=replace(EIGHT, draft_on="separate"))
    assert shared.parallel["memory"]["drafter_bytes"] > 0 == separate.parallel["memory"]["drafter_bytes"]
    assert separate.verify.step_s == shared.verify.step_s
    assert separate.draft_s > shared.draft_s
    assert separate.speedup == pytest.approx(
        separate.tokens_per_step * separate.decode.step_s / (separate.draft_s + separate.verify.step_s)
    )
    # Drafters without a device pass cost the same either way.
    frac = [
        simulate_sd("kimi-k2", h200(), 4, 3, drafter="fraction:0.1", parallel=replace(EIGHT, draft_on=on))
        for on in ("shared", "separate")
    ]
    assert frac[0].draft_s == pytest.approx(frac[1].draft_s)


def test_mtp_drafter_runs_expert_parallel_on_the_targets_gpus() -> None:
    result = simulate_sd("deepseek-v3", h200(), 1, 2, drafter="mtp", parallel=EIGHT)
    assert 0 < result.draft_s < result.decode.step_s  # two passes of one layer cost less than 61 layers


def test_sweep_fast_path_matches_the_engine_on_multi_gpu_layouts() -> None:
    sweep = sweep_grid([model("deepseek-v3")], h200(), [1, 16], [3], parallel=LayoutRequest())
    assert {row.gpus for row in sweep.rows} == {8} and not sweep.skipped
    for row in sweep.rows:
        result = simulate_sd("deepseek-v3", h200(), row.batch, 3, parallel=EIGHT)
        assert row.speedup == pytest.approx(result.speedup, rel=0.02)
        assert row.layout == EIGHT.describe()
    single = sweep_grid([model("deepseek-v3")], h200(), [1], [3])
    assert not single.rows and single.skipped


def test_cli_simulate_kimi_on_eight_gpus() -> None:
    args = ["--model", "kimi-k2", "--hardware", "h200", "--batch", "1", "--draft-len", "3", "--json"]
    result = CliRunner().invoke(simulate_command, [*args, "--gpus", "8"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["parallel"]["layout"]["gpus"] == 8 and data["parallel"]["memory"]["fits"]
    assert data["speedup"] > 1
    refused = CliRunner().invoke(simulate_command, [*args, "--gpus", "1"])
    assert refused.exit_code == 2
    assert "Traceback" not in refused.output
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "missing" in lines[0] and "--gpus 8" in lines[0]


def test_cli_states_the_layout_it_chose() -> None:
    result = CliRunner().invoke(
        simulate_command, ["--model", "deepseek-v3", "--batch", "1", "--draft-len", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "8 GPUs" in result.output and "smallest layout" in result.output
    bad = CliRunner().invoke(simulate_command, ["--model", "deepseek-v3", "--gpus", "8", "--tp", "3"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_cli_sweep_rows_carry_their_layout() -> None:
    result = CliRunner().invoke(
        sweep_command, ["--model", "kimi-k2", "--gpus", "8", "--batch", "1,4", "--draft-len", "1,2", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert len(rows) == 4 and all(row["gpus"] == 8 for row in rows)
