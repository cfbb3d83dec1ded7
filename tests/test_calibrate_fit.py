"""The calibration fits recover the parameters that generated synthetic measurements (no torch needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.build import Measurements, build_profile
from moesim.calibrate.fits.gemm import fit_gemm_points, fit_gemm_table
from moesim.calibrate.fits.launch import fit_launch_table
from moesim.calibrate.fits.memory import fit_memory_table
from moesim.calibrate.fits.moe import fit_moe_table
from moesim.simulator.execution.cost import CostParams, kernel_times_s
from moesim.simulator.hardware.profile import profile_from_dict, profile_to_dict

MIB = 2**20


def noisy(values: np.ndarray, rel: float, seed: int = 0) -> np.ndarray:
    return values * np.exp(np.random.default_rng(seed).normal(0.0, rel, len(values)))


def test_one_level_knee_recovered_with_noise() -> None:
    sizes = np.geomspace(1 * MIB, 4096 * MIB, 30)
    bw = noisy(fit.cache_curve(sizes, 12000.0, 4000.0, 50 * MIB, 6.0), 0.03)
    result = fit.fit_cache_knee(sizes, bw)
    assert result.levels == 1
    assert result.cache_gbps == pytest.approx(12000.0, rel=0.06)
    assert result.memory_gbps == pytest.approx(4000.0, rel=0.06)
    assert result.knee_bytes == pytest.approx(50 * MIB, rel=0.15)
    assert result.fit.r2 > 0.98


def test_two_level_knee_reports_the_outer_cache() -> None:
    sizes = np.geomspace(0.25 * MIB, 2048 * MIB, 36)
    bw = noisy(fit.two_level_cache_curve(sizes, 100.0, 22.0, 12.0, 1.5 * MIB, 40 * MIB, 5.0), 0.02)
    result = fit.fit_cache_knee(sizes, bw)
    assert result.levels == 2
    assert result.knee_bytes == pytest.approx(40 * MIB, rel=0.25)
    assert result.inner_knee_bytes == pytest.approx(1.5 * MIB, rel=0.25)
    assert result.cache_gbps == pytest.approx(22.0, rel=0.1)
    assert result.memory_gbps == pytest.approx(12.0, rel=0.06)
    assert result.inner_gbps > result.cache_gbps > result.memory_gbps


def test_knee_needs_enough_points() -> None:
    with pytest.raises(ValueError):
        fit.fit_cache_knee(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]))


@settings(max_examples=25, deadline=None)
@given(
    plateau=st.floats(1.0, 10000.0),
    half=st.floats(1e3, 1e8),
)
def test_transfer_ramp_recovered(plateau: float, half: float) -> None:
    sizes = np.geomspace(half / 100, half * 1000, 16)
    result = fit.fit_transfer_ramp(sizes, fit.transfer_ramp(sizes, plateau, half))
    assert result.params["plateau_gbps"] == pytest.approx(plateau, rel=1e-3)
    assert result.params["half_bandwidth_transfer_bytes"] == pytest.approx(half, rel=1e-3)
    # The defining property: a read of the half size achieves half the plateau.
    assert fit.transfer_ramp(np.array([half]), plateau, half)[0] == pytest.approx(plateau / 2)


@settings(max_examples=25, deadline=None)
@given(
    latency_s=st.floats(0.05e-6, 1.9e-6),
    bandwidth=st.floats(1e10, 8e12),
    fixed_s=st.floats(1e-6, 10e-6),
)
def test_transfer_latency_recovered_from_device_times(
    latency_s: float, bandwidth: float, fixed_s: float
) -> None:
    """Device times t = fixed + latency + S / bandwidth: the fit recovers h = bandwidth × latency."""
    sizes = np.geomspace(4096, 1e9, 24)
    times = noisy(fixed_s + latency_s + sizes / bandwidth, 0.01, seed=3)
    result = fit.fit_transfer_latency(sizes, times, fixed_s, bandwidth)
    half = result.params["half_bandwidth_transfer_bytes"]
    # 1% timing noise on a latency that may be a few % of the time: recovered to within the noise.
    assert half == pytest.approx(bandwidth * latency_s, abs=0.03 * bandwidth * (fixed_s + latency_s))
    assert result.params["memory_latency_us"] == pytest.approx(half / bandwidth * 1e6)
    # The fitted formula is the cost model's: fixed + (S + h) / bandwidth.
    np.testing.assert_allclose(result.predicted, fit.transfer_time_s(sizes, fixed_s, bandwidth, half))


def test_transfer_latency_is_never_negative() -> None:
    sizes = np.geomspace(4096, 1e8, 12)
    times = 3e-6 + sizes / 4e12 - 0.5e-6  # faster than fixed + bytes / bandwidth: no extra latency
    half = fit.fit_transfer_latency(sizes, times, 3e-6, 4e12).params["half_bandwidth_transfer_bytes"]
    assert half == pytest.approx(0.0, abs=1.0)  # below one byte


def _memory_rows(
    transfer_s: np.ndarray, transfer: np.ndarray, fixed_s: float
) -> list[dict[str, float | str]]:
    sizes = np.geomspace(2 * MIB, 4096 * MIB, 30)
    bw = fit.cache_curve(sizes, 9500.0, 4300.0, 50 * MIB, 6.0)
    rows: list[dict[str, float | str]] = [
        {"kind": "working_set", "size_bytes": float(s), "bandwidth_gbps": float(b)}
        for s, b in zip(sizes, bw, strict=True)
    ]
    rows.append({"kind": "fixed_warm", "size_bytes": 4096.0, "median_s": fixed_s})
    rows += [
        {"kind": "transfer", "size_bytes": float(s), "median_s": float(t)}
        for s, t in zip(transfer, transfer_s, strict=True)
    ]
    return rows


def test_h200_like_ramp_is_a_few_megabytes() -> None:
    """An HBM latency of 0.7 µs at 4.3 TB/s is h ≈ 3 MB: the sanity bound the fit must respect."""
    transfer = np.geomspace(16e3, 1e9, 30)
    times = noisy(2e-6 + 0.7e-6 + transfer / 4.3e12, 0.01)
    params = fit_memory_table(_memory_rows(times, transfer, 2e-6))
    assert params.half_bandwidth_transfer_bytes == pytest.approx(4.3e12 * 0.7e-6, rel=0.15)
    assert 1e6 < params.half_bandwidth_transfer_bytes < params.memory_gbps * 1e9 * fit.MAX_MEMORY_LATENCY_S
    assert params.notes == ()


def test_host_bound_cold_reads_are_held_to_the_memory_latency_bound() -> None:
    """Reads timed with the host's launch inside (a ~17 µs floor) would give h ≈ 60 MB: bounded, with a note."""
    transfer = np.geomspace(16e3, 1e9, 30)
    times = np.maximum(17e-6, 2e-6 + transfer / 4.3e12) + 3e-6
    params = fit_memory_table(_memory_rows(times, transfer, 2e-6))
    assert params.ramp is not None and params.ramp.params["memory_latency_us"] > 5.0
    bound = params.memory_gbps * 1e9 * fit.MAX_MEMORY_LATENCY_S
    assert params.half_bandwidth_transfer_bytes == pytest.approx(bound)
    assert any("exceeds any memory latency" in note for note in params.notes)


