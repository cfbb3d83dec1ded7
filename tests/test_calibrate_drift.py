"""The drift probe's correction: speed ratios, suite normalisation, the profile at another speed. Pure."""

from __future__ import annotations

import dataclasses

import pytest

from moesim.calibrate.fits import drift
from moesim.calibrate.fits.build import build_profile
from moesim.calibrate.fits.drift import ProbeSample, SpeedRatio
from moesim.calibrate.suites.probe import probe_plan, recorded_plan
from moesim.simulator.hardware.profile import list_profiles, load_profile
from tests.test_calibrate_fit import synthetic_tables

BASE = ProbeSample("base", 0.0, memory_gbps=12.0, compute_tflops=0.06)


def at(label: str, memory: float = 1.0, compute: float = 1.0) -> ProbeSample:
    """A probe of the base machine running at `memory` / `compute` times its speed."""
    return ProbeSample(label, 0.0, BASE.memory_gbps * memory, BASE.compute_tflops * compute)


def probes(slow: dict[str, tuple[float, float]]) -> list[ProbeSample]:
    """Before/after probes of every suite, at the (memory, compute) speed given for it (default: full)."""
    out = []
    for suite in ("memory", "launch", "gemm", "moe"):
        memory, compute = slow.get(suite, (1.0, 1.0))
        out += [at(f"before:{suite}", memory, compute), at(f"after:{suite}", memory, compute)]
    return out


def test_speed_ratio_is_now_over_reference() -> None:
    ratio = SpeedRatio.between(at("now", 0.5, 2.0), BASE)
    assert ratio == SpeedRatio(pytest.approx(0.5), pytest.approx(2.0), 1.0)  # no dispatch timing: unscaled
    slow_host, host = dataclasses.replace(BASE, dispatch_us=8.0), dataclasses.replace(BASE, dispatch_us=4.0)
    assert SpeedRatio.between(slow_host, host).dispatch == 0.5
    assert drift.drift_between(at("a"), at("b", 1.0, 1.2)) == pytest.approx(0.2)
    assert drift.spread([at("a", 0.9), at("b", 1.0), at("c", 1.1)])["memory"] == pytest.approx(0.2)


def test_a_suite_that_ran_slow_is_brought_to_the_run_median() -> None:
    median, drifts = drift.suite_drifts(probes({"memory": (0.5, 1.0)}))
    assert median is not None and median.memory_gbps == pytest.approx(BASE.memory_gbps)
    assert drifts["memory"].factor == SpeedRatio(pytest.approx(2.0), pytest.approx(1.0))
    assert drifts["gemm"].factor == drift.SAME_SPEED
    assert all(d.drift == 0.0 for d in drifts.values())


def test_gemm_rows_follow_the_part_that_bounds_them() -> None:
    rows = [
        {"m": 1, "flops": 2e6, "bytes": 4e9, "median_s": 1.0, "iqr_s": 0.1},  # a weight stream
        {"m": 512, "flops": 6e12, "bytes": 8e6, "median_s": 1.0, "iqr_s": 0.1},  # arithmetic
    ]
    stream, arithmetic = drift.normalise_gemm_rows(rows, SpeedRatio(2.0, 0.5), BASE)
    assert stream["median_s"] == pytest.approx(0.5, rel=1e-3)  # memory twice as fast at the median
    assert arithmetic["median_s"] == pytest.approx(2.0, rel=1e-3)  # cores half as fast
    assert arithmetic["tflops"] == pytest.approx(6e12 / 2.0 / 1e12, rel=1e-3)
    assert drift.normalise_gemm_rows(rows, drift.SAME_SPEED, BASE) == [
        r | {"tflops": r["flops"] / 1e12, "gbps": r["bytes"] / 1e9} for r in rows
    ]


def test_launch_rows_follow_the_host_and_a_gpus_device_rows_its_compute() -> None:
    rows = [{"kind": "eager_host", "seconds": 1.0}, {"kind": "graph_device", "seconds": 1.0}]
    gpu = drift.normalise_launch_rows(rows, SpeedRatio(1.0, 2.0, 4.0), is_gpu=True)
    cpu = drift.normalise_launch_rows(rows, SpeedRatio(1.0, 2.0, 4.0), is_gpu=False)
    assert [r["seconds"] for r in gpu] == [0.25, 0.5]
    assert [r["seconds"] for r in cpu] == [0.25, 0.25]  # on a CPU every launch row is host dispatch


def _slowed(memory: float, compute: float) -> object:
    """The synthetic tables with the memory suite measured on a machine `memory` / `compute` times as fast."""
    tables = synthetic_tables()
    assert tables.memory is not None
    slow_memory = [
        r | {"bandwidth_gbps": r["bandwidth_gbps"] * (memory if r["size_bytes"] > 64 * 2**20 else compute)}
        if r["kind"] == "working_set"
        else r
        for r in tables.memory
    ]
    return dataclasses.replace(tables, memory=slow_memory, probes=probes({"memory": (memory, compute)}))


