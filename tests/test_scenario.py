"""One scenario, one answer: the Python API and the CLI agree, placements in both spellings, the parallel
builder checked against the single-GPU one, every built-in kernel style usable from Python."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import moesim
from moesim.cli import cli
from moesim.errors import MoesimError
from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
from moesim.simulator.plan.parallel import build_parallel_plan, rank_model
from moesim.simulator.plan.styles import KERNEL_STYLES, build_plan
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.scenario import DEFAULT_CONTEXT_LEN, DEFAULT_DRAFT_LEN, Scenario
from tests.core_fixtures import h200, model


def cli_json(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_python_api_and_the_cli_give_the_same_speedup() -> None:
    api = moesim.simulate(model="qwen3-30b-a3b", hardware="h200", batch=1, draft_len=3)
    shell = cli_json(
        "simulate", "--model", "qwen3-30b-a3b", "--hardware", "h200", "--batch", "1", "--draft-len", "3"
    )
    assert api.speedup == shell["speedup"]
    assert api.to_json()["assumptions"] == shell["assumptions"]
    assert "typical routing" in shell["assumptions"]["routing"]


def test_the_python_sweep_and_the_cli_sweep_give_the_same_rows() -> None:
    api = moesim.sweep("olmoe-1b-7b,qwen3-30b-a3b", hardware="h200", batches=[1, 8], draft_lens=[1, 3])
    shell = cli_json("sweep", "--model", "olmoe-1b-7b,qwen3-30b-a3b", "--batch", "1,8", "--draft-len", "1,3")
    assert api.to_json()["rows"] == shell["rows"]
    assert api.speedup[("qwen3-30b-a3b", 8, 3)] == shell["rows"][-1]["speedup"]


def test_a_scenario_owns_the_defaults_the_cli_shows() -> None:
    scenario = Scenario("qwen3-30b-a3b")
    assert (scenario.draft_len, scenario.context_len) == (DEFAULT_DRAFT_LEN, DEFAULT_CONTEXT_LEN)
    help_text = CliRunner().invoke(cli, ["simulate", "--help"]).output
    assert f"[default: {DEFAULT_CONTEXT_LEN}]" in help_text
    assert scenario.replace(batch=4).batch == 4 and scenario.batch == 1


@pytest.mark.parametrize("spelling", ["round-robin", "round_robin"])
def test_both_placement_spellings_work_everywhere(spelling: str) -> None:
    flags = ("--model", "deepseek-v3", "--gpus", "8", "--placement", spelling)
    simulated = cli_json("simulate", *flags)
    assert simulated["parallel"]["layout"]["placement"] == "round-robin"
    swept = cli_json("sweep", *flags, "--batch", "1", "--draft-len", "1")
    assert "round-robin" in swept["rows"][0]["layout"]
    result = CliRunner().invoke(
        cli, ["routing", "predict", "--experts", "64", "--top-k", "4", "--batch", "2", "--tokens", "2",
              "--ranks", "4", "--placement", spelling, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["per_layer"][0]["per_rank"]["placement"] == "round-robin"
    assert ParallelLayout(8, 8, 8, spelling).placement == LayoutRequest(placement=spelling).placement  # type: ignore[arg-type]


def _routed_expert_work(kernels: tuple) -> list[tuple[float, float, float]]:  # type: ignore[type-arg]
    """(FLOPs, weight bytes, rows per expert) of each routed-expert kernel."""
    return [
        (k.flops, sum(r.size_bytes for r in k.reads if "experts.w" in r.tensor), k.m_tokens)
        for k in kernels
        if k.category == "routed_experts"
    ]


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b"])
def test_a_rank_doing_every_expert_matches_the_single_gpu_builder(name: str) -> None:
    """ep = 1 on 2 GPUs: each rank computes the whole expert set at half width, which is the single-GPU plan
    of the rank's slice of the model. The parallel builder takes its own path (collectives, per-rank work)."""
    spec, routing = model(name), IndependentRouting()
    layout = ParallelLayout(2, 2, 1)
    for batch, tokens in ((1, 1), (8, 4), (64, 8)):
        parallel = build_parallel_plan(spec, batch, tokens, layout, h200(), 2048, routing=routing)
        assert any(k.category == "communication" for k in parallel.plan.kernels)  # not the one-GPU short cut
        single = build_plan(rank_model(spec, layout), batch, tokens, 2048, "fused", routing, h200())
        got, want = _routed_expert_work(parallel.plan.kernels), _routed_expert_work(single.kernels)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, rel=1e-9)


def test_every_built_in_kernel_style_is_registered_without_importing_it_first() -> None:
    assert {"fused", "per-token", "torch-reference"} <= set(KERNEL_STYLES)
    code = (
        "from moesim.simulator.simulate import simulate_step\n"
        "print(simulate_step('qwen3-0.6b', 'h200', 1, 1, kernel_style='torch-reference').step_s > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_plain_step_resolves_through_the_scenario_with_no_drafter() -> None:
    """`simulate_step` is `Scenario.resolve(step_tokens=...)`: no drafter bytes in the memory check, the
    device's launch (eager on a CPU), one device for a CPU."""
    from moesim.simulator.simulate import simulate_step

    scenario = Scenario("qwen3-30b-a3b", "h200", 8, drafter="model:qwen3-0.6b")
    plain = scenario.resolve(step_tokens=1)
    assert plain.memory is not None and plain.memory.drafter_bytes == 0
    assert scenario.resolve().memory.drafter_bytes > 0  # type: ignore[union-attr]
    cpu = Scenario("qwen3-0.6b", "docs/validation/cpu/cpu.toml", 1).resolve(step_tokens=1)
    assert (cpu.launch, cpu.layout.gpus, cpu.layout.device) == ("eager", 1, "CPU")
    assert simulate_step("qwen3-0.6b", "docs/validation/cpu/cpu.toml", 1, 1).step_s > 0
    with pytest.raises(MoesimError, match="CPU has no graph replay"):
        simulate_step("qwen3-0.6b", "docs/validation/cpu/cpu.toml", 1, 1, launch="graph")


def test_a_sweep_skips_only_what_does_not_fit_and_stops_on_bad_input() -> None:
    from moesim.errors import DoesNotFit
    from moesim.simulator.speculative.sweep import run_sweep

    with pytest.raises(DoesNotFit):
        Scenario("deepseek-v3", "h200", 1, layout=ParallelLayout()).resolve()
    deepseek = model("deepseek-v3")
    sweep = run_sweep(Scenario(deepseek, "h200", layout=ParallelLayout()), [deepseek], [1], [1])
    assert not sweep.rows and sweep.skipped and "missing" in sweep.skipped[0]["reason"]
    # a round yielding more tokens than it verifies is the input's fault, not a point to skip
    small = model("qwen3-30b-a3b")
    with pytest.raises(MoesimError, match="acceptance_length"):
        run_sweep(Scenario(small, "h200", acceptance_length=5.0), [small], [1, 8], [1, 2])
