"""The discrete-event timer: launch modes, streams, bandwidth sharing, breakdown, and the fast path's agreement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.simulator.execution.events import KernelTimes, event_schedule, run_events, serial_schedule
from moesim.simulator.execution.fastpath import fast_step
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.plan.kernels import Kernel, TensorRead
from moesim.simulator.plan.step import Segment
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.simulate import simulate_step
from tests.core_fixtures import h200, model, tiny_dense, tiny_moe

CATALOGUE_SAMPLE = [
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "olmoe-1b-7b",
    "qwen3-next-80b-a3b",
    "qwen2-0.5b",
    "mixtral-8x7b",
]


@pytest.mark.parametrize("name", CATALOGUE_SAMPLE)
@pytest.mark.parametrize("launch", ["graph", "eager"])
def test_fast_path_agrees_with_engine(name: str, launch: str) -> None:
    spec = model(name)
    for batch, tokens in [(1, 1), (1, 4), (8, 3), (64, 8)]:
        plan = build_plan(spec, batch, tokens, 2048, "fused", None, h200())
        events = run_events(plan, h200(), launch)
        fast = fast_step(plan, h200(), launch)
        single_stream = all(k.stream == 0 for s in plan.segments for k in s.kernels)
        tolerance = 1e-9 if single_stream else 0.02
        assert fast.step_s == pytest.approx(events.step_s, rel=tolerance)
        assert fast.hbm_bytes == pytest.approx(events.hbm_bytes, rel=1e-6)
        if single_stream:
            for category, seconds in events.breakdown_s.items():
                assert fast.breakdown_s[category] == pytest.approx(seconds, rel=1e-6, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 6),
    st.sampled_from([64, 256, 1024]),
    st.integers(2, 64),
    st.integers(1, 4),
    st.integers(1, 64),
    st.integers(1, 8),
    st.booleans(),
)
def test_fast_path_equals_engine_on_one_stream(
    layers: int, hidden: int, experts: int, top_k: int, batch: int, tokens: int, eager: bool
) -> None:
    top_k = min(top_k, experts)
    spec = tiny_moe(layers, hidden, experts, top_k, expert_width=hidden // 2)
    plan = build_plan(spec, batch, tokens, 512, "fused", None, h200())
    launch = "eager" if eager else "graph"
    assert fast_step(plan, h200(), launch).step_s == pytest.approx(
        run_events(plan, h200(), launch).step_s, rel=1e-9
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 1e-3), st.booleans()), min_size=1, max_size=80),
    st.sampled_from(["graph", "eager"]),
    st.booleans(),
)
def test_one_stream_schedule_is_the_event_loops_bit_for_bit(
    kernels: list[tuple[float, bool]], launch: str, with_launch: bool
) -> None:
    """A plan on one stream is scheduled without simpy: every start and end equals the event loop's."""
    total = np.array([seconds for seconds, _ in kernels])
    is_gemm = np.array([gemm for _, gemm in kernels])
    params = LaunchParams.from_hardware(h200(), launch)
    params = params if with_launch else params.without_launch_and_sync()
    plan = tuple(Kernel(f"k{i}", "other", 0.0, ()) for i in range(len(kernels)))
    zero = np.zeros(len(kernels))
    loop_starts, loop_ends = event_schedule(plan, params, KernelTimes(total, zero, total, zero), is_gemm)
    starts, ends = serial_schedule(params, total, is_gemm)
    assert starts.tolist() == loop_starts.tolist() and ends.tolist() == loop_ends.tolist()


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen2-0.5b", "gpt-oss-20b"])
def test_eager_is_never_faster_than_graph(name: str) -> None:
    for batch, tokens in [(1, 1), (4, 4), (64, 1), (256, 8)]:
        plan = build_plan(model(name), batch, tokens, 2048, "fused", None, h200())
        assert run_events(plan, h200(), "eager").step_s >= run_events(plan, h200(), "graph").step_s


def test_small_model_at_batch_one_in_eager_mode_is_launch_bound() -> None:
    result = simulate_step("qwen3-0.6b", h200(), 1, 1, launch="eager")
    n = len(result.kernel_times_s)
    host_issue_s = n * h200().empirical.launch_eager_us * 1e-6
    # The step ends right after the host's last launch: the host, not the device, sets the pace.
    assert host_issue_s >= 0.85 * result.step_s
    idle = result.breakdown_s["launch_idle"]
    assert idle == max(result.breakdown_s.values())


def test_dense_verification_costs_about_one_decode_step_while_memory_bound() -> None:
    for name in ["qwen3-0.6b", "llama-3.2-1b"]:
        decode = simulate_step(name, h200(), 1, 1)
        verify = simulate_step(name, h200(), 1, 4)
        assert verify.step_s / decode.step_s == pytest.approx(1.0, abs=0.03)


def test_large_m_turns_compute_bound() -> None:
    decode = simulate_step("llama-3.2-1b", h200(), 256, 1)
    verify = simulate_step("llama-3.2-1b", h200(), 256, 8)
    assert verify.step_s / decode.step_s > 1.8  # 9× the tokens: no longer just reading the weights once