def test_a_slow_memory_suite_does_not_bend_the_profile() -> None:
    truth, _ = build_profile(dataclasses.replace(synthetic_tables(), probes=probes({})), "t")
    unprobed, _ = build_profile(dataclasses.replace(_slowed(0.7, 1.0), probes=[]), "t")  # type: ignore[type-var]
    probed, _ = build_profile(_slowed(0.7, 1.0), "t")  # type: ignore[arg-type]
    plateau = "elementwise_bandwidth_fraction"  # the sum plateau ÷ the GEMM stream on a CPU
    assert getattr(unprobed.empirical, plateau) == pytest.approx(
        0.7 * getattr(truth.empirical, plateau), rel=0.02
    )
    assert getattr(probed.empirical, plateau) == pytest.approx(getattr(truth.empirical, plateau), rel=0.02)
    figures = probed.fit_quality[drift.PROBE_KEY]
    assert figures["memory_memory_factor"] == pytest.approx(1 / 0.7)
    assert figures["memory_spread"] == pytest.approx(0.3)
    assert any(
        a.startswith("warning: the machine's memory speed moved 30.0%") for a in probed.provenance.assumptions
    )
    assert not any(a.startswith("warning: the machine's") for a in truth.provenance.assumptions)
    assert drift.reference_sample(probed) == ProbeSample(
        "calibration median", 0.0, BASE.memory_gbps, BASE.compute_tflops
    )


def test_profile_at_speed_scales_each_term_by_its_part() -> None:
    cpu, _ = build_profile(synthetic_tables(), "t")
    fast = drift.at_speed(cpu, SpeedRatio(2.0, 0.5, 0.25))
    em, base = fast.empirical, cpu.empirical
    assert fast.memory_bandwidth_bytes_per_s == pytest.approx(2 * cpu.memory_bandwidth_bytes_per_s)
    assert fast.datasheet.peak_dense_tflops["fp32"] == pytest.approx(
        0.5 * cpu.datasheet.peak_dense_tflops["fp32"]
    )
    assert em.cache_bandwidth_gbps == pytest.approx(0.5 * base.cache_bandwidth_gbps)
    # A CPU kernel's fixed cost is its dispatch on the same core: both follow the host part.
    assert em.kernel_fixed_latency_us == pytest.approx(4 * base.kernel_fixed_latency_us)
    assert em.launch_eager_us == pytest.approx(4 * base.launch_eager_us)
    # Byte counts and shapes are not speeds.
    assert em.cache_effective_bytes == base.cache_effective_bytes
    assert em.gemm_efficiency == base.gemm_efficiency
    assert drift.at_speed(cpu, drift.SAME_SPEED) is cpu
    gpu = load_profile("h200")
    slow = drift.at_speed(gpu, SpeedRatio(1.0, 0.5, 0.25)).empirical
    assert slow.launch_eager_us == pytest.approx(4 * gpu.empirical.launch_eager_us)  # the host
    assert slow.sync_us == pytest.approx(4 * gpu.empirical.sync_us)
    assert slow.kernel_fixed_latency_us == pytest.approx(
        2 * gpu.empirical.kernel_fixed_latency_us
    )  # the device
    assert slow.launch_graph_gap_us == pytest.approx(2 * gpu.empirical.launch_graph_gap_us)


def test_a_probe_sample_round_trips_through_its_csv_row() -> None:
    sample = ProbeSample("after:gemm", 3.5, 12.5, 0.061, 0.07, 0.12, 4.5, 0.03)
    assert ProbeSample.from_row(sample.as_row()) == sample


@pytest.mark.parametrize(
    "name", [n for n in list_profiles() if load_profile(n).datasheet.device_kind == "gpu"]
)
def test_the_gpu_probe_is_short_and_streams_past_the_cache_on_every_bundled_gpu(name: str) -> None:
    """The GPU path's sizes, checked without a GPU: each timed batch lasts 1-50 ms at the datasheet's rates
    (long enough for CUDA events, short enough to run beside every row) and the read is ≥ 4× the L2."""
    ds = load_profile(name).datasheet
    plan = probe_plan(True, ds.last_level_cache_bytes)
    read_s = plan.read_inner * plan.read_bytes / (ds.memory_bandwidth_gbps * 1e9)
    gemm_s = plan.gemm_inner * 2 * plan.gemm_n**3 / (ds.peak_dense_tflops["bf16"] * 1e12)
    assert 1e-3 < read_s < 0.05 and 1e-3 < gemm_s < 0.05
    assert plan.read_bytes >= 4 * ds.last_level_cache_bytes
    assert plan.read_bytes < 0.05 * ds.memory_capacity_bytes
    assert recorded_plan(True, plan.figures()) == plan  # what a profile records rebuilds the same probe


def test_the_cpu_probe_reads_past_the_last_level_cache() -> None:
    plan = probe_plan(False, 32 * 2**20)
    assert plan.read_bytes >= 4 * 32 * 2**20 and plan.dtype == "fp32"
    assert 3 * plan.gemm_n**2 * 4 < 32 * 2**20  # the GEMM's operands stay in cache: arithmetic-bound