@settings(max_examples=25, deadline=None)
@given(slope=st.floats(1e-7, 1e-4), intercept=st.floats(0.0, 1e-3))
def test_launch_line_recovered(slope: float, intercept: float) -> None:
    n = np.array([16.0, 32, 64, 128, 256, 512])
    result = fit.fit_line(n, intercept + slope * n)
    assert result.params["slope"] == pytest.approx(slope, rel=1e-4, abs=1e-12)
    assert result.r2 == pytest.approx(1.0, abs=1e-6)


def test_robust_line_ignores_one_preempted_batch() -> None:
    n = np.array([100.0, 200, 400, 800, 1600, 3200])
    t = 20e-6 + 5e-6 * n
    t[2] += 8e-3  # one batch hit a scheduler tick
    assert fit.fit_line(n, t).params["slope"] == pytest.approx(5e-6, rel=0.05)


def gemm_rows(e_max: float, m_half: float, power: float, peak_tflops: float, bw_gbps: float) -> list[dict]:
    """GEMM timings as the cost model prices them with the curve e_max·Mᵖ/(Mᵖ + m_halfᵖ)."""
    grid = np.array([1.0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    rows = []
    for k, n in ((4096, 4096), (7168, 2048)):
        for m in grid.astype(int):
            flops = 2.0 * m * k * n
            nbytes = 2.0 * (m * k + k * n + m * n)
            params = CostParams.for_gemms(
                3e-6,
                bw_gbps * 1e9,
                0.0,
                grid,
                fit.efficiency_curve(grid, e_max, m_half, power),
                peak_tflops * 1e12,
            )
            t = kernel_times_s(
                np.array([flops]),
                np.array([float(m)]),
                np.array([peak_tflops * 1e12]),
                np.array([nbytes]),
                np.zeros(1),
                params,
            )[0][0]
            rows.append(
                {"dtype": "bf16", "k": k, "n": n, "m": m, "flops": flops, "bytes": nbytes, "median_s": t}
            )
    return rows


def test_gemm_roofline_fit_recovers_the_compute_curve() -> None:
    rows = gemm_rows(0.7, 300.0, 1.2, 989.0, 4000.0)
    g = fit_gemm_table(rows, "bf16", 989.0, 4000.0, 0.0, 3.0)
    # Only the compute-bound region identifies the curve: check it there and the plateau.
    assert g.fit.params["e_max"] == pytest.approx(0.7, rel=0.03)
    assert g.fit.extra["log_r2"] > 0.999
    eff = dict(zip(g.efficiency.m_tokens, g.efficiency.efficiency, strict=True))
    assert eff[4096.0] == pytest.approx(
        float(fit.efficiency_curve(np.array([4096.0]), 0.7, 300.0, 1.2)[0]), rel=0.03
    )
    assert list(g.efficiency.efficiency) == sorted(g.efficiency.efficiency)
    assert all(0 < e <= 1 for e in g.efficiency.efficiency)


def test_gemm_points_fit_keeps_a_step_the_saturating_curve_smooths_over() -> None:
    # A CPU-like kernel: M = 4 takes as long as M = 8 (efficiency doubles from 4 to 8), then saturates.
    grid = np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64])
    truth = np.array([0.02, 0.04, 0.05, 0.06, 0.075, 0.09, 0.105, 0.12, 0.2, 0.3, 0.4])
    peak, bw = 100e9, 15e9
    rows = []
    for k, n in ((1024, 1024), (1024, 2816), (512, 256), (2048, 512)):
        for m, e in zip(grid, truth, strict=True):
            flops, nbytes = 2.0 * m * k * n, 4.0 * (m * k + k * n + m * n)
            t = 3e-6 + max(flops / (peak * (1.0 if m == 1 else e)), nbytes / bw)
            rows.append(
                {"dtype": "fp32", "k": k, "n": n, "m": m, "flops": flops, "bytes": nbytes, "median_s": t}
            )
    g = fit_gemm_points(rows, "fp32", peak / 1e12, bw / 1e9, 0.0, 3.0)
    eff = dict(zip(g.efficiency.m_tokens, g.efficiency.efficiency, strict=True))
    for m, e in zip(grid[1:], truth[1:], strict=True):
        assert eff[m] == pytest.approx(e, rel=0.01)  # every measured M, the step at 4-8 included
    assert g.fit.extra["log_rmse"] < 0.01
    assert g.fit.extra["heldout_log_rmse"] < 0.01  # each shape scored by the curve of the other three
    assert g.fit.extra["heldout_log_rmse_saturating"] > 5 * g.fit.extra["heldout_log_rmse"]
    assert list(g.efficiency.efficiency) == sorted(g.efficiency.efficiency)


