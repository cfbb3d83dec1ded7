"""Speculative decoding: expected tokens, drafters, the speedup formula, best K and peak batch."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.simulate import simulate_expert_block, simulate_step
from moesim.simulator.speculative.acceptance import (
    best_draft_len,
    expected_tokens,
    peak_batch,
    tokens_per_step,
)
from moesim.simulator.speculative.drafters import parse_drafter
from tests.core_fixtures import h200, model, simulate_sd


@given(st.floats(0, 1), st.integers(1, 16))
def test_tokens_per_step_closed_form(alpha: float, k: int) -> None:
    expected = sum(alpha**i for i in range(k + 1))
    assert float(tokens_per_step(alpha, k)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert 1.0 <= float(tokens_per_step(alpha, k)) <= k + 1 + 1e-9
    assert float(tokens_per_step(alpha, k + 1)) >= float(tokens_per_step(alpha, k)) - 1e-12


def test_acceptance_length_caps_at_k_plus_one() -> None:
    assert expected_tokens(2, acceptance_length=5.0) == 3.0
    assert expected_tokens(8, acceptance_length=3.5) == 3.5
    with pytest.raises(MoesimError):
        expected_tokens(2, acceptance_length=0.5)
    with pytest.raises(MoesimError):
        expected_tokens(2, acceptance=1.5)


def test_speedup_is_the_closed_form_of_its_parts() -> None:
    result = simulate_sd("qwen3-30b-a3b", h200(), 2, 3, drafter="fraction:0.1")
    assert result.draft_s == pytest.approx(3 * 0.1 * result.decode.step_s)
    expected = result.tokens_per_step * result.decode.step_s / (result.draft_s + result.verify.step_s)
    assert result.speedup == pytest.approx(expected)
    data = result.to_json()
    for key in ("draft_s", "tokens_per_step", "verify_over_decode", "speedup", "assumptions"):
        assert key in data
    for part in ("decode", "verify"):
        for key in ("step_s", "distinct_experts_per_layer", "breakdown_s"):
            assert key in data[part]
    assert data["verify"]["distinct_experts_per_layer"] > data["decode"]["distinct_experts_per_layer"]
    assert data["assumptions"]["drafter"] == "fraction:0.1"


@pytest.mark.parametrize("drafter", ["eagle", "ngram", "model:qwen3-0.6b"])
def test_drafters_cost_what_they_run(drafter: str) -> None:
    result = simulate_sd("qwen3-30b-a3b", h200(), 1, 2, drafter=drafter)
    assert 0 < result.draft_s < 2 * 2 * result.decode.step_s
    if drafter == "ngram":
        assert result.draft_s < 1e-4


def test_drafters_first_pass_runs_over_the_verified_positions() -> None:
    """vLLM's proposer and SGLang's draft extend run a round's first drafter pass over every position just
    verified (K + 1 per sequence, a tree's draft tokens), then K - 1 one-token passes (per candidate for a
    tree): at batch that first pass is the dearer one, and the ideal engine's K one-token passes the floor."""
    from moesim.simulator.engines.profile import DrafterStyle
    from moesim.simulator.execution.timer import FastTimer
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.speculative.drafters import draft_pass_s
    from moesim.simulator.speculative.point import scenario_timers

    hw, k, batch = h200(), 3, 32
    timer = FastTimer(hw)
    scenario = Scenario("qwen3-30b-a3b", hw, batch, k, routing=IndependentRouting(), layout=ParallelLayout())
    _, drafts, _ = scenario_timers(scenario.resolve(), timer)
    target, eagle = model("qwen3-30b-a3b"), parse_drafter("eagle")

    def one_pass(rows: int, q: int) -> float:
        return draft_pass_s(
            eagle,
            target,
            ParallelLayout(),
            rows,
            2048,
            "fused",
            IndependentRouting(),
            timer,
            "graph",
            tokens_per_seq=q,
        )

    chain_one, chain_verified = DrafterStyle(), DrafterStyle(first_pass="verified")
    floor, verified = drafts(chain_one, batch, k, "graph"), drafts(chain_verified, batch, k, "graph")
    assert one_pass(batch, k + 1) > one_pass(batch, 1)
    assert floor.first_pass_s == pytest.approx(one_pass(batch, 1))
    assert verified.first_pass_s == pytest.approx(one_pass(batch, k + 1))
    assert verified.total_s - floor.total_s == pytest.approx(one_pass(batch, k + 1) - one_pass(batch, 1))
    tree = DrafterStyle(shape="tree", tree_draft_tokens=8, tree_topk=2, first_pass="verified")
    cost = drafts(tree, batch, k, "graph")
    assert cost.first_pass_s == pytest.approx(one_pass(batch, 8))
    assert cost.total_s - cost.first_pass_s > (k - 1) * one_pass(2 * batch, 1) * 0.999
    # SGLang 0.5.2's draft extend: the accepted tokens padded to K + 1 positions, for a tree as for a chain
    accepted = replace(tree, first_pass="accepted")
    assert drafts(accepted, batch, k, "graph").first_pass_s == pytest.approx(one_pass(batch, k + 1))
    chain_accepted = DrafterStyle(first_pass="accepted")
    assert drafts(chain_accepted, batch, k, "graph") == verified