def test_breakdown_sums_to_the_step_and_timeline_is_ordered() -> None:
    result = simulate_step(model("qwen3-30b-a3b"), h200(), 2, 3)
    assert sum(result.breakdown_s.values()) == pytest.approx(result.step_s, rel=1e-9)
    main = [entry for entry in result.timeline if entry[1] == 0]
    starts = np.array([e[2] for e in main])
    ends = np.array([e[3] for e in main])
    assert np.all(np.diff(starts) > 0) and np.all(ends >= starts)
    assert np.all(starts[1:] >= ends[:-1])


def test_side_streams_share_bandwidth() -> None:
    """Two memory-bound kernels on two streams take about as long as both one after the other."""
    read = 400e6
    fork = Kernel("fork", "other", 0.0, ())
    a = Kernel("a", "routed_experts", 0.0, (TensorRead("wa", read),), m_tokens=1)
    b = Kernel("b", "shared_experts", 0.0, (TensorRead("wb", read),), m_tokens=1, stream=1)
    join = Kernel("join", "other", 0.0, (), join=True)
    base = build_plan(tiny_moe(), 1, 1, 16, "fused", None, h200())

    def run(*kernels: Kernel) -> float:
        plan = base.with_segments((Segment(kernels),))
        return run_events(plan, h200(), "graph", include_launch_and_sync=False, warm_cache=False).step_s

    alone = run(fork, a, join)
    side_by_side = run(fork, b, a, join)
    transfer = run(fork, a, join) - run(fork, join)
    # Both transfers share the bandwidth: the pair takes about twice one transfer, not one.
    assert side_by_side - run(fork, join) == pytest.approx(2 * transfer, rel=0.05)
    assert side_by_side > alone


def test_shared_experts_overlap_in_the_fused_style() -> None:
    spec = tiny_moe(4, 1024, 64, 4, 512, shared=1)
    plan = build_plan(spec, 1, 1, 256, "fused", None, h200())
    assert any(k.stream == 1 for k in plan.kernels)
    assert any(k.join for k in plan.kernels)
    result = run_events(plan, h200(), "graph")
    serial = sum(result.kernel_times_s)
    assert result.step_s - h200().empirical.graph_launch_us * 1e-6 < serial + len(plan.kernels) * 1.5e-6


def test_per_token_reads_more_but_l2_absorbs_repeats_of_experts_that_fit() -> None:
    hw = h200()
    fits = tiny_moe(2, 512, 16, 2, 256)  # 16 small experts: all fit in L2
    fused = run_events(build_plan(fits, 8, 4, 128, "fused", None, hw), hw, "graph")
    per_token = run_events(build_plan(fits, 8, 4, 128, "per-token", None, hw), hw, "graph")
    assert per_token.hbm_bytes + per_token.cache_bytes > fused.hbm_bytes + fused.cache_bytes
    assert per_token.cache_bytes > fused.cache_bytes
    # Experts too big for L2 (16 × 3 × 4096 × 8192 × 2 B ≈ 3 GB): the repeats come from memory.
    big = tiny_moe(1, 4096, 16, 2, 8192)
    fused_big = run_events(build_plan(big, 8, 4, 128, "fused", None, hw), hw, "graph")
    per_token_big = run_events(build_plan(big, 8, 4, 128, "per-token", None, hw), hw, "graph")
    assert per_token_big.hbm_bytes > 2 * fused_big.hbm_bytes
    assert per_token.hbm_bytes < 1.5 * fused.hbm_bytes


def test_dense_tiny_model_runs() -> None:
    result = run_events(build_plan(tiny_dense(), 4, 2, 64, "fused", None, h200()), h200(), "eager")
    assert result.step_s > 0 and result.breakdown_s["routed_experts"] == 0.0


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 4), st.sampled_from([128, 512, 2048]), st.integers(1, 32), st.integers(1, 4), st.booleans()
)
def test_eager_never_beats_graph_on_any_small_model(
    layers: int, hidden: int, batch: int, tokens: int, shared: bool
) -> None:
    spec = tiny_moe(layers, hidden, 16, 2, hidden // 2, shared=int(shared))
    plan = build_plan(spec, batch, tokens, 256, "fused", None, h200())
    assert run_events(plan, h200(), "eager").step_s >= run_events(plan, h200(), "graph").step_s


def test_fast_path_equals_engine_for_per_token_plans() -> None:
    """Per-token plans touch many tensors repeatedly: the fast path takes its exact sequential cache pass."""
    spec = tiny_moe(2, 1024, 128, 8, 512)
    plan = build_plan(spec, 4, 4, 256, "per-token", None, h200())
    for launch in ("graph", "eager"):
        events = run_events(plan, h200(), launch)
        fast = fast_step(plan, h200(), launch)
        assert fast.step_s == pytest.approx(events.step_s, rel=1e-9)
        assert fast.cache_bytes == pytest.approx(events.cache_bytes, rel=1e-9)


def test_cold_cache_is_never_faster_than_warm() -> None:
    plan = build_plan(tiny_moe(2, 256, 16, 2, 128), 2, 2, 64, "fused", None, h200())
    warm = run_events(plan, h200(), "graph")
    cold = run_events(plan, h200(), "graph", warm_cache=False)
    assert cold.step_s >= warm.step_s
    assert cold.hbm_bytes > warm.hbm_bytes  # the tiny model fits in L2: a repeated step reads it from there