def test_moe_plane_fit_recovers_per_expert_cost() -> None:
    rows = []
    for size_class, per_expert, nbytes in (("small", 20e-6, 1e6), ("large", 300e-6, 50e6)):
        for m in (1, 2, 4, 8, 16):
            for u in sorted({2, min(16, 2 * m), min(16, m)} - {0, 1}):
                t = 150e-6 + per_expert * u + 5e-6 * m * 2
                rows.append(
                    {
                        "size_class": size_class,
                        "distinct": u,
                        "slots": 2 * m,
                        "median_s": t,
                        "expert_bytes": nbytes,
                    }
                )
    fits = fit_moe_table(rows)
    assert fits["small"].params["per_expert_s"] == pytest.approx(20e-6, rel=1e-3)
    assert fits["large"].params["per_expert_s"] == pytest.approx(300e-6, rel=1e-3)
    assert fits["large"].extra["effective_expert_gbps"] == pytest.approx(50e6 / 300e-6 / 1e9, rel=1e-3)


def synthetic_tables() -> Measurements:
    sizes = np.geomspace(0.5 * MIB, 1024 * MIB, 28)
    bw = fit.two_level_cache_curve(sizes, 100.0, 22.0, 12.0, 1.5 * MIB, 40 * MIB, 5.0)
    memory = [
        {"kind": "working_set", "size_bytes": float(s), "bandwidth_gbps": float(b)}
        for s, b in zip(sizes, bw, strict=True)
    ]
    transfer = np.geomspace(64e3, 256e6, 13)
    memory.append({"kind": "fixed_warm", "size_bytes": 4096.0, "median_s": 5e-6})
    memory += [
        {"kind": "transfer", "size_bytes": float(s), "median_s": float(t)}
        for s, t in zip(transfer, fit.transfer_time_s(transfer, 5e-6, 12e9, 12e3), strict=True)
    ]
    launch = [
        {"kind": "eager_host", "n_kernels": n, "seconds": 10e-6 + 4e-6 * n} for n in (100, 200, 400, 800)
    ]
    launch += [
        {
            "kind": "eager_gemm_host",
            "n_kernels": n,
            "seconds": 20e-6 + 11e-6 * n,
            "gemm_m": 1,
            "gemm_k": 64,
            "gemm_n": 64,
        }
        for n in (25, 50, 100, 200)
    ]
    gemm = [dict(r, dtype="fp32") for r in gemm_rows(1.0, 40.0, 1.0, 0.13, 12.0)]
    return Measurements(
        device_name="Test CPU",
        backend="cpu",
        dtypes=["fp32"],
        memory_capacity_bytes=16e9,
        reported_llc_bytes=64 * MIB,
        compute_units=2,
        memory=memory,
        launch=launch,
        gemm=gemm,
        date="2026-01-01",
    )


