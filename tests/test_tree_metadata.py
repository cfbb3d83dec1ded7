"""A tree's attention-backend metadata (`engines.overheads.attention_metadata_s`): the ops, syncs and plan()
calls SGLang 0.5.2's FlashInfer backend runs outside its graphs each round for a tree (top-k > 1) on a
model without MLA, counted from sglang 0.5.2 and flashinfer-python 0.3.1."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.profile import load_serving_engine, profile_from_dict, profile_to_dict
from moesim.simulator.execution.timer import FastTimer
from moesim.simulator.scenario import Scenario
from moesim.simulator.speculative.drafters import parse_drafter
from moesim.simulator.speculative.point import engine_point, scenario_timers
from tests.core_fixtures import h200, model

COSTS = ov.LaunchCosts(layers=48, graph_launch_s=10e-6, eager_launch_s=7e-6, sync_s=8e-6, kernel_s=1.8e-6)


def _tree(profile, topk: int = 4, tokens: int = 16):  # type: ignore[no-untyped-def]
    drafter = replace(profile.drafter, shape="tree", tree_topk=topk, tree_draft_tokens=tokens)
    return replace(profile, drafter=drafter)


def _v1():  # type: ignore[no-untyped-def]
    return load_serving_engine("sglang-spec-v1")


def test_the_spec_v1_counts_are_the_ones_read_from_flashinfer_and_sglang() -> None:
    """42 ops and 8 syncs per round, 2 plans + 1 per drafter step after the first (the preset's provenance
    lists each op)."""
    style = _v1().drafter
    assert (style.tree_metadata_ops, style.tree_metadata_syncs) == (42, 8)
    assert (style.tree_metadata_plans, style.tree_step_plans) == (2, 1)
    assert ov.metadata_counts(_tree(_v1()).drafter, 4) == (42, 8, 5)


def test_only_a_tree_of_top_k_above_one_on_a_model_without_mla_pays_it() -> None:
    """0.5.2 runs FA3 for a chain, a top-1 tree and every MLA model on Hopper: FlashInfer's counts do not
    apply there."""
    profile = _v1()
    assert ov.metadata_counts(profile.drafter, 4) == (0, 0, 0)  # the preset's chain
    assert ov.metadata_counts(_tree(profile, topk=1).drafter, 4) == (0, 0, 0)
    assert ov.metadata_counts(_tree(profile).drafter, 4, mla=True) == (0, 0, 0)
    assert ov.attention_metadata_s(profile, 4, COSTS) == 0.0
    assert ov.attention_metadata_s(_tree(profile), 4, replace(COSTS, mla=True)) == 0.0


def test_engines_that_count_nothing_add_nothing_to_a_tree() -> None:
    for name in ("ideal", "vllm", "vllm-v0", "sglang", "trtllm"):
        assert ov.attention_metadata_s(_tree(load_serving_engine(name)), 4, COSTS, 5e-3) == 0.0


def test_a_synchronous_tree_round_pays_every_launch_sync_and_plan() -> None:
    """Closed form with the overlap off (spec v1): (ops + plans) launches, the syncs, the plans' host work."""
    profile = _tree(_v1())
    plan_s = profile.effective_host.attention_plan_us * 1e-6
    plans = 2 + 3
    expected = (42 + plans) * 7e-6 + 8 * 8e-6 + plans * plan_s
    assert ov.attention_metadata_s(profile, 4, COSTS, 1.0) == pytest.approx(expected)
    one_step = ov.attention_metadata_s(profile, 1, COSTS)
    assert one_step == pytest.approx(expected - 3 * (7e-6 + plan_s))  # no drafter step after the first


@settings(max_examples=40, deadline=None)
@given(kept=st.floats(0.0, 1.0), device_ms=st.floats(0.0, 50.0), k=st.integers(1, 8))
def test_an_overlap_hides_only_host_work(kept: float, device_ms: float, k: int) -> None:
    tree = _tree(_v1())
    overlapped = replace(tree, host=replace(tree.host, sd_overlap_kept=kept))
    launched = 42 + 2 + (k - 1)
    got = ov.attention_metadata_s(overlapped, k, COSTS, device_ms * 1e-3)
    assert launched * COSTS.kernel_s - 1e-15 <= got <= ov.attention_metadata_s(tree, k, COSTS) + 1e-15


