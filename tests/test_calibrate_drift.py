"""The drift probe's correction: speed ratios, suite normalisation, the profile at another speed. Pure."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
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
    # No dispatch timing: unscaled; no streaming-GEMM timing: the GEMMs follow the in-cache GEMM.
    assert ratio == SpeedRatio(pytest.approx(0.5), pytest.approx(2.0), 1.0, pytest.approx(2.0))
    streamed = dataclasses.replace(BASE, stream_gemm_tflops=0.01)
    assert SpeedRatio.between(
        dataclasses.replace(streamed, stream_gemm_tflops=0.008), streamed
    ).stream_gemm == (pytest.approx(0.8))
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
    probed, _ = build_profile(dataclasses.replace(_slowed(0.7, 1.0), normalise_drift=True), "t")  # type: ignore[type-var]
    plateau = "elementwise_bandwidth_fraction"  # the sum plateau ÷ the GEMM stream on a CPU
    assert getattr(unprobed.empirical, plateau) == pytest.approx(
        0.7 * getattr(truth.empirical, plateau), rel=0.02
    )
    assert getattr(probed.empirical, plateau) == pytest.approx(getattr(truth.empirical, plateau), rel=0.02)
    figures = probed.fit_quality[drift.PROBE_KEY]
    assert figures["memory_memory_factor"] == pytest.approx(1 / 0.7)
    assert figures["memory_spread"] == pytest.approx(0.3)
    assert any(
        "the memory suite (memory x0.700) differed from the run's median" in a
        for a in probed.provenance.assumptions
    )
    assert not any(a.startswith("warning: the machine's") for a in truth.provenance.assumptions)
    reference = drift.reference_sample(probed)
    assert reference is not None and reference.label == "calibration median"
    assert (reference.memory_gbps, reference.compute_tflops) == (BASE.memory_gbps, BASE.compute_tflops)
    # Noiseless probes that differ between suites (the slow memory suite's): a step in the machine's speed, a
    # drift, not scatter. The run-wide scatter records it; the reference, the median of the run's probes,
    # carries the standard error of the scatter between successive probes (none here), not the step.
    assert figures["memory_noise"] == 0.0 and figures["memory_scatter"] > 0.0
    assert figures["memory_step_scatter"] == 0.0
    assert reference.memory_noise == pytest.approx(
        math.sqrt(math.pi / 2) * figures["memory_step_scatter"] / math.sqrt(figures["n_probes"])
    )
    # Without normalisation the same probes are recorded and warned about, and the figures are as measured.
    as_measured, _ = build_profile(_slowed(0.7, 1.0), "t")  # type: ignore[arg-type]  # the default
    assert as_measured.empirical == unprobed.empirical
    figures = as_measured.fit_quality[drift.PROBE_KEY]
    assert figures["normalised"] == 0.0 and figures["memory_memory_factor"] == 1.0
    assert any("those figures carry it" in a for a in as_measured.provenance.assumptions)


def test_a_drift_counts_only_beyond_three_standard_errors_of_the_probes_noise() -> None:
    noisy = dataclasses.replace(BASE, memory_noise=0.03, compute_noise=0.01, dispatch_noise=0.05)
    assert drift.threshold(noisy, noisy, "memory") == pytest.approx(3 * 2**0.5 * 0.03)
    assert drift.threshold(noisy, noisy, "compute") == pytest.approx(3 * 2**0.5 * 0.01)
    assert drift.threshold(BASE, BASE, "memory") == drift.MIN_DRIFT  # a noiseless probe: the floor
    slower = dataclasses.replace(
        noisy, memory_gbps=0.9 * BASE.memory_gbps, compute_tflops=0.9 * BASE.compute_tflops
    )
    kept = drift.beyond_noise(SpeedRatio.between(slower, noisy), slower, noisy)
    assert kept.memory == 1.0  # 10% < 12.7%: within the probe's noise, not corrected
    assert kept.compute == pytest.approx(0.9)  # 10% > 4.2%: corrected
    d = drift.suite_drift("gemm", noisy, slower)
    assert d.parts == ("memory", "compute") and d.drifted and d.drift == pytest.approx(0.1)
    assert d.threshold == pytest.approx(3 * 2**0.5 * 0.01)  # the part that moved most beyond its threshold
    assert not drift.suite_drift("moe", noisy, slower).drifted  # diagnostics follow no part
    assert drift.suite_parts("launch") == ("dispatch",)
    assert drift.suite_parts("launch", is_gpu=True) == ("dispatch", "compute")


def test_the_noise_of_a_median_is_its_standard_error() -> None:
    """median_noise estimates the spread of the median of n draws from those n draws alone."""
    rng = np.random.default_rng(0)
    draws = rng.normal(1.0, 0.05, size=(4000, 9))
    observed = float(np.std(np.median(draws, axis=1)))
    estimated = float(np.median([drift.median_noise(list(row)) for row in draws]))
    assert estimated == pytest.approx(observed, rel=0.15)
    assert drift.median_noise([2.0] * 9) == 0.0
    samples = [dataclasses.replace(BASE, memory_gbps=v, memory_noise=0.01) for v in (11.0, 12.0, 13.0, 14.0)]
    assert drift.median_sample(samples).memory_noise == pytest.approx(0.01 / 2)  # four probes: half the noise


def test_profile_at_speed_scales_each_term_by_its_part() -> None:
    cpu, _ = build_profile(synthetic_tables(), "t")
    fast = drift.at_speed(cpu, SpeedRatio(2.0, 0.5, 0.25, 0.8))
    em, base = fast.empirical, cpu.empirical
    assert fast.memory_bandwidth_bytes_per_s == pytest.approx(2 * cpu.memory_bandwidth_bytes_per_s)
    # The GEMMs' arithmetic follows the GEMM over streamed weights; a cache read the in-cache GEMM's core.
    assert fast.datasheet.peak_dense_tflops["fp32"] == pytest.approx(
        0.8 * cpu.datasheet.peak_dense_tflops["fp32"]
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
    sample = ProbeSample("after:gemm", 3.5, 12.5, 0.061, 0.07, 0.12, 4.5, 0.03, 0.01, 0.02, 0.04)
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
    weight_bytes = 2 * plan.stream_k * plan.stream_n  # bf16: the streaming GEMM is a weight stream on a GPU
    stream_s = plan.stream_inner * weight_bytes / (ds.memory_bandwidth_gbps * 1e9)
    assert 1e-3 < read_s < 0.05 and 1e-3 < gemm_s < 0.05 and 1e-3 < stream_s < 0.05
    assert plan.read_bytes >= 4 * ds.last_level_cache_bytes
    assert plan.stream_pool_bytes >= 4 * ds.last_level_cache_bytes  # every call streams its weights
    assert plan.read_bytes + plan.stream_pool_bytes < 0.1 * ds.memory_capacity_bytes
    assert recorded_plan(True, plan.figures()) == plan  # what a profile records rebuilds the same probe


def test_the_cpu_probe_reads_past_the_last_level_cache() -> None:
    plan = probe_plan(False, 32 * 2**20)
    assert plan.read_bytes >= 4 * 32 * 2**20 and plan.dtype == "fp32"
    assert 3 * plan.gemm_n**2 * 4 < 32 * 2**20  # the GEMM's operands stay in cache: arithmetic-bound
    assert plan.stream_pool_bytes >= 2 * 32 * 2**20  # the streaming GEMM's weights come from DRAM
    assert plan.stream_m * plan.stream_k * plan.stream_n * 2 / (11e9) * plan.stream_inner < 0.01


class DeviceClock:
    """A stand-in for the CUDA-event timer: every timed batch of a kernel lasts a scripted device time per
    call; it records what the probe asked it to time (no GPU here: the CUDA path's structure only)."""

    def __init__(self, per_call_s: dict[str, float]) -> None:
        import torch

        self.torch = torch
        self.per_call_s = per_call_s
        self.calls: list[tuple[str, str, int]] = []
        self.syncs = 0

    def _name(self, fn: object) -> str:
        return str(getattr(fn, "__name__", "")).strip("_")

    def time_once(self, fn: Any, inner: int = 1, before: Any = None) -> float:
        self.calls.append(("device", self._name(fn), inner))
        return self.per_call_s[self._name(fn)]

    def host_time(self, fn: Any, inner: int) -> float:
        self.calls.append(("host", self._name(fn), inner))
        return self.per_call_s[self._name(fn)]

    def sync(self) -> None:
        self.syncs += 1


def test_the_gpu_probe_times_each_kernel_in_its_own_warmed_block_with_device_events() -> None:
    """On a GPU the read and the GEMM are device-timed batches (`Timer.time_once`: CUDA events behind a spin
    kernel) of read_inner / gemm_inner calls, the dispatch burst host-timed; each block follows one untimed
    warm-up and a sync. Run here on CPU tensors with a scripted clock: unverified on a real GPU."""
    from moesim.calibrate.suites.probe import DISPATCH_OPS, Probe, ProbePlan
    from moesim.calibrate.suites.timing import DeviceInfo

    pytest.importorskip("torch")
    gpu = DeviceInfo("cuda", "cuda", "NVIDIA H200", "cpu", 50 * 2**20, 0.0, 141e9, 132, 1)
    shaped = dataclasses.replace(
        probe_plan(True, gpu.last_level_cache_bytes),
        read_bytes=2**20,
        gemm_n=64,
        stream_k=64,
        stream_n=32,
        stream_pool_bytes=3 * 64 * 32 * 2,
    )
    clock = DeviceClock({"read": 2e-6, "gemm": 1e-6, "stream_gemm": 4e-6, "dispatch": 5e-4})
    probe = Probe(clock, gpu, shaped)  # type: ignore[arg-type]
    syncs_before = clock.syncs
    sample = probe.sample("before:gemm")
    plan: ProbePlan = probe.plan
    assert clock.calls == (
        [("device", "read", plan.read_inner)] * plan.read_repeats
        + [("device", "gemm", plan.gemm_inner)] * plan.gemm_repeats
        + [("device", "stream_gemm", plan.stream_inner)] * plan.stream_repeats
        + [("host", "dispatch", 1)] * plan.dispatch_repeats
    )
    assert clock.syncs - syncs_before == 4  # one after each kernel's warm-up
    assert len(probe._pool) == 3  # the pool the plan asks for, cycled call by call
    assert sample.stream_gemm_tflops == pytest.approx(2 * 16 * 64 * 32 / 4e-6 / 1e12)
    assert sample.memory_gbps == pytest.approx(2**20 / 2e-6 / 1e9)
    assert sample.compute_tflops == pytest.approx(2 * 64**3 / 1e-6 / 1e12)
    assert sample.dispatch_us == pytest.approx(5e-4 / DISPATCH_OPS * 1e6)
    assert sample.memory_noise == sample.compute_noise == 0.0  # a steady clock: no noise
    assert probe._a.dtype == probe.timer.torch.bfloat16  # the GPU plan's GEMM dtype
    probe.close()


def test_a_profile_as_measured_is_corrected_against_the_speed_its_terms_were_measured_at() -> None:
    """Fitted as measured, each part's reference is the probe during the suite whose figures it scales (on a
    CPU the memory stream and the peaks: the GEMM suite; dispatch: the launch suite); normalised, the run's
    median, which is the speed every figure was brought to."""
    slow_gemm = probes({"gemm": (0.8, 0.9), "launch": (1.0, 1.0)})
    as_measured, _ = build_profile(dataclasses.replace(synthetic_tables(), probes=slow_gemm), "t")
    reference = drift.reference_sample(as_measured)
    assert reference is not None and reference.label == "calibration, during each part's suite"
    assert reference.memory_gbps == pytest.approx(0.8 * BASE.memory_gbps)  # the GEMM suite's one-row stream
    assert reference.compute_tflops == pytest.approx(BASE.compute_tflops)  # the memory suite's cache plateau
    assert drift.MEASURED_IN[False]["stream_gemm"] == "gemm"
    normalised, _ = build_profile(
        dataclasses.replace(synthetic_tables(), probes=slow_gemm, normalise_drift=True), "t"
    )
    median = drift.reference_sample(normalised)
    assert median is not None and median.label == "calibration median"
    assert median.memory_gbps == pytest.approx(BASE.memory_gbps)


def _scattered(level: float, n: int = 31) -> list[ProbeSample]:
    """`n` readings of a machine at `level` × the base memory speed, scattering ±6% from one to the next
    (one probe's noise stated as 1%, as the shared VM's probes state 2-4% and scatter 6-21%)."""
    return [
        dataclasses.replace(at(f"row {i}", level * (1.06 if i % 2 else 0.94)), memory_noise=0.01)
        for i in range(n)
    ]


def test_one_probe_s_scatter_is_not_drift_but_a_sustained_change_is() -> None:
    """A reading 30% fast beside one row is the probe's scatter: the row's speed is the median of the window
    around it and stays within the scatter, uncorrected; the whole run at 0.6 × the calibration's speed is a
    drift far beyond the scatter and is corrected. Gated on one probe's stated noise (1%), the first would be
    corrected by 30%."""
    calibration = drift.with_scatter_noise(BASE, {"memory": 0.06}, 2)
    readings = _scattered(1.0)
    readings[15] = dataclasses.replace(readings[15], memory_gbps=BASE.memory_gbps * 1.3)
    speeds = drift.window_speeds(readings)
    assert drift.scatter(readings)["memory"] > 0.05
    single = SpeedRatio.between(readings[15], calibration)
    assert drift.beyond_noise(single, readings[15], calibration).memory == pytest.approx(1.3)
    steady = drift.beyond_noise(SpeedRatio.between(speeds[15], calibration), speeds[15], calibration)
    assert steady.memory == 1.0
    assert abs(speeds[15].memory_gbps / BASE.memory_gbps - 1.0) <= 0.06 + 1e-12  # within the scatter
    slow = drift.window_speeds(_scattered(0.6))
    corrected = drift.beyond_noise(SpeedRatio.between(slow[15], calibration), slow[15], calibration)
    assert corrected.memory == pytest.approx(slow[15].memory_gbps / BASE.memory_gbps)
    assert corrected.memory < 0.7


def test_the_scatter_is_the_spread_between_probes_not_their_own_noise() -> None:
    steady = [dataclasses.replace(at("p"), memory_noise=0.2) for _ in range(8)]
    assert drift.scatter(steady)["memory"] == 0.0  # identical readings do not scatter, however noisy each
    assert drift.scatter(_scattered(1.0, 8))["memory"] == pytest.approx(
        drift.rel_iqr([r.memory_gbps for r in _scattered(1.0, 8)]) * drift.SIGMA_PER_IQR
    )
    assert drift.scatter([at("p")])["memory"] == 0.0  # one probe: no spread to measure


def _ramp(start: float, end: float, n: int, jitter: float) -> list[ProbeSample]:
    """`n` readings of a machine whose memory speed ramps from `start` to `end` × the base, each reading
    off by ±`jitter` in turn (noise of its repeats stated as 1%)."""
    return [
        dataclasses.replace(
            at(f"row {i}", (start + (end - start) * i / (n - 1)) * (1 + jitter if i % 2 else 1 - jitter)),
            memory_noise=0.01,
        )
        for i in range(n)
    ]


def test_the_step_scatter_is_the_jitter_between_neighbours_not_a_drift_over_the_run() -> None:
    """A machine ramping 0.8 -> 1.2 × its speed with ±2% jitter: the run-wide scatter counts the ramp (over
    10%), the scatter between successive readings only the jitter; for readings that share a probe with
    their neighbour the same steps stand for √2 times the scatter."""
    readings = _ramp(0.8, 1.2, 31, 0.02)
    steps = [abs(math.log(b.memory_gbps / a.memory_gbps)) for a, b in itertools.pairwise(readings)]
    independent = drift.step_scatter(readings)["memory"]
    assert independent == pytest.approx(float(np.median(steps)) / (drift.MEDIAN_ABS_NORMAL * math.sqrt(2)))
    assert drift.step_scatter(readings, shared=True)["memory"] == pytest.approx(independent * math.sqrt(2))
    # The ramp adds about nothing to the steps: as the same jitter on a steady machine (whose ±2% in turn
    # steps by 4%), while the run-wide scatter is the ramp's.
    steady_jitter = drift.step_scatter(_ramp(1.0, 1.0, 31, 0.02))["memory"]
    assert independent == pytest.approx(steady_jitter, rel=0.05) and independent < 0.05
    assert drift.scatter(readings)["memory"] > 0.10
    steady = [dataclasses.replace(at("p"), memory_noise=0.2) for _ in range(8)]
    assert drift.step_scatter(steady)["memory"] == 0.0
    assert drift.step_scatter(readings[:2])["memory"] == 0.0  # fewer than three readings: unknown


def test_rows_that_drift_over_the_run_are_corrected_and_a_steady_run_is_not() -> None:
    """Validation readings ramping 1.0 -> 0.7 × the calibration's speed (±2% jitter): the rows at the slow end
    are corrected towards the speed their window measured. The run-wide scatter (the ramp itself) as the
    gate's noise would leave them uncorrected. A steady run with the same jitter is left as calibrated."""
    calibration = drift.with_scatter_noise(BASE, {"memory": 0.02}, 2)
    readings = _ramp(1.0, 0.7, 31, 0.02)
    speeds = drift.window_speeds(readings)
    last = drift.beyond_noise(SpeedRatio.between(speeds[-1], calibration), speeds[-1], calibration)
    assert last.memory == pytest.approx(speeds[-1].memory_gbps / BASE.memory_gbps)
    assert last.memory < 0.8
    run_wide = drift.with_scatter_noise(speeds[-1], drift.scatter(readings), 3)
    wide_gate = drift.with_scatter_noise(BASE, drift.scatter(readings), 2)
    assert drift.beyond_noise(SpeedRatio.between(run_wide, wide_gate), run_wide, wide_gate).memory == 1.0
    steady = drift.window_speeds(_ramp(1.0, 1.0, 31, 0.02))
    assert all(
        drift.beyond_noise(SpeedRatio.between(s, calibration), s, calibration).memory == 1.0 for s in steady
    )


def test_a_suite_is_repeated_on_drift_beyond_the_run_s_probe_scatter_not_on_one_probe_s_noise() -> None:
    """A suite whose two probes differ by 10%, each stating 1% noise: after steady probes that is drift
    (repeat); after probes that jump ±8% from one to the next it is within their scatter (no repeat); with
    fewer than three probes so far the probes' own noise decides, as before."""
    before = dataclasses.replace(at("before:gemm"), memory_noise=0.01)
    after = dataclasses.replace(at("after:gemm", 1.1), memory_noise=0.01)
    steady = [dataclasses.replace(at("p"), memory_noise=0.01) for _ in range(6)]
    jumpy = _ramp(1.0, 1.0, 6, 0.08)
    assert drift.suite_drift_in_run("gemm", before, after, steady).drifted
    assert not drift.suite_drift_in_run("gemm", before, after, jumpy).drifted
    assert drift.suite_drift_in_run("gemm", before, after, []).drifted
    # The probes recorded keep their own noise: only the gate's copies carry the floor.
    floored = drift.suite_drift_in_run("gemm", before, after, jumpy)
    assert floored.before.memory_noise > 0.05 and before.memory_noise == 0.01


def rounds_of(
    rows: list[dict[str, Any]], speeds: list[float], noise: float, seed: int = 0
) -> list[dict[str, Any]]:
    """GEMM rows timed once per round on a machine running at `speeds[r]` of its speed in round r, each timing
    and each in-suite reference reading with independent relative `noise`, as the CPU suite writes them."""
    rng = np.random.default_rng(seed)
    references = [float(0.011 * s * (1 + noise * rng.standard_normal())) for s in speeds]
    out = []
    for row in rows:
        times = [float(row["median_s"] / s * (1 + noise * rng.standard_normal())) for s in speeds]
        out.append(
            row
            | {
                "median_s": float(np.median(times)),
                "round_s": ";".join(repr(t) for t in times),
                "reference_tflops": ";".join(repr(r) for r in references),
            }
        )
    return out


def test_a_gemm_suite_whose_machine_ramps_is_brought_back_to_flat_by_its_in_suite_reference() -> None:
    """The machine speeds up 40% over the suite's seven rounds: every point's rounds, corrected by the
    reference read in the same round, agree again, each point lands at the suite's median speed, and the
    profile's streaming rate is the one a machine steady at that speed gives."""
    from moesim.calibrate.fits.gemm import at_suite_reference

    truth = synthetic_tables()
    ramp = [0.8, 0.86, 0.92, 1.0, 1.05, 1.12, 1.2]
    ramped = rounds_of(truth.gemm or [], ramp, noise=0.02)
    rows, figures = at_suite_reference(ramped)
    assert figures["reference_rounds"] == 7 and figures["reference_rounds_corrected"] >= 5
    assert figures["reference_stream_gemm_tflops"] == pytest.approx(0.011, rel=0.02)
    raw_spread = [r["iqr_s"] / r["median_s"] for r in drift_rows(ramped)]
    flat_spread = [r["iqr_s"] / r["median_s"] for r in rows]
    assert max(flat_spread) < 0.08 < 0.2 < min(raw_spread)  # noise alone (2% + 2%) against a 40% ramp
    for row, timed, true in zip(rows, ramped, truth.gemm or [], strict=True):
        assert row["median_s"] == pytest.approx(true["median_s"], rel=0.04)
        assert row["measured_s"] == timed["median_s"]  # the time as timed is kept beside it
    profile, _ = build_profile(dataclasses.replace(truth, gemm=ramped), "ramped")
    steady, _ = build_profile(truth, "steady")
    assert profile.datasheet.memory_bandwidth_gbps == pytest.approx(
        steady.datasheet.memory_bandwidth_gbps, rel=0.02
    )
    assert profile.fit_quality["gemm_reference"] == figures


def drift_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with each point's IQR over its rounds as timed (what the suite states without a reference)."""
    from moesim.calibrate.fits.gemm import readings

    out = []
    for row in rows:
        times = readings(row["round_s"])
        out.append(row | {"iqr_s": drift.rel_iqr(times) * float(np.median(times))})
    return out


def test_a_gemm_suite_on_a_steady_machine_is_left_as_timed() -> None:
    """References that scatter 1% around a steady speed correct no round: every point keeps its time as
    timed, and the profile is the one fitted without the references."""
    from moesim.calibrate.fits.gemm import at_suite_reference

    truth = synthetic_tables()
    steady = rounds_of(truth.gemm or [], [1.0] * 7, noise=0.01, seed=3)
    rows, figures = at_suite_reference(steady)
    assert figures["reference_rounds_corrected"] == 0
    assert [r["median_s"] for r in rows] == [r["median_s"] for r in steady]
    plain = [{k: v for k, v in r.items() if k not in ("round_s", "reference_tflops")} for r in steady]
    with_reference, _ = build_profile(dataclasses.replace(truth, gemm=steady), "steady")
    without, _ = build_profile(dataclasses.replace(truth, gemm=plain), "plain")
    assert with_reference.empirical == without.empirical
    assert with_reference.datasheet == without.datasheet


def test_the_in_suite_scatter_reads_a_ramp_as_drift_and_a_jitter_as_noise() -> None:
    ramp = [12.0 * 1.05**i for i in range(7)]
    jitter = [12.0 * (1.03 if i % 2 else 0.97) for i in range(7)]
    assert drift.trend_free_scatter(ramp) == pytest.approx(0.0, abs=1e-12)
    assert drift.trend_free_scatter(jitter) > 0.03
    assert drift.reference_factors(ramp) == pytest.approx(
        [r / ramp[3] if i != 3 else 1.0 for i, r in enumerate(ramp)]
    )
    assert drift.reference_factors(jitter) == [1.0] * 7  # within three of its own standard errors
    assert drift.reference_factors(ramp[:3]) == [1.0] * 3  # too few readings to know their noise


def test_validation_corrects_against_the_speed_the_gemm_suite_s_points_were_brought_to() -> None:
    profile, _ = build_profile(
        dataclasses.replace(
            synthetic_tables(),
            gemm=rounds_of(synthetic_tables().gemm or [], [0.8, 0.86, 0.92, 1.0, 1.05, 1.12, 1.2], 0.02),
            probes=probes({}),
        ),
        "ramped",
    )
    reference = drift.reference_sample(profile)
    assert reference is not None
    in_suite = profile.fit_quality["gemm_reference"]["reference_stream_gemm_tflops"]
    assert reference.stream_gemm_tflops == in_suite
    assert in_suite != profile.fit_quality[drift.PROBE_KEY]["gemm_during_stream_gemm_tflops"]