def test_profile_built_from_synthetic_tables_carries_the_truth() -> None:
    profile, fits = build_profile(synthetic_tables(), "test-cpu")
    em, ds = profile.empirical, profile.datasheet
    assert ds.device_kind == "cpu" and profile.is_cpu
    assert ds.memory_bandwidth_gbps == pytest.approx(12.0, rel=0.02)
    assert em.memory_bandwidth_fraction == 1.0
    assert em.cache_bandwidth_gbps == pytest.approx(22.0, rel=0.05)
    assert em.cache_effective_bytes == pytest.approx(40 * MIB, rel=0.1)
    assert ds.last_level_cache_bytes == 64 * MIB  # what the OS reports, kept apart from the measured knee
    assert em.half_bandwidth_transfer_bytes == pytest.approx(12e3, rel=0.05)  # 12 GB/s × 1 µs
    assert em.launch_eager_us == pytest.approx(4.0, rel=1e-3)
    assert em.kernel_fixed_latency_us == em.launch_eager_us  # CPU: dispatch then work, in sequence
    assert em.launch_eager_gemm_us == pytest.approx(11.0, rel=1e-3)  # its own line, apart from the tiny ops
    assert any("x[1,64] @ W[64,64]" in a for a in profile.provenance.assumptions)
    assert ds.peak_dense_tflops["fp32"] > 0
    assert profile.provenance.kind == "measured"
    assert set(profile.fit_quality) >= {
        "memory_cache_knee",
        "transfer_ramp",
        "launch_eager",
        "launch_eager_gemm",
        "gemm_efficiency_fp32",
    }
    assert all(math.isfinite(v) for q in profile.fit_quality.values() for v in q.values())
    # The profile survives the file format's validation and round trip.
    again = profile_from_dict(profile_to_dict(profile), "synthetic")
    assert again == profile
    assert "memory_cache_knee" in fits


def test_memory_table_fit_ignores_invalid_points() -> None:
    tables = synthetic_tables()
    assert tables.memory is not None
    tables.memory.append({"kind": "working_set", "size_bytes": 4096.0, "bandwidth_gbps": float("nan")})
    assert fit_memory_table(tables.memory).cache_bytes == pytest.approx(40 * MIB, rel=0.1)


def test_cpu_launch_table_has_no_graph_or_sync() -> None:
    params = fit_launch_table(
        [{"kind": "eager_host", "n_kernels": n, "seconds": 3e-6 * n} for n in (1, 2, 4, 8)], is_gpu=False
    )
    assert params.launch_graph_gap_us == 0 and params.sync_us == 0 and params.graph_launch_us == 0


