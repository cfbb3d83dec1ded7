"""Launch calibration: the dependent mixed chain sets the per-kernel costs; the CPU bandwidth rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.calibrate.fits.build import build_profile
from moesim.calibrate.fits.gemm import MIN_GEMM_STREAM_SHARE, cpu_bandwidths, m1_gemm_streaming_gbps
from moesim.calibrate.fits.launch import fit_launch_table
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.execution.launch import LaunchParams
from tests.test_calibrate_fit import MIB, synthetic_tables

COUNTS = (16, 32, 64, 128, 256)


def gpu_launch_rows(
    identical_us: float, isolated_us: float, chain_us: float | None, eager_chain_us: float | None = None
) -> list[dict]:
    rows = [{"kind": "eager_host", "n_kernels": n, "seconds": 7.8e-6 * n} for n in COUNTS]
    rows += [
        {"kind": "graph_device", "n_kernels": n, "seconds": 5e-6 + identical_us * 1e-6 * n} for n in COUNTS
    ]
    rows += [{"kind": "graph_host", "n_kernels": n, "seconds": 9e-6} for n in COUNTS]
    rows += [
        {"kind": "single_kernel", "n_kernels": 1, "seconds": (isolated_us + 0.5) * 1e-6},
        {"kind": "empty_events", "n_kernels": 0, "seconds": 0.5e-6},
        {"kind": "sync", "n_kernels": 0, "seconds": 7e-6},
    ]
    if chain_us is not None:
        rows += [
            {"kind": "chain_graph_device", "n_kernels": n, "seconds": 6e-6 + chain_us * 1e-6 * n}
            for n in COUNTS
        ]
    if eager_chain_us is not None:
        rows += [
            {"kind": "chain_eager_host", "n_kernels": n, "seconds": 3e-6 + eager_chain_us * 1e-6 * n}
            for n in COUNTS
        ]
    return rows


def test_h200_like_rows_take_the_fixed_latency_from_the_dependent_chain() -> None:
    p = fit_launch_table(gpu_launch_rows(1.10, 2.0, 2.55, eager_chain_us=11.0), is_gpu=True)
    assert p.launch_graph_gap_us == 0.0  # identical kernels pipeline faster than one isolated kernel
    assert p.kernel_fixed_latency_us == pytest.approx(2.55, rel=1e-6)
    assert p.launch_eager_us == pytest.approx(11.0, rel=1e-6)
    assert p.eager_tight is not None and p.eager_tight.params["slope"] == pytest.approx(7.8e-6, rel=1e-6)
    assert p.chain_graph is not None
    assert any("DEPENDENT chain" in n for n in p.notes)


@settings(max_examples=40, deadline=None)
@given(
    identical=st.floats(0.2, 5.0),
    isolated=st.floats(0.2, 5.0),
    extra=st.floats(0.0, 5.0),
)
def test_replayed_chain_costs_fixed_plus_gap_per_kernel(
    identical: float, isolated: float, extra: float
) -> None:
    chain = max(identical, isolated) + extra  # a dependent chain never beats identical pipelined kernels
    p = fit_launch_table(gpu_launch_rows(identical, isolated, chain), is_gpu=True)
    assert p.launch_graph_gap_us >= 0 and p.kernel_fixed_latency_us >= 0
    assert p.kernel_fixed_latency_us + p.launch_graph_gap_us == pytest.approx(chain, rel=1e-6, abs=1e-9)
    assert p.launch_graph_gap_us == pytest.approx(max(identical - min(isolated, identical), 0.0), abs=1e-9)


def test_old_tables_and_failed_captures_keep_the_identical_kernel_rule() -> None:
    old = fit_launch_table(gpu_launch_rows(3.0, 2.0, None), is_gpu=True)
    assert old.kernel_fixed_latency_us == pytest.approx(2.0, rel=1e-6)
    assert old.launch_graph_gap_us == pytest.approx(1.0, rel=1e-6)
    assert old.launch_eager_us == pytest.approx(7.8, rel=1e-6) and old.eager_tight is None
    failed_rows = gpu_launch_rows(3.0, 2.0, None)
    failed_rows.append(
        {"kind": "chain_graph_failed", "n_kernels": 0, "seconds": float("nan"), "error": "boom"}
    )
    failed = fit_launch_table(failed_rows, is_gpu=True)
    assert failed.kernel_fixed_latency_us == old.kernel_fixed_latency_us
    assert any("capture failed: boom" in n for n in failed.notes)


def test_gpu_build_uses_the_chain_and_the_cost_model_charges_its_slope() -> None:
    tables = synthetic_tables()
    tables.backend, tables.device_name, tables.dtypes = "cuda", "NVIDIA H200", ["bf16"]
    tables.launch = gpu_launch_rows(1.10, 2.0, 2.55, eager_chain_us=11.0)
    from tests.test_calibrate_fit import gemm_rows

    tables.gemm = gemm_rows(0.75, 200.0, 1.0, 989.4, 4200.0)
    profile, fits = build_profile(tables, "h200-chain")
    em = profile.empirical
    assert em.kernel_fixed_latency_us == pytest.approx(2.55, rel=1e-3)
    assert em.launch_eager_us == pytest.approx(11.0, rel=1e-3)
    assert {"launch_chain_graph", "launch_eager_tight"} <= set(fits)
    assert profile.fit_quality["launch_eager_tight"]["slope_us"] == pytest.approx(7.8, rel=1e-3)
    # Graph replay charges gap + fixed (+ negligible work) per tiny kernel: the measured chain slope.
    per_kernel_s = (
        CostParams.from_hardware(profile).fixed_s + LaunchParams.from_hardware(profile, "graph").gap_s
    )
    assert per_kernel_s == pytest.approx(2.55e-6, rel=1e-3)
    assert any("DEPENDENT chain" in a for a in profile.provenance.assumptions)


def test_cpu_chain_sets_dispatch_for_both_eager_and_fixed() -> None:
    tables = synthetic_tables()
    assert tables.launch is not None
    tables.launch += [
        {"kind": "chain_eager_host", "n_kernels": n, "seconds": 2e-6 + 6e-6 * n} for n in (25, 50, 100, 200)
    ]
    profile, _ = build_profile(tables, "cpu-chain")
    em = profile.empirical
    assert em.launch_eager_us == pytest.approx(6.0, rel=1e-3)
    assert em.kernel_fixed_latency_us == em.launch_eager_us
    assert em.launch_graph_gap_us == 0 and em.sync_us == 0


def _with_m1_rate(rate_gbps: float) -> list[dict]:
    rows = []
    for k, n in ((1024, 1024), (1024, 2816)):
        for m in (1, 4, 16):
            nbytes = 4.0 * (m * k + k * n + m * n)
            t = nbytes / (rate_gbps * 1e9) * (1.0 if n == 2816 else 1.3) * (1.0 if m == 1 else 0.5)
            rows.append(
                {
                    "dtype": "fp32",
                    "k": k,
                    "n": n,
                    "m": m,
                    "flops": 2.0 * m * k * n,
                    "bytes": nbytes,
                    "median_s": t,
                }
            )
    return rows


def test_m1_streaming_rate_is_the_median_memory_bound_gemm_over_shapes() -> None:
    rows = _with_m1_rate(12.9)  # one shape streams at 12.9 GB/s, the other 1.3x slower
    typical = float(np.median([12.9, 12.9 / 1.3]))
    assert m1_gemm_streaming_gbps(rows, "fp32") == pytest.approx(typical, rel=1e-9)  # M>1 rows ignored
    assert m1_gemm_streaming_gbps(rows, "bf16") == 0.0
    csv_like = [{k: str(v) for k, v in r.items()} for r in rows]  # as read back from the CSV
    assert m1_gemm_streaming_gbps(csv_like, "fp32") == pytest.approx(typical, rel=1e-9)


@given(sum_gbps=st.floats(1.0, 100.0), gemm_gbps=st.floats(0.0, 100.0))
def test_cpu_bandwidths_keep_the_sum_rate_for_elementwise(sum_gbps: float, gemm_gbps: float) -> None:
    memory, fraction = cpu_bandwidths(sum_gbps, gemm_gbps)
    plausible = gemm_gbps >= MIN_GEMM_STREAM_SHARE * sum_gbps
    assert memory == (gemm_gbps if plausible else sum_gbps) and 0.0 < fraction <= 1 / MIN_GEMM_STREAM_SHARE
    assert memory * fraction == pytest.approx(sum_gbps)


def test_cpu_build_streams_gemms_at_their_rate_and_elementwise_at_the_sum_plateau() -> None:
    tables = synthetic_tables()  # sum plateau 12 GB/s
    for gemm_gbps in (15.0, 9.0):  # one-row GEMMs streaming faster, then slower, than torch.sum
        tables.gemm = _with_m1_rate(gemm_gbps)
        typical = float(np.median([gemm_gbps, gemm_gbps / 1.3]))
        profile, _ = build_profile(tables, "cpu-gemm")
        assert profile.datasheet.memory_bandwidth_gbps == pytest.approx(typical, rel=1e-6)
        assert profile.empirical.memory_bandwidth_fraction == 1.0
        plateau = profile.empirical.elementwise_bandwidth_fraction * typical
        assert plateau == pytest.approx(12.0, rel=0.05)
    assert any(
        "elementwise_bandwidth_fraction = torch.sum plateau" in a for a in profile.provenance.assumptions
    )
    assert (
        np.isfinite(profile.empirical.cache_bandwidth_gbps) and profile.empirical.cache_effective_bytes > MIB
    )


def test_chain_runs_on_cpu_and_the_suite_writes_its_rows() -> None:
    torch = pytest.importorskip("torch")
    from moesim.calibrate.suites import launch
    from moesim.calibrate.suites.timing import Timer, resolve_device
    from tests.test_calibrate_runner import MICRO

    chain = launch.make_chain(torch, "cpu", torch.float32)
    out = chain(7 * launch.CHAIN_CYCLE + 3)
    assert out.shape == (launch.CHAIN_ROWS, launch.CHAIN_WIDTH) and bool(torch.isfinite(out).all())
    device = resolve_device("cpu", 1)
    rows = launch.run_launch(Timer(device, MICRO.flush_bytes), device, MICRO)
    chain_rows = [r for r in rows if r["kind"] == "chain_eager_host"]
    assert [r["n_kernels"] for r in chain_rows] == list(MICRO.launch_counts)
    assert all(r["seconds"] > 0 for r in chain_rows)
    p = fit_launch_table(rows, is_gpu=False)
    assert p.launch_eager_us > 0 and p.kernel_fixed_latency_us == p.launch_eager_us


@pytest.mark.slow
def test_tiny_real_cpu_calibration_takes_eager_cost_from_the_chain(tmp_path) -> None:
    pytest.importorskip("torch")
    from moesim.calibrate.suites.runner import calibrate
    from moesim.simulator.hardware.profile import load_profile
    from tests.test_calibrate_runner import TINY

    out = tmp_path / "cpu.toml"
    assert calibrate("cpu", out, plan=TINY, name="tiny-cpu").failures == {}
    profile = load_profile(str(out))
    em = profile.empirical
    assert em.launch_eager_us > 0 and em.kernel_fixed_latency_us == em.launch_eager_us
    assert 0 < em.elementwise_bandwidth_fraction <= 1
    assert "launch_eager_tight" in profile.fit_quality
    assert any("dependent chain" in a for a in profile.provenance.assumptions)
