"""An SD round's own ops (`engines.overheads.round_ops_s`): the eager ops and syncs an engine's round runs
outside its captured graphs, counted from its source (SGLang 0.5.2's spec-v1 EAGLE round)."""

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


def _v1():  # type: ignore[no-untyped-def]
    return load_serving_engine("sglang-spec-v1")


def _with_ops(profile, ops: int, syncs: int, step_ops: int, kept: float | None = None):  # type: ignore[no-untyped-def]
    drafter = replace(profile.drafter, round_eager_ops=ops, round_syncs=syncs, draft_step_ops=step_ops)
    host = profile.host if kept is None else replace(profile.host, sd_overlap_kept=kept)
    return replace(profile, drafter=drafter, host=host)


def test_an_engine_without_counted_ops_adds_nothing() -> None:
    for name in ("ideal", "vllm", "sglang", "trtllm"):
        assert ov.round_ops_s(load_serving_engine(name), 4, "eager", COSTS, 5e-3) == 0.0


def test_a_synchronous_round_pays_every_launch_and_sync() -> None:
    """spec v1 turns the overlap scheduler off under SD: the host's ops are all exposed (closed form)."""
    profile = _with_ops(_v1(), ops=65, syncs=6, step_ops=0)
    assert profile.effective_host.sd_overlap_kept == 0.0
    assert ov.round_ops_s(profile, 4, "graph", COSTS, 1.0) == pytest.approx(65 * 7e-6 + 6 * 8e-6)


def test_an_eager_drafter_launches_its_candidate_selection_each_step() -> None:
    """Inside a captured draft graph the selection ops cost their device time; an eager drafter pays a host
    launch for each, per step after the first: a tree round drafted eagerly grows with K."""
    profile = _with_ops(_v1(), ops=0, syncs=0, step_ops=11)
    costs = replace(COSTS, graph_gap_s=1.5e-6)
    graph = [ov.round_ops_s(profile, k, "graph", costs) for k in (1, 2, 4)]
    eager = [ov.round_ops_s(profile, k, "eager", costs) for k in (1, 2, 4)]
    assert graph[0] == eager[0] == 0.0  # one step: the first step's selection is in the round's ops
    assert graph[2] == pytest.approx(3 * 11 * (1.8e-6 + 1.5e-6))
    assert eager[2] == pytest.approx(3 * 11 * 7e-6)
    assert eager[1] < eager[2] and graph[1] < graph[2]


@settings(max_examples=60, deadline=None)
@given(
    ops=st.integers(0, 500),
    syncs=st.integers(0, 20),
    kept=st.floats(0.0, 1.0),
    device_ms=st.floats(0.0, 50.0),
)
def test_overlap_hides_only_host_work_and_never_makes_a_round_cheaper_than_its_kernels(
    ops: int, syncs: int, kept: float, device_ms: float
) -> None:
    profile = _with_ops(_v1(), ops=ops, syncs=syncs, step_ops=0, kept=kept)
    synchronous = _with_ops(_v1(), ops=ops, syncs=syncs, step_ops=0, kept=0.0)
    got = ov.round_ops_s(profile, 3, "graph", COSTS, device_ms * 1e-3)
    assert ops * COSTS.kernel_s - 1e-15 <= got <= ov.round_ops_s(synchronous, 3, "graph", COSTS) + 1e-15


def test_the_spec_v1_round_is_a_verify_breakdown_row_and_costs_the_speedup() -> None:
    spec = model("qwen3-30b-a3b")
    scenario = Scenario(model=spec, hardware=h200(), routing="independent", launch="graph")
    timers = scenario_timers(scenario.resolve(check_fit=False), FastTimer(h200()))
    drafter = parse_drafter("eagle")
    counted = _v1()
    uncounted = _with_ops(counted, ops=0, syncs=0, step_ops=0)
    with_ops, without = (engine_point(p, drafter, 1, 3, 2.5, "graph", *timers) for p in (counted, uncounted))
    breakdown = with_ops.verify.breakdown_s()
    assert with_ops.verify.round_ops_s > 0.0
    assert breakdown["sd_round_ops"] == pytest.approx(with_ops.verify.round_ops_s)
    assert sum(breakdown.values()) == pytest.approx(with_ops.verify.step_s)
    assert with_ops.decode.breakdown_s()["sd_round_ops"] == 0.0
    assert with_ops.round_s - without.round_s == pytest.approx(with_ops.verify.round_ops_s)
    assert with_ops.speedup < without.speedup


def test_counts_are_read_bounded_and_round_trip() -> None:
    data = profile_to_dict(_v1())
    assert profile_from_dict(data, "x.toml") == _v1()
    data["drafter"]["round_syncs"] = 10**9
    with pytest.raises(MoesimError, match=r"drafter\.round_syncs"):
        profile_from_dict(data, "x.toml")
    data["drafter"]["round_syncs"] = -1
    with pytest.raises(MoesimError, match=r"drafter\.round_syncs"):
        profile_from_dict(data, "x.toml")