def test_gpu_launch_table_splits_graph_time_into_latency_and_gap() -> None:
    rows = [{"kind": "eager_host", "n_kernels": n, "seconds": 6e-6 * n} for n in (16, 64, 256)]
    rows += [{"kind": "graph_device", "n_kernels": n, "seconds": 8e-6 + 3e-6 * n} for n in (16, 64, 256)]
    rows += [{"kind": "graph_host", "n_kernels": n, "seconds": 9e-6} for n in (16, 64, 256)]
    rows += [
        {"kind": "single_kernel", "n_kernels": 1, "seconds": 2.5e-6},
        {"kind": "empty_events", "n_kernels": 0, "seconds": 0.5e-6},
    ]
    rows += [{"kind": "sync", "n_kernels": 0, "seconds": 7e-6}]
    p = fit_launch_table(rows, is_gpu=True)
    assert p.launch_eager_us == pytest.approx(6.0, rel=1e-3)
    assert p.kernel_fixed_latency_us == pytest.approx(2.0, rel=1e-3)
    assert p.launch_graph_gap_us == pytest.approx(1.0, rel=1e-3)
    assert p.graph_launch_us == pytest.approx(9.0) and p.sync_us == pytest.approx(7.0)


def test_gpu_profile_takes_the_bundled_datasheet() -> None:
    tables = synthetic_tables()
    tables.backend, tables.device_name, tables.dtypes = "cuda", "NVIDIA H200", ["bf16"]
    sizes = np.geomspace(2 * MIB, 4096 * MIB, 24)
    tables.memory = [
        {"kind": "working_set", "size_bytes": float(s), "bandwidth_gbps": float(b)}
        for s, b in zip(sizes, fit.cache_curve(sizes, 10000.0, 4200.0, 30 * MIB, 6.0), strict=True)
    ]
    tables.gemm = gemm_rows(0.75, 200.0, 1.0, 989.4, 4200.0)
    tables.launch = [{"kind": "eager_host", "n_kernels": n, "seconds": 6e-6 * n} for n in (16, 64, 256)]
    tables.launch += [{"kind": "graph_device", "n_kernels": n, "seconds": 3e-6 * n} for n in (16, 64, 256)]
    tables.launch += [
        {"kind": "single_kernel", "n_kernels": 1, "seconds": 2e-6},
        {"kind": "empty_events", "n_kernels": 0, "seconds": 0.0},
    ]
    profile, _ = build_profile(tables, "h200-test")
    assert profile.datasheet.memory_bandwidth_gbps == 4800.0  # the datasheet, not the measurement
    assert profile.empirical.memory_bandwidth_fraction == pytest.approx(4200.0 / 4800.0, rel=0.02)
    assert profile.datasheet.peak_dense_tflops["bf16"] == pytest.approx(989.4)
    assert not profile.is_cpu


def test_launch_table_without_gemm_rows_leaves_the_gemm_launch_unset() -> None:
    tables = synthetic_tables()
    assert tables.launch is not None
    tables.launch = [r for r in tables.launch if r["kind"] != "eager_gemm_host"]
    profile, _ = build_profile(tables, "old-csv")
    assert profile.empirical.launch_eager_gemm_us is None
    assert any("launch_eager_gemm_us not measured" in a for a in profile.provenance.assumptions)
    assert "launch_eager_gemm_us" not in profile_to_dict(profile)["empirical"]  # TOML has no null
    assert profile_from_dict(profile_to_dict(profile), "x") == profile


def _h200_tables(memory: list[dict[str, float]]) -> Measurements:
    launch = [{"kind": "eager_host", "n_kernels": n, "seconds": 8e-6 * n} for n in (16, 64, 256)]
    launch += [{"kind": "graph_device", "n_kernels": n, "seconds": 1.1e-6 * n} for n in (16, 64, 256)]
    launch += [
        {"kind": "single_kernel", "n_kernels": 1, "seconds": 3.3e-6},
        {"kind": "empty_events", "n_kernels": 0, "seconds": 1.3e-6},
    ]
    return Measurements(
        device_name="NVIDIA H200",
        backend="cuda",
        dtypes=["bf16"],
        memory_capacity_bytes=141e9,
        reported_llc_bytes=50 * MIB,
        compute_units=132,
        memory=memory,
        launch=launch,
        date="2026-01-01",
    )


