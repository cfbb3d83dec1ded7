"""Cost model and L2 cache: roofline limits, small-transfer ramp, LRU semantics, stack-distance exactness."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.simulator.cache import CacheState, repeat_traffic
from moesim.simulator.cost import CostParams, kernel_time_s, kernel_times_s
from moesim.simulator.fastpath import residency
from moesim.simulator.kernels import Kernel, TensorRead
from tests.core_fixtures import h200


def params() -> CostParams:
    return CostParams.from_hardware(h200())


def gemm(m: int, k: int = 4096, n: int = 4096) -> Kernel:
    return Kernel("gemm", "dense_weights", 2.0 * m * k * n, (TensorRead("w", k * n * 2),), m_tokens=m)


def test_small_m_gemm_is_memory_bound_and_costs_its_bytes() -> None:
    p = params()
    k = gemm(1)
    t = kernel_time_s(k, h200(), hbm_bytes=k.reads[0].size_bytes)
    expected = p.fixed_s + (k.reads[0].size_bytes + p.half_bandwidth_bytes) / p.memory_bytes_per_s
    assert np.isclose(t, expected)


def test_large_m_turns_compute_bound() -> None:
    p = params()
    small, large = gemm(1), gemm(8192)
    _, c_small, m_small = kernel_times_s(
        np.array([small.flops]),
        np.array([1.0]),
        np.array([p.peak("bf16")]),
        np.array([32e6]),
        np.array([0.0]),
        p,
    )
    _, c_large, m_large = kernel_times_s(
        np.array([large.flops]),
        np.array([8192.0]),
        np.array([p.peak("bf16")]),
        np.array([32e6]),
        np.array([0.0]),
        p,
    )
    assert c_small[0] < m_small[0]
    assert c_large[0] > m_large[0]


def test_cache_bytes_are_cheaper_than_memory_bytes() -> None:
    k = gemm(1)
    from_memory = kernel_time_s(k, h200(), hbm_bytes=32e6)
    from_cache = kernel_time_s(k, h200(), hbm_bytes=0.0, cache_bytes=32e6)
    assert from_cache < from_memory


def test_small_transfers_achieve_less_bandwidth() -> None:
    p = params()
    sizes = np.array([1e3, 1e5, 1e7, 1e9])
    _, _, memory = kernel_times_s(np.zeros(4), np.ones(4), np.full(4, p.peak("bf16")), sizes, np.zeros(4), p)
    achieved = sizes / memory
    assert np.all(np.diff(achieved) > 0)
    assert achieved[-1] <= p.memory_bytes_per_s


@given(st.lists(st.floats(1e3, 1e9), min_size=1, max_size=20))
def test_time_grows_with_bytes(sizes: list[float]) -> None:
    p = params()
    b = np.sort(np.asarray(sizes))
    total, _, _ = kernel_times_s(
        np.zeros(b.size), np.zeros(b.size), np.full(b.size, p.peak("bf16")), b, np.zeros(b.size), p
    )
    assert np.all(np.diff(total) >= -1e-15)


def test_lru_hits_when_resident_and_misses_after_eviction() -> None:
    cache = CacheState(100.0)
    assert cache.touch("a", 40) == 0
    assert cache.touch("a", 40) == 40
    cache.touch("b", 50)
    assert cache.touch("a", 40) == 40  # 90 bytes fit
    cache.touch("c", 50)  # pushes b out first, then part of a? a is MRU: b (50) is evicted
    assert cache.resident("b") == 10.0 or cache.resident("b") == 0.0
    cache.touch("d", 100)
    assert cache.resident("a") == 0.0


def test_partial_residency_of_a_tensor_larger_than_the_cache() -> None:
    cache = CacheState(100.0)
    assert cache.touch("big", 300) == 0
    assert cache.touch("big", 300) == 100  # only the capacity's worth stayed


def test_repeats_hit_while_the_working_set_fits() -> None:
    hit, miss = repeat_traffic(80.0, 3.0, 0.0, 100.0)
    assert np.isclose(hit, 160.0) and np.isclose(miss, 0.0)
    hit, miss = repeat_traffic(400.0, 3.0, 0.0, 100.0)
    assert np.isclose(hit, 200.0) and np.isclose(miss, 600.0)
    hit, miss = repeat_traffic(400.0, 3.0, 100.0, 100.0)  # each expert (100 B) fits: all repeats hit
    assert np.isclose(miss, 0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.floats(0, 120)), min_size=1, max_size=40),
    st.floats(1, 300),
)
def test_stack_distances_equal_the_lru_state(accesses: list[tuple[int, float]], capacity: float) -> None:
    """The fast path's vectorised residency equals the engine's CacheState, warm from a previous pass."""
    tensor = np.array([t for t, _ in accesses])
    size = np.array([s for _, s in accesses])
    footprint: dict[str, float] = {}
    for t, s in accesses:
        footprint[str(t)] = max(footprint.get(str(t), 0.0), s)
    state = CacheState(capacity, footprint)
    for t, s in accesses:
        state.touch(str(t), s)
    expected = [state.touch(str(t), s) for t, s in accesses]
    _, dense = np.unique(tensor, return_inverse=True)
    got = residency(dense.reshape(-1), size, capacity)
    assert got is not None
    assert np.allclose(got, expected, atol=1e-6)