def test_mtp_needs_an_mtp_layer() -> None:
    with pytest.raises(MoesimError, match="MTP"):
        simulate_sd("qwen3-30b-a3b", h200(), 1, 2, drafter="mtp")


@pytest.mark.parametrize("text", ["", "magic", "fraction:x", "fraction:-1", "model:"])
def test_bad_drafters_are_refused(text: str) -> None:
    with pytest.raises(MoesimError):
        parse_drafter(text)


def test_best_k_and_peak_batch() -> None:
    @dataclass(frozen=True)
    class Row:
        batch: int
        draft_len: int
        speedup: float

    rows = [Row(1, 1, 1.2), Row(1, 2, 1.5), Row(1, 3, 1.4), Row(8, 1, 1.1), Row(8, 2, 1.1), Row(8, 3, 0.9)]
    best = best_draft_len(rows, key=lambda row: row.batch)
    assert {b: (r.draft_len, r.speedup) for b, r in best.items()} == {
        1: (2, 1.5),
        8: (1, 1.1),
    }  # first on ties
    assert peak_batch([1, 2, 4], [1.1, 1.3, 1.3]) == (2, 1.3)


def test_model_that_does_not_fit_is_refused_with_the_missing_memory() -> None:
    with pytest.raises(MoesimError, match="missing"):
        simulate_step("deepseek-v3", h200(), 1, 1)


def test_expert_block_grows_with_distinct_experts() -> None:
    times = [simulate_expert_block("qwen3-30b-a3b", h200(), 16, u) for u in (8, 32, 64, 128)]
    assert np.all(np.diff(times) > 0)
    with pytest.raises(MoesimError):
        simulate_expert_block("qwen3-30b-a3b", h200(), 1, 9)


def test_a_piecewise_drafter_pays_an_eager_attention_launch_per_layer() -> None:
    """vLLM 0.33's proposer runs piecewise CUDA graphs only: each drafter layer's attention is launched
    eagerly between graph pieces. The host issues pieces while the device runs earlier ones, so a pass
    takes the longer of its device time and that issue time: a many-layer draft model on a host slow to
    launch turns issue-bound, where a graph would not."""
    from dataclasses import replace

    from moesim.simulator.engines import overheads as ov
    from moesim.simulator.engines.profile import DrafterStyle
    from moesim.simulator.execution.timer import FastTimer
    from moesim.simulator.routing.independent import IndependentRouting
    from moesim.simulator.scenario import Scenario
    from moesim.simulator.speculative.point import scenario_timers

    k, batch = 3, 4
    fast = h200()
    slow = replace(fast, empirical=replace(fast.empirical, graph_launch_us=200.0, launch_eager_us=200.0))
    layers = model("qwen3-0.6b").n_layers
    for hw in (fast, slow):
        scenario = Scenario(
            "qwen3-30b-a3b", hw, batch, k, drafter="model:qwen3-0.6b", routing=IndependentRouting(),
            layout=ParallelLayout(),
        )  # fmt: skip
        _, drafts, _ = scenario_timers(scenario.resolve(), FastTimer(hw))
        graph, piecewise = (
            drafts(DrafterStyle(), batch, k, "graph"),
            drafts(DrafterStyle(), batch, k, "piecewise"),
        )
        em = hw.empirical
        issue_s = (layers + 1) * em.graph_launch_us * 1e-6 + layers * em.launch_eager_us * 1e-6
        expected = ov.piecewise_step_s(
            graph.first_pass_s, layers, em.graph_launch_us * 1e-6, em.launch_eager_us * 1e-6
        )
        assert (
            piecewise.first_pass_s
            == pytest.approx(expected)
            == pytest.approx(max(graph.first_pass_s, issue_s))
        )
        assert piecewise.total_s >= graph.total_s
    assert piecewise.first_pass_s > graph.first_pass_s  # on the slow host: issue-bound


def test_a_drafters_model_is_remembered_per_target_object() -> None:
    """The EAGLE head and the MTP module are derived once per target object (a serving run asks on every
    step shape), and equal what a fresh derivation gives; another target object is derived afresh."""
    from moesim.simulator.models.catalogue import load_model
    from moesim.simulator.speculative.drafters import eagle_head, mtp_module

    for derive, name in ((eagle_head, "qwen3-30b-a3b"), (mtp_module, "deepseek-v3")):
        target = load_model(name)
        copy = replace(target)
        assert derive(target) is derive(target)
        assert derive(copy) is not derive(target)
        assert derive(copy) == derive(target)