def test_gpu_sweep_without_a_cache_plateau_falls_back_for_the_cache_only() -> None:
    from moesim.simulator.hardware.profile import load_profile

    sizes = np.geomspace(2 * MIB, 4096 * MIB, 40)
    flat = fit.two_level_cache_curve(sizes, 4400.0, 4450.0, 4350.0, 1 * MIB, 1500 * MIB, 5.0)
    memory = [
        {"kind": "working_set", "size_bytes": float(s), "bandwidth_gbps": float(b)}
        for s, b in zip(sizes, flat, strict=True)
    ]
    profile, _ = build_profile(_h200_tables(memory), "h200-test")
    bundled = load_profile("h200").empirical
    em = profile.empirical
    assert em.cache_effective_bytes == bundled.cache_effective_bytes
    assert em.cache_bandwidth_gbps == bundled.cache_bandwidth_gbps
    assert em.memory_bandwidth_fraction < 1.0  # the memory plateau is still the measured one
    assert any("no cache plateau" in a for a in profile.provenance.assumptions)
    # With a real plateau the measured knee is kept.
    knee = fit.two_level_cache_curve(sizes, 12000.0, 11000.0, 4350.0, 1 * MIB, 30 * MIB, 5.0)
    memory = [
        {"kind": "working_set", "size_bytes": float(s), "bandwidth_gbps": float(b)}
        for s, b in zip(sizes, knee, strict=True)
    ]
    kept, _ = build_profile(_h200_tables(memory), "h200-test")
    assert kept.empirical.cache_effective_bytes == pytest.approx(30 * MIB, rel=0.15)
    assert kept.empirical.cache_bandwidth_gbps > 2 * 4350


# A real warm-read sweep of this project's 2-core CI VM (private L2 ≈ 1 MiB, shared L3 step near 8–11 MiB,
# DRAM ≈ 11 GB/s) on which the one-level curve wins and reports the L2.
_L2_AND_L3_SWEEP = [
    (524288, 58.31), (655360, 63.66), (827392, 65.53), (1040384, 59.41), (1306624, 51.65), (1646592, 41.11),
    (2068480, 28.82), (2600960, 22.88), (3272704, 19.21), (4112384, 18.22), (5169152, 18.27), (6500352, 15.97),
    (8175616, 13.75), (10276864, 14.39), (12922880, 10.39), (16248832, 11.56), (20426752, 13.74),
    (25681920, 11.69), (32288768, 13.01), (40595456, 10.34), (51040256, 13.60), (64172032, 10.65),
    (80678912, 10.39), (101433344, 10.60), (127524864, 10.44), (160329728, 10.68), (201572352, 10.35),
    (253427712, 10.47), (318619648, 10.53), (400580608, 10.67), (503623680, 11.03), (633176064, 11.03),
    (796057600, 11.00), (1000833024, 10.79), (1258291200, 10.63),
]  # fmt: skip


def test_outermost_cache_level_reports_the_last_level_whichever_curve_wins() -> None:
    """Whether the one- or two-level curve wins flips with a point or two; the reported LLC must not."""
    from moesim.calibrate.fits.memory import outermost_cache_level

    sizes = np.array([s for s, _ in _L2_AND_L3_SWEEP], dtype=float)
    bw = np.array([b for _, b in _L2_AND_L3_SWEEP])
    levels_seen = set()
    for first in range(6):
        levels_seen.add(fit.fit_cache_knee(sizes[first:], bw[first:]).knee_bytes < 2 * 2**20)
        llc = outermost_cache_level(sizes[first:], bw[first:])
        assert 4 * 2**20 < llc.knee_bytes < 20 * 2**20  # the L3 step, not the private L2
        assert 1.3 * llc.memory_gbps < llc.cache_gbps < 30.0
    assert levels_seen == {True, False}  # the plain fit does flip on this sweep


def test_outermost_cache_level_keeps_a_single_clean_level() -> None:
    from moesim.calibrate.fits.memory import outermost_cache_level

    sizes = np.geomspace(2**20, 2**30, 30)
    bw = fit.cache_curve(sizes, 3000.0, 1000.0, 40 * 2**20, 6.0)
    llc = outermost_cache_level(sizes, bw)
    assert llc.knee_bytes == pytest.approx(40 * 2**20, rel=0.1)
    assert llc.cache_gbps == pytest.approx(3000.0, rel=0.05)


