"""The speculative point under a serving engine: `ideal` is the step model exactly; presets only add."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.simulator.engines.profile import (
    CudaGraphs,
    DrafterStyle,
    ServingEngineProfile,
    load_serving_engine,
)
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.routing.independent import IndependentRouting
from moesim.simulator.speculative.drafters import expected_tokens, parse_drafter
from moesim.simulator.speculative.serving_point import engine_point, engine_step, fast_path_timers
from moesim.simulator.speculative.sweep import run_sweep
from tests.core_fixtures import h200, model, tiny_moe


def _timers(spec, drafter="eagle", layout=None):  # type: ignore[no-untyped-def]
    layout = layout or ParallelLayout()
    return fast_path_timers(spec, h200(), layout, parse_drafter(drafter), 2048, "fused", IndependentRouting())


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b"])
@pytest.mark.parametrize("drafter", ["eagle", "ngram", "fraction:0.1"])
@pytest.mark.parametrize("launch", ["graph", "eager"])
def test_ideal_reproduces_the_sweep_exactly(name: str, drafter: str, launch: str) -> None:
    spec, ideal = model(name), load_serving_engine("ideal")
    sweep = run_sweep([spec], h200(), [1, 3, 16, 64], [1, 3], drafter=drafter, launch=launch)
    step_timer, draft_timer, piecewise = _timers(spec, drafter)
    for row in sweep.rows:
        point = engine_point(
            ideal,
            parse_drafter(drafter),
            row.batch,
            row.draft_len,
            expected_tokens(row.draft_len),
            launch,
            step_timer,
            draft_timer,
            piecewise,
        )
        assert point.speedup == row.speedup
        assert (point.decode.step_s, point.verify.step_s, point.draft_s) == (
            row.decode_step_s,
            row.verify_step_s,
            row.draft_s,
        )


def test_ideal_reproduces_a_multi_gpu_sweep_exactly() -> None:
    spec, layout = model("qwen3-30b-a3b"), ParallelLayout(gpus=2, tp=2, ep=2)
    sweep = run_sweep([spec], h200(), [1, 8], [2], parallel=layout)
    step_timer, draft_timer, piecewise = _timers(spec, layout=layout)
    for row in sweep.rows:
        point = engine_point(
            load_serving_engine("ideal"),
            parse_drafter("eagle"),
            row.batch,
            2,
            expected_tokens(2),
            "graph",
            step_timer,
            draft_timer,
            piecewise,
        )
        assert point.speedup == row.speedup


def _profile(**changes: object) -> ServingEngineProfile:
    return replace(load_serving_engine("ideal"), **changes)  # type: ignore[arg-type]


GRID = CudaGraphs(sizes=(1, 2, 4, 8), padding="next_captured", uncaptured="eager")


def test_above_the_largest_captured_size_eager_costs_apply_and_the_step_jumps() -> None:
    spec = tiny_moe()
    step_timer, _, piecewise = _timers(spec)
    profile = _profile(graphs=GRID)
    at_largest = engine_step(profile, 8, 1, "graph", step_timer, piecewise)
    above = engine_step(profile, 9, 1, "graph", step_timer, piecewise)
    assert (at_largest.launch, above.launch) == ("graph", "eager")
    assert above.device_s == step_timer(9, 1, "eager")
    one_more_sequence_s = step_timer(9, 1, "graph") - step_timer(8, 1, "graph")
    assert above.step_s - at_largest.step_s > 10 * one_more_sequence_s  # a jump, not one more sequence


def test_piecewise_above_the_largest_is_between_graph_and_eager() -> None:
    spec = tiny_moe()
    step_timer, _, piecewise = _timers(spec)
    step = engine_step(
        _profile(graphs=replace(GRID, uncaptured="piecewise")), 9, 1, "graph", step_timer, piecewise
    )
    assert step.launch == "piecewise"
    assert step_timer(9, 1, "graph") <= step.device_s <= step_timer(9, 1, "eager")


def test_a_batch_pads_up_to_the_next_captured_size_and_pays_for_it() -> None:
    spec = model("qwen3-30b-a3b")
    step_timer, _, piecewise = _timers(spec)
    step = engine_step(_profile(graphs=GRID), 5, 1, "graph", step_timer, piecewise)
    assert step.sequences == 8 and step.device_s == step_timer(8, 1, "graph")
    assert step.padding_s == pytest.approx(step_timer(8, 1, "graph") - step_timer(5, 1, "graph"))
    assert step.padding_s > 0.0


def test_a_tree_verifies_its_draft_token_count() -> None:
    spec = model("qwen3-30b-a3b")
    step_timer, draft_timer, piecewise = _timers(spec)
    tree = _profile(drafter=DrafterStyle(shape="tree", tree_draft_tokens=16, tree_topk=4))
    point = engine_point(tree, parse_drafter("eagle"), 2, 4, 2.5, "graph", step_timer, draft_timer, piecewise)
    assert point.verify.tokens_per_seq == 16
    assert point.verify.device_s == step_timer(2, 16, "graph")
    assert point.draft_s == draft_timer(8, 4, "graph")  # 2 sequences × top-4 candidates per pass


@settings(max_examples=25, deadline=None)
@given(
    step_us=st.floats(0, 2000),
    per_sequence_us=st.floats(0, 50),
    per_token_us=st.floats(0, 10),
    overlap=st.floats(0, 1),
    draft_step_us=st.floats(0, 500),
    accept_sync_us=st.floats(0, 500),
    batch=st.sampled_from([1, 5, 24]),
)
def test_engine_host_cost_never_makes_a_step_or_a_round_faster(
    step_us: float,
    per_sequence_us: float,
    per_token_us: float,
    overlap: float,
    draft_step_us: float,
    accept_sync_us: float,
    batch: int,
) -> None:
    spec = tiny_moe()
    timers = _timers(spec)
    ideal = load_serving_engine("ideal")
    host = replace(
        ideal.host,
        step_us=step_us,
        per_sequence_us=per_sequence_us,
        per_token_us=per_token_us,
        overlap_fraction=overlap,
        draft_step_us=draft_step_us,
        accept_sync_us=accept_sync_us,
    )
    drafter = parse_drafter("eagle")
    base = engine_point(ideal, drafter, batch, 3, 2.5, "graph", *timers)
    loaded = engine_point(replace(ideal, host=host), drafter, batch, 3, 2.5, "graph", *timers)
    assert loaded.decode.step_s >= base.decode.step_s
    assert loaded.verify.step_s >= base.verify.step_s
    assert loaded.round_s >= base.round_s
    assert loaded.accept_sync_s == pytest.approx(accept_sync_us * 1e-6)


def test_every_preset_is_at_least_the_ideal_step_at_captured_sizes() -> None:
    spec = model("qwen3-30b-a3b")
    timers = _timers(spec)
    for name in ("vllm", "sglang", "trtllm"):
        for batch in (1, 4, 16):
            ideal = engine_point(
                load_serving_engine("ideal"), parse_drafter("eagle"), batch, 3, 2.5, "graph", *timers
            )
            preset = engine_point(
                load_serving_engine(name), parse_drafter("eagle"), batch, 3, 2.5, "graph", *timers
            )
            assert preset.decode.step_s >= ideal.decode.step_s and preset.round_s >= ideal.round_s


def test_batch_expansion_runs_the_verification_as_one_token_rows() -> None:
    spec = model("qwen3-30b-a3b")
    step_timer, draft_timer, piecewise = _timers(spec)
    expanded = _profile(drafter=DrafterStyle(verify_mode="batch_expansion"))
    point = engine_point(
        expanded, parse_drafter("eagle"), 4, 3, 2.5, "graph", step_timer, draft_timer, piecewise
    )
    assert (point.verify.sequences, point.verify.tokens_per_seq) == (16, 1)
    assert point.verify.device_s == step_timer(16, 1, "graph")
    assert point.verify.device_s > step_timer(4, 4, "graph")  # every row re-reads its sequence's KV cache