def test_it_weighs_most_at_batch_one_and_is_a_verify_breakdown_row() -> None:
    """A fixed cost per round: the share of the round it takes falls as the batch grows; it is its own row
    of the verification's breakdown and costs the speedup what it adds to the round."""
    spec = model("qwen3-30b-a3b")
    drafter = parse_drafter("eagle")
    tree = _tree(_v1())
    zero = {"tree_metadata_ops": 0, "tree_metadata_syncs": 0, "tree_metadata_plans": 0, "tree_step_plans": 0}
    uncounted = replace(tree, drafter=replace(tree.drafter, **zero))
    shares = []
    for batch in (1, 32):
        scenario = Scenario(
            model=spec,
            hardware=h200(),
            routing="independent",
            launch="graph",
            batch=batch,
            serving_engine=tree,
        )
        timers = scenario_timers(scenario.resolve(check_fit=False), FastTimer(h200()))
        point, bare = (engine_point(p, drafter, batch, 4, 2.5, "graph", *timers) for p in (tree, uncounted))
        breakdown = point.verify.breakdown_s()
        assert point.verify.metadata_s > 0.0
        assert breakdown["attention_metadata"] == pytest.approx(point.verify.metadata_s)
        assert sum(breakdown.values()) == pytest.approx(point.verify.step_s)
        assert point.decode.breakdown_s()["attention_metadata"] == 0.0
        assert point.round_s - bare.round_s == pytest.approx(point.verify.metadata_s)
        assert point.speedup < bare.speedup
        shares.append(point.verify.metadata_s / point.round_s)
    assert shares[0] > shares[1]


def test_counts_and_plan_cost_are_read_bounded_and_round_trip() -> None:
    data = profile_to_dict(_v1())
    assert profile_from_dict(data, "x.toml") == _v1()
    for key in ("tree_metadata_syncs", "tree_step_plans"):
        bad = profile_to_dict(_v1())
        bad["drafter"][key] = -1
        with pytest.raises(MoesimError, match=rf"drafter\.{key}"):
            profile_from_dict(bad, "x.toml")
    data["host"]["attention_plan_us"] = 1e9
    with pytest.raises(MoesimError, match=r"host\.attention_plan_us"):
        profile_from_dict(data, "x.toml")


def test_the_prefill_plans_walk_two_host_elements_per_sequence() -> None:
    """flashinfer 0.3.1's prefill plan takes Python's max() over B + 1 query offsets and B KV lengths: the
    verification's and the draft extend's plans walk 2B + 1 elements each, at plan_scan_us apiece; a round
    over 48 sequences (SGLang's SD cap) pays 2 × 97 × 3 µs where batch 1 pays 2 × 3 × 3 µs."""
    tree = _tree(_v1())
    assert tree.effective_host.plan_scan_us == 3.0
    assert ov.plan_scan_elements(tree.drafter, 48) == 2 * 97
    assert ov.plan_scan_elements(tree.drafter, 0) == 0
    bare = ov.attention_metadata_s(tree, 4, COSTS, 1.0)
    for sequences, elements in ((1, 6), (48, 194)):
        added = ov.attention_metadata_s(tree, 4, COSTS, 1.0, sequences) - bare
        assert added == pytest.approx(elements * 3e-6)
    with pytest.raises(MoesimError, match="sequences"):
        ov.plan_scan_elements(tree.drafter, -1)


def test_no_plan_no_scan() -> None:
    """A chain, a top-1 tree and an MLA model run no FlashInfer plan in 0.5.2, so the batch adds nothing."""
    profile = _v1()
    for p, costs in (
        (profile, COSTS),
        (_tree(profile, topk=1), COSTS),
        (_tree(profile), replace(COSTS, mla=True)),
    ):
        assert ov.attention_metadata_s(p, 4, costs, 1.0, 48) == 0.0


def test_the_round_scans_the_padded_batch_the_graphs_replay() -> None:
    """The graph runners plan at the captured size: 9 sequences replay the graph of 10 (0.5.2's grid), so
    the round's metadata grows by 2 × (2·10 + 1) scanned elements."""
    spec = model("qwen3-30b-a3b")
    drafter = parse_drafter("eagle")
    tree = _tree(_v1())
    unscanned = replace(tree, host=replace(tree.host, plan_scan_us=0.0))
    scenario = Scenario(
        model=spec, hardware=h200(), routing="independent", launch="graph", batch=9, serving_engine=tree
    )
    timers = scenario_timers(scenario.resolve(check_fit=False), FastTimer(h200()))
    point, bare = (engine_point(p, drafter, 9, 4, 2.5, "graph", *timers) for p in (tree, unscanned))
    assert point.verify.rows_run == 10
    assert point.verify.metadata_s - bare.verify.metadata_s == pytest.approx(2 * 21 * 3e-6)
    assert point.round_s - bare.round_s == pytest.approx(2 * 21 * 3e-6)
    assert point.speedup < bare.speedup


def test_plan_scan_cost_is_bounded() -> None:
    data = profile_to_dict(_v1())
    data["host"]["plan_scan_us"] = 1e4
    with pytest.raises(MoesimError, match=r"host\.plan_scan_us"):
        profile_from_dict(data, "x.toml")