def test_a_line_states_a_confidence_interval_that_holds_the_true_slope() -> None:
    rng = np.random.default_rng(4)
    n = np.repeat([25.0, 50.0, 100.0, 200.0], 8)
    t = 20e-6 + 3e-6 * n + rng.normal(0.0, 15e-6, n.size)
    line = fit.fit_line(n, t)
    assert line.extra["slope_low"] < 3e-6 < line.extra["slope_high"]
    assert line.extra["slope_low"] <= line.params["slope"] <= line.extra["slope_high"]
    quiet = fit.fit_line(n, 20e-6 + 3e-6 * n + rng.normal(0.0, 1e-6, n.size))
    assert (
        quiet.extra["slope_high"] - quiet.extra["slope_low"]
        < line.extra["slope_high"] - line.extra["slope_low"]
    )


def test_the_memory_fit_states_where_its_knee_lies() -> None:
    rows = synthetic_tables().memory
    assert rows is not None
    for row in rows:
        if row["kind"] == "working_set":
            row |= {"median_s": row["size_bytes"] / row["bandwidth_gbps"] / 1e9, "iqr_s": 0.0}
    mem = fit_memory_table(rows)
    low, high = mem.knee_range_bytes
    assert low <= mem.cache_bytes <= high
    assert 10 * MIB < low < 40 * MIB < high < 160 * MIB  # the synthetic L3 step at 40 MiB, sharpness 5
    assert mem.confidence()["memory_plateau_rel_iqr"] == 0.0


def test_memory_plateau_is_taken_at_the_reference_reads_speed() -> None:
    """A neighbour slows the DRAM by 40% for every other point beyond the cache; the reference read beside
    each point saw it too, so the points brought to the suite's median speed give the true plateau."""
    tables = synthetic_tables()  # memory plateau 12 GB/s, LLC knee at 40 MiB
    rows = []
    for i, row in enumerate(tables.memory):
        if row["kind"] == "working_set" and row["size_bytes"] > 64 * MIB:
            slow = 0.6 if i % 2 else 1.0
            row = row | {
                "bandwidth_gbps": row["bandwidth_gbps"] * slow,
                "normalised_gbps": row["bandwidth_gbps"],
                "reference_bytes": 256.0 * MIB,
                "reference_s": 256 * MIB / 12e9,
                "beside_s": 256 * MIB / 12e9 / slow,
            }
        rows.append(row)
    mem = fit_memory_table(rows)
    assert mem.memory_gbps == pytest.approx(12.0, rel=0.03)
    assert mem.raw_memory_gbps < 0.9 * mem.memory_gbps  # fitted to the points as timed, the drift bends it
    quality = mem.confidence()
    assert quality["reference_gbps"] == pytest.approx(256 * MIB / (256 * MIB / 12e9) / 1e9)
    assert quality["memory_plateau_raw_gbps"] == mem.raw_memory_gbps
    assert "reference_gbps" not in fit_memory_table(tables.memory).confidence()  # older tables: none


def test_console_memory_plateau_is_the_sum_plateau_not_the_gemm_stream(capsys: pytest.CaptureFixture) -> None:
    """On a CPU whose one-row GEMMs stream slower than torch.sum, the profile's bandwidth is the GEMM rate;
    the console's "memory plateau" line must still print the memory suite's plateau."""
    from types import SimpleNamespace

    from moesim.commands.calibrate import _print_result, memory_plateau_gbps

    tables = synthetic_tables()  # memory plateau 12 GB/s
    tables.gemm = [dict(r, dtype="fp32") for r in gemm_rows(1.0, 40.0, 1.0, 0.13, 8.0)]
    profile, _ = build_profile(tables, "test-cpu")
    assert profile.datasheet.memory_bandwidth_gbps == pytest.approx(8.0, rel=0.05)  # the GEMM stream
    assert profile.empirical.elementwise_bandwidth_fraction == pytest.approx(1.5, rel=0.05)
    plateau = fit_memory_table(tables.memory).memory_gbps
    assert memory_plateau_gbps(profile) == pytest.approx(plateau, rel=1e-4)
    result = SimpleNamespace(profile=profile, output="p.toml", wall_s={}, notes=[], failures={})
    _print_result(result)
    lines = capsys.readouterr().out.splitlines()
    printed = next(line for line in lines if "memory plateau" in line)
    assert float(printed.split()[2]) == pytest.approx(plateau, abs=0.05)
    stream = next(line for line in lines if "GEMM weight stream" in line)
    assert float(stream.split()[3]) == pytest.approx(profile.datasheet.memory_bandwidth_gbps, abs=0.05)
