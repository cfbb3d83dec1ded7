"""Machine-speed drift, measured by the probe (`calibrate/suites/probe.py`), and the correction it supports. Pure.

A shared machine's speed moves: neighbours contend for DRAM bandwidth and for the cores, a GPU's clocks move
with power and heat. The probe times the same memory read, the same small GEMM and the same burst of tiny ops
again and again; the ratio of two of its rates is a **machine-speed ratio** (dimensionless; 1 = as fast as the
reference), measured for three parts of the machine separately:

- `memory`: DRAM/HBM streaming speed now ÷ then (the probe's read). It scales the profile's streaming
  bandwidth (`datasheet.memory_bandwidth_gbps`; element-wise kernels stream at a fixed fraction of it);
- `compute`: core speed now ÷ then (the probe's in-cache GEMM). It scales what the arithmetic units' clock
  decides: the dense peaks, the last-level-cache bandwidth (a cache read runs at the core's load rate), and
  on a GPU the device-side kernel fixed latency and gaps;
- `dispatch`: host speed now ÷ then (the probe's burst of tiny eager ops, per-op host time then ÷ now). It
  scales the host's per-op costs: eager launch (on a CPU: operator dispatch, which is also a CPU kernel's
  fixed latency), graph launch and sync. On the shared 2-core VM measured, this part moved most (16-24% over
  a quick calibration, against 5-13% for memory).

Byte counts (cache capacity, the half-bandwidth transfer) and dimensionless shapes (GEMM efficiency,
fractions) are not speeds and are never scaled. Nothing here is fitted: each ratio is two measurements of
the same kernel, and the correction is the profile's own terms times the ratio of their kind.

Two uses. Calibration normalises each suite to the probe's median over the run (`normalisation`), so a suite
that ran while the machine was slow does not bend the profile; the profile records the median and the
probe's spread (`record`). Validation predicts each row with the profile at the speed the probe measured
beside that row (`at_speed`), beside the plain prediction.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # light at import: `calibrate/request.py` reads DRIFT_NORMALISATION for the CLI's default
    from moesim.simulator.hardware.profile import HardwareProfile

# A drift counts only when it exceeds NOISE_MULTIPLE standard errors of the difference of the two probes'
# medians (each probe states its own noise: `ProbeSample.*_noise`, from its repeats' IQR), and at least
# MIN_DRIFT. Three standard errors: a steady machine with normal noise crosses it in 0.3% of pairs, so the
# repeat rule and the corrections do not fire on the probe's own scatter. The 2% floor is a stated choice, not
# a measurement: a GPU probe's noise can be a fraction of a percent, and a smaller drift is not worth a repeated
# suite. On the shared 2-core EPYC VM measured (load 6-16 from six neighbours), one probe's noise was 1.9-3.8%
# (memory), 3.3-5.9% (GEMM) and 5.1-8.5% (dispatch): suite thresholds of 9-60%.
NOISE_MULTIPLE = 3.0
MIN_DRIFT = 0.02
# Whether `calibrate` brings each suite's figures to the run's median probe speed by default: no. Evidence on
# the shared 2-core EPYC VM: with the first probe (interleaved kernels, no noise gate) normalisation made the
# memory plateau's spread over three calibrations worse (12.0% raw, 17.9% normalised) and two of three
# validations' MAPE worse; gated by the probe's noise it changed no figure in any calibration measured since
# (under load the noise set thresholds of 9-60%, and no suite's speed moved that far from the run's median). A
# correction not shown to help is off: profiles hold their figures as measured, the probes are recorded
# beside them, and `benchmarks/calibration_repeatability.py` scores both fits of every run it makes.
DRIFT_NORMALISATION = False
PROBE_KEY = "drift_probe"  # the profile's fit_quality table holding the calibration's probe figures
# The profile's fit_quality table of the GEMM suite's in-suite reference (`fits.gemm.at_suite_reference`).
GEMM_REFERENCE_KEY = "gemm_reference"


@dataclass(frozen=True)
class ProbeSample:
    """One probe: the machine's memory, core, dispatch and weight-streaming GEMM speed at one moment, with the
    repeats' relative IQR and each median's noise."""

    label: str  # where in the run: e.g. "before:memory", "after:gemm", "row"
    at_s: float  # seconds since the probe was set up
    memory_gbps: float  # the read's rate
    compute_tflops: float  # the in-cache GEMM's rate
    memory_rel_iqr: float = 0.0
    compute_rel_iqr: float = 0.0
    dispatch_us: float = 0.0  # host time per tiny eager op (0: not measured)
    dispatch_rel_iqr: float = 0.0
    # Relative standard error of each median (0: not stated, e.g. a probe written before the probe had it).
    memory_noise: float = 0.0
    compute_noise: float = 0.0
    dispatch_noise: float = 0.0
    # The small-M GEMM over weights streamed from DRAM (the validation steps' and the GEMM suite's regime);
    # 0: not measured (a probe recorded before the probe timed it).
    stream_gemm_tflops: float = 0.0
    stream_gemm_rel_iqr: float = 0.0
    stream_gemm_noise: float = 0.0

    def noise(self, part: str) -> float:
        """The relative standard error of this probe's figure for `part` (memory, compute or dispatch)."""
        return float(getattr(self, f"{part}_noise"))

    def as_row(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "at_s": self.at_s,
            "memory_gbps": self.memory_gbps,
            "compute_tflops": self.compute_tflops,
            "memory_rel_iqr": self.memory_rel_iqr,
            "compute_rel_iqr": self.compute_rel_iqr,
            "dispatch_us": self.dispatch_us,
            "dispatch_rel_iqr": self.dispatch_rel_iqr,
            "memory_noise": self.memory_noise,
            "compute_noise": self.compute_noise,
            "dispatch_noise": self.dispatch_noise,
            "stream_gemm_tflops": self.stream_gemm_tflops,
            "stream_gemm_rel_iqr": self.stream_gemm_rel_iqr,
            "stream_gemm_noise": self.stream_gemm_noise,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProbeSample:
        return cls(
            label=str(row.get("label", "")),
            at_s=float(row.get("at_s", 0.0)),
            memory_gbps=float(row["memory_gbps"]),
            compute_tflops=float(row["compute_tflops"]),
            memory_rel_iqr=float(row.get("memory_rel_iqr", 0.0) or 0.0),
            compute_rel_iqr=float(row.get("compute_rel_iqr", 0.0) or 0.0),
            dispatch_us=float(row.get("dispatch_us", 0.0) or 0.0),
            dispatch_rel_iqr=float(row.get("dispatch_rel_iqr", 0.0) or 0.0),
            memory_noise=float(row.get("memory_noise", 0.0) or 0.0),
            compute_noise=float(row.get("compute_noise", 0.0) or 0.0),
            dispatch_noise=float(row.get("dispatch_noise", 0.0) or 0.0),
            stream_gemm_tflops=float(row.get("stream_gemm_tflops", 0.0) or 0.0),
            stream_gemm_rel_iqr=float(row.get("stream_gemm_rel_iqr", 0.0) or 0.0),
            stream_gemm_noise=float(row.get("stream_gemm_noise", 0.0) or 0.0),
        )


@dataclass(frozen=True)
class SpeedRatio:
    """Machine speed relative to a reference, per part (dimensionless; 1 = the reference's speed)."""

    memory: float
    compute: float
    dispatch: float = 1.0
    stream_gemm: float = 1.0

    @classmethod
    def between(cls, now: ProbeSample, reference: ProbeSample) -> SpeedRatio:
        """How fast the machine is at `now` relative to `reference` (dispatch: 1 where either lacks it; the
        weight-streaming GEMM, where either lacks it, follows the only GEMM the probe timed: `compute`)."""
        dispatch = (
            reference.dispatch_us / now.dispatch_us if now.dispatch_us and reference.dispatch_us else 1.0
        )
        stream = (
            now.stream_gemm_tflops / reference.stream_gemm_tflops
            if now.stream_gemm_tflops and reference.stream_gemm_tflops
            else None
        )
        compute = now.compute_tflops / reference.compute_tflops
        return cls(
            now.memory_gbps / reference.memory_gbps, compute, dispatch, compute if stream is None else stream
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "memory": self.memory,
            "compute": self.compute,
            "dispatch": self.dispatch,
            "stream_gemm": self.stream_gemm,
        }


SAME_SPEED = SpeedRatio(1.0, 1.0, 1.0, 1.0)
PARTS = ("memory", "compute", "dispatch", "stream_gemm")


def rel_iqr(values: Sequence[float]) -> float:
    """(Q3 − Q1) / median of repeated timings or rates (the range over the median below four of them)."""
    median = statistics.median(values)
    if median <= 0:
        return 0.0
    if len(values) < 4:
        return (max(values) - min(values)) / median
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / median


# The standard error of a median of n draws is √(π/2) σ/√n for a normal spread, and a normal σ is IQR / 1.349.
MEDIAN_SE_PER_IQR = math.sqrt(math.pi / 2) / 1.349


def median_noise(values: Sequence[float]) -> float:
    """The relative standard error of the median of `values`, from their IQR: the noise of a probe's figure."""
    return MEDIAN_SE_PER_IQR * rel_iqr(values) / math.sqrt(len(values))


PART_FIGURES = {
    "memory": "memory_gbps",
    "compute": "compute_tflops",
    "dispatch": "dispatch_us",
    "stream_gemm": "stream_gemm_tflops",
}


def _values(samples: Sequence[ProbeSample], part: str) -> list[float]:
    return [float(getattr(s, PART_FIGURES[part])) for s in samples]


def median_sample(samples: Sequence[ProbeSample], label: str = "median") -> ProbeSample:
    """The per-part median of several probes. Its noise is the median probe's noise ÷ √n: the precision of a
    speed measured n times, not the spread of the speeds, which is the drift the median stands in for."""
    root_n = math.sqrt(len(samples))

    def noise(part: str) -> float:
        return statistics.median(s.noise(part) for s in samples) / root_n

    return ProbeSample(
        label=label,
        at_s=0.0,
        memory_gbps=statistics.median(s.memory_gbps for s in samples),
        compute_tflops=statistics.median(s.compute_tflops for s in samples),
        memory_rel_iqr=statistics.median(s.memory_rel_iqr for s in samples),
        compute_rel_iqr=statistics.median(s.compute_rel_iqr for s in samples),
        dispatch_us=statistics.median(s.dispatch_us for s in samples),
        dispatch_rel_iqr=statistics.median(s.dispatch_rel_iqr for s in samples),
        memory_noise=noise("memory"),
        compute_noise=noise("compute"),
        dispatch_noise=noise("dispatch"),
        stream_gemm_tflops=statistics.median(s.stream_gemm_tflops for s in samples),
        stream_gemm_rel_iqr=statistics.median(s.stream_gemm_rel_iqr for s in samples),
        stream_gemm_noise=noise("stream_gemm"),
    )


def between_sample(before: ProbeSample, after: ProbeSample, label: str = "during") -> ProbeSample:
    """The machine's speed during an interval bracketed by two probes: their geometric mean, per part (its
    noise: half the two probes' noises in quadrature)."""
    return ProbeSample(
        label=label,
        at_s=(before.at_s + after.at_s) / 2,
        memory_gbps=math.sqrt(before.memory_gbps * after.memory_gbps),
        compute_tflops=math.sqrt(before.compute_tflops * after.compute_tflops),
        memory_rel_iqr=max(before.memory_rel_iqr, after.memory_rel_iqr),
        compute_rel_iqr=max(before.compute_rel_iqr, after.compute_rel_iqr),
        dispatch_us=math.sqrt(before.dispatch_us * after.dispatch_us),
        dispatch_rel_iqr=max(before.dispatch_rel_iqr, after.dispatch_rel_iqr),
        memory_noise=math.hypot(before.memory_noise, after.memory_noise) / 2,
        compute_noise=math.hypot(before.compute_noise, after.compute_noise) / 2,
        dispatch_noise=math.hypot(before.dispatch_noise, after.dispatch_noise) / 2,
        stream_gemm_tflops=math.sqrt(before.stream_gemm_tflops * after.stream_gemm_tflops),
        stream_gemm_rel_iqr=max(before.stream_gemm_rel_iqr, after.stream_gemm_rel_iqr),
        stream_gemm_noise=math.hypot(before.stream_gemm_noise, after.stream_gemm_noise) / 2,
    )


def typical_noise(samples: Sequence[ProbeSample]) -> dict[str, float]:
    """The median single probe's noise (relative standard error of its median), per part."""
    return {part: statistics.median(s.noise(part) for s in samples) for part in PARTS}


# A normal σ is IQR / 1.349: one probe's scatter from the spread between the probes of a run.
SIGMA_PER_IQR = 1.0 / 1.349
# A validation row's machine speed: the median of the probe readings beside the rows within
# SPEED_WINDOW_ROWS // 2 of it (the row's own included), so one probe's scatter does not count as drift.
SPEED_WINDOW_ROWS = 11


def scatter(samples: Sequence[ProbeSample]) -> dict[str, float]:
    """One probe's relative standard deviation per part over a run, from the spread between its probes
    (relative IQR × SIGMA_PER_IQR; 0 for a part the probes did not measure).

    A probe's own noise (`ProbeSample.*_noise`, from its repeats) says how well one probe knows the speed of
    its moment; this says how far two probes of a steady run land apart. On the shared 2-core EPYC VM the
    second was 2-5 times the first (`benchmarks/probe_context.py`: relative IQR 6-21% between probes,
    2-4% noise within one), so a correction gated on the first treats scatter as drift."""
    out: dict[str, float] = {}
    for part in PARTS:
        values = [v for v in _values(samples, part) if v > 0]
        out[part] = rel_iqr(values) * SIGMA_PER_IQR if len(values) >= 2 else 0.0
    return out


# A normal σ from the median absolute difference of successive log readings: a difference of two independent
# readings of scatter σ is normal with standard deviation √2·σ, whose median absolute value is 0.6745·√2·σ.
MEDIAN_ABS_NORMAL = 0.6744897501960817


def step_scatter(samples: Sequence[ProbeSample], shared: bool = False) -> dict[str, float]:
    """One reading's relative standard deviation per part, from the differences between successive readings
    (in the order given: time order): median |ln v[i+1] − ln v[i]| ÷ (0.6745 · √2); 0 for a part with fewer
    than three readings.

    `scatter` takes the spread over the whole run, so a machine whose speed moves slowly over the run (a
    drift, which a correction should follow) counts as noise there and widens the gate until nothing is
    corrected; a difference of neighbours moves with that drift only by its change from one reading to the
    next. Measured on the shared 2-core Xeon VM (one process, 90 s, one-row GEMMs of four shapes timed in
    turn, 730 readings each): run-wide σ 9-15%, from successive differences 3-6%; the four shapes' 10-reading
    means moved together (correlation 0.93), the machine's speed ramping 12 -> 14.5 GB/s over 40 s.

    `shared`: each reading is the geometric mean of two probes, the second shared with the next reading (a
    validation row's speed: `measure.measure_model` takes one probe between each two rows). The difference of
    two such neighbours is half the difference of two independent probes, its variance that of one reading,
    so its median absolute value is 0.6745 · σ of a reading (no √2)."""
    out: dict[str, float] = {}
    divisor = MEDIAN_ABS_NORMAL * (1.0 if shared else math.sqrt(2.0))
    for part in PARTS:
        values = [v for v in _values(samples, part) if v > 0]
        if len(values) < 3:
            out[part] = 0.0
            continue
        steps = [abs(math.log(b / a)) for a, b in itertools.pairwise(values)]
        out[part] = statistics.median(steps) / divisor
    return out


# A normal σ from the median absolute second difference of log readings: x[i+1] − 2x[i] + x[i−1] of
# independent readings of scatter σ is normal with standard deviation √6·σ.
SECOND_DIFFERENCE_SD = math.sqrt(6.0)


def trend_free_scatter(values: Sequence[float]) -> float:
    """One reading's relative standard deviation from the second differences of successive readings (time
    order): median |ln v[i+1] − 2 ln v[i] + ln v[i−1]| ÷ (0.6745 · √6); 0 below four readings.

    For a suite's in-suite references (a few readings seconds apart) a steady drift is what the correction
    must follow: a ramp's first differences (`step_scatter`) are its steps, which would count the ramp as
    noise and gate it out, while its second differences are its readings' noise alone. A single step (a
    neighbour starting) moves two of them, so their median still reads the noise from five or more."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 4:
        return 0.0
    bends = [abs(logs[i + 1] - 2 * logs[i] + logs[i - 1]) for i in range(1, len(logs) - 1)]
    return statistics.median(bends) / (MEDIAN_ABS_NORMAL * SECOND_DIFFERENCE_SD)


def reference_factors(rates: Sequence[float]) -> list[float]:
    """Per round of a suite, the speed of the in-suite reference then ÷ the suite's median reference speed
    (dimensionless; a time measured in that round times its factor is the time at the median speed), 1 for a
    round within the readings' noise of the median: NOISE_MULTIPLE standard errors of the difference between
    one reading (`trend_free_scatter`) and the median of n (√(π/2)/√n of it), and at least MIN_DRIFT. All 1
    below four readings (no noise estimate) or where any reading is missing, so a steady machine's points
    stay exactly as timed."""
    if len(rates) < 4 or not all(r > 0 and math.isfinite(r) for r in rates):
        return [1.0] * len(rates)
    median = statistics.median(rates)
    sigma = trend_free_scatter(rates)
    gate = max(NOISE_MULTIPLE * sigma * math.sqrt(1.0 + math.pi / (2 * len(rates))), MIN_DRIFT)
    return [r / median if abs(math.log(r / median)) > gate else 1.0 for r in rates]


def with_noise_floor(sample: ProbeSample, sigma: dict[str, float]) -> ProbeSample:
    """`sample` (one reading) with each part's noise at least `sigma` of that part: the scatter one reading
    shows beside its neighbours, where that is larger than the noise of its own repeats."""
    noise: dict[str, Any] = {f"{part}_noise": max(sample.noise(part), sigma.get(part, 0.0)) for part in PARTS}
    return replace(sample, **noise)


def with_scatter_noise(sample: ProbeSample, sigma: dict[str, float], probes: int) -> ProbeSample:
    """`sample`, the median (or mean) of `probes` probe readings, with each part's noise the standard error
    that many readings of scatter `sigma` give (√(π/2)·σ/√n, a median's), where it is larger than the noise
    the sample states."""
    factor = math.sqrt(math.pi / 2) / math.sqrt(max(probes, 1))
    return with_noise_floor(sample, {part: factor * value for part, value in sigma.items()})


def window_speeds(beside: Sequence[ProbeSample], window: int = SPEED_WINDOW_ROWS) -> list[ProbeSample]:
    """Each row's machine speed: the median sample of the readings beside the rows within window // 2 of it
    (fewer at the ends), with the noise of the scatter between the run's readings (`scatter`) over half as
    many readings as the window holds: next rows share a probe in every round (`measure.measure_model`
    takes one between each two rows), so their readings are not independent. The scatter is taken between
    neighbouring rows (`step_scatter`, `shared`), so a drift over the run is not counted as noise."""
    sigma = step_scatter(beside, shared=True)
    half = window // 2
    out = []
    for i in range(len(beside)):
        around = beside[max(0, i - half) : i + half + 1]
        out.append(with_scatter_noise(median_sample(around, "row window"), sigma, (len(around) + 1) // 2))
    return out


def spread(samples: Sequence[ProbeSample]) -> dict[str, float]:
    """(max − min) / median of each part over a run's probes: how far the machine's speed moved (a part the
    probes did not measure: 0)."""
    out: dict[str, float] = {}
    for part in PARTS:
        values = _values(samples, part)
        median = statistics.median(values)
        out[part] = (max(values) - min(values)) / median if median > 0 else 0.0
    return out


def threshold(a: ProbeSample, b: ProbeSample, part: str) -> float:
    """The smallest change of `part` between two probes that counts as drift: NOISE_MULTIPLE standard errors
    of their difference (the two noises in quadrature), and at least MIN_DRIFT."""
    return max(NOISE_MULTIPLE * math.hypot(a.noise(part), b.noise(part)), MIN_DRIFT)


def drift_between(before: ProbeSample, after: ProbeSample, parts: Sequence[str] = PARTS) -> float:
    """The largest of `parts`' |after / before − 1|: how much the machine changed over an interval."""
    moved = SpeedRatio.between(after, before).as_dict()
    return max((abs(moved[part] - 1.0) for part in parts), default=0.0)


def beyond_noise(ratio: SpeedRatio, now: ProbeSample, reference: ProbeSample) -> SpeedRatio:
    """`ratio` (now ÷ reference) with every part that moved less than its `threshold` set to 1: a change the
    probe cannot tell from its own noise is not corrected, so a steady machine's figures stay as measured."""
    kept = {
        part: value if abs(value - 1.0) > threshold(now, reference, part) else 1.0
        for part, value in ratio.as_dict().items()
    }
    return SpeedRatio(**kept)


def normalisation(during: ProbeSample, run_median: ProbeSample) -> SpeedRatio:
    """The factor that brings speeds measured `during` a suite to the run's median machine speed: a speed
    measured then times this factor (a time divided by it) is what the median machine would have shown.
    Parts within the probe's noise of the median stay 1 (`beyond_noise`)."""
    return beyond_noise(SpeedRatio.between(run_median, during), run_median, during)


# --------------------------------------------------------------------------------------- suite rows


def normalise_gemm_rows(
    rows: list[dict[str, Any]], factor: SpeedRatio, during: ProbeSample
) -> list[dict[str, Any]]:
    """GEMM-suite rows with each time brought to the run's median speed.

    A GEMM's time is part weight streaming (memory) and part arithmetic (compute); each part is weighted by
    its share of the time at the probe's own rates (bytes ÷ the read's GB/s, FLOPs ÷ the GEMM's TFLOP/s),
    so a one-row GEMM follows the memory ratio and a large one the compute ratio.
    """
    out = []
    for row in rows:
        t_memory = float(row["bytes"]) / (during.memory_gbps * 1e9)
        t_compute = float(row["flops"]) / (during.compute_tflops * 1e12)
        w = t_memory / (t_memory + t_compute) if t_memory + t_compute > 0 else 0.0
        scale = w / factor.memory + (1.0 - w) / factor.compute  # time now → time at the median speed
        seconds = float(row["median_s"]) * scale
        new = dict(row)
        new["median_s"] = seconds
        new["iqr_s"] = float(row.get("iqr_s") or 0.0) * scale
        new["tflops"] = float(row["flops"]) / seconds / 1e12
        new["gbps"] = float(row["bytes"]) / seconds / 1e9
        out.append(new)
    return out


# Launch-suite row kinds timed on the device (GPU events); the rest are host time.
DEVICE_LAUNCH_KINDS = frozenset({"graph_device", "chain_graph_device", "single_kernel", "empty_events"})


def normalise_launch_rows(
    rows: list[dict[str, Any]], factor: SpeedRatio, is_gpu: bool
) -> list[dict[str, Any]]:
    """Launch-suite rows with their times at the run's median speed: host-timed kinds (every kind on a CPU)
    follow the dispatch part, a GPU's device-timed kinds the compute part."""
    out = []
    for row in rows:
        new = dict(row)
        speed = factor.compute if is_gpu and row.get("kind") in DEVICE_LAUNCH_KINDS else factor.dispatch
        for key in ("seconds", "iqr_s"):
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                new[key] = float(value) / speed
        out.append(new)
    return out


# --------------------------------------------------------------------------------------- profile


def at_speed(profile: HardwareProfile, ratio: SpeedRatio) -> HardwareProfile:
    """The profile of the same machine running at `ratio` of the speed it was calibrated at.

    Memory streaming × ratio.memory; the GEMM peaks × ratio.stream_gemm (a step's GEMMs run at small M over
    weights streamed from memory: the probe's streaming GEMM times that regime, while its in-cache GEMM ran
    11-14% faster than the validation rows on the 2-core EPYC VM at times the rows were not faster); cache
    bandwidth and transcendental element rates × ratio.compute (a cache read runs at the core's load rate,
    a function's evaluation on the core); host launch, graph launch and sync
    ÷ ratio.dispatch; kernel fixed latency and device gaps ÷ ratio.compute on a GPU, ÷ ratio.dispatch on a
    CPU (where a kernel's fixed cost is its dispatch on the same core).
    """
    if ratio == SAME_SPEED:
        return profile
    ds, em = profile.datasheet, profile.empirical
    host = 1.0 / ratio.dispatch
    device = host if profile.is_cpu else 1.0 / ratio.compute
    eager_gemm, eager_gap = em.launch_eager_gemm_us, em.launch_eager_gap_us
    empirical = replace(
        em,
        cache_bandwidth_gbps=em.cache_bandwidth_gbps * ratio.compute,
        kernel_fixed_latency_us=em.kernel_fixed_latency_us * device,
        launch_graph_gap_us=em.launch_graph_gap_us * device,
        launch_eager_gap_us=None if eager_gap is None else eager_gap * device,
        launch_eager_us=em.launch_eager_us * host,
        launch_eager_gemm_us=None if eager_gemm is None else eager_gemm * host,
        graph_launch_us=em.graph_launch_us * host,
        sync_us=em.sync_us * host,
        transcendental_elements_per_s=None
        if em.transcendental_elements_per_s is None
        else {op: rate * ratio.compute for op, rate in em.transcendental_elements_per_s.items()},
    )
    datasheet = replace(
        ds,
        memory_bandwidth_gbps=ds.memory_bandwidth_gbps * ratio.memory,
        peak_dense_tflops={k: v * ratio.stream_gemm for k, v in ds.peak_dense_tflops.items()},
    )
    return replace(profile, datasheet=datasheet, empirical=empirical)  # type: ignore[arg-type]


# The suite whose figures each part scales in `at_speed`, so the speed a profile's terms were measured at: on a
# CPU the memory bandwidth is the GEMM suite's one-row stream and the peaks its best rate, the cache bandwidth
# the memory suite's cache plateau (at the core's load rate), launch and fixed latency the launch suite's
# dispatch; on a GPU the bandwidth is the memory suite's plateau and the fixed latency and gaps the launch
# suite's device-timed rows (at the device clock).
MEASURED_IN = {
    False: {"memory": "gemm", "compute": "memory", "dispatch": "launch", "stream_gemm": "gemm"},
    True: {"memory": "memory", "compute": "launch", "dispatch": "launch", "stream_gemm": "gemm"},
}


def reference_sample(profile: HardwareProfile) -> ProbeSample | None:
    """The machine speed the profile's terms were measured at (what `at_speed` ratios are taken against).

    Fitted as measured (`normalised` 0), each part's reference is the probe during the suite whose figures the
    part scales (`MEASURED_IN`: the geometric mean of its before and after probes, recorded as
    `<suite>_during_<figure>`), except the streaming GEMM's where the GEMM suite read it in every round: the
    median of those readings (`fit_quality.gemm_reference`), the speed its points were brought to; a profile
    normalised to the run's median (or recorded before the per-suite speeds were) takes the median for every
    part. A correction against the run's median when the figures
    were measured at another speed would carry the difference between the two into every row."""
    figures = profile.fit_quality.get(PROBE_KEY)
    if not figures or not figures.get("memory_gbps") or not figures.get("compute_tflops"):
        return None
    suites = MEASURED_IN[not profile.is_cpu] if not figures.get("normalised") else {}

    # The GEMM suite's points are at the median of the streaming GEMM it read in every round, where it did.
    in_suite = profile.fit_quality.get(GEMM_REFERENCE_KEY, {}) if suites.get("stream_gemm") == "gemm" else {}
    rounds = in_suite.get("reference_rounds", 0.0)
    inside = {
        "stream_gemm_tflops": in_suite.get("reference_stream_gemm_tflops", 0.0),
        # a median of n readings of scatter σ: √(π/2)·σ/√n
        "stream_gemm_noise": math.sqrt(math.pi / 2 / rounds) * in_suite.get("reference_scatter", 0.0)
        if rounds
        else 0.0,
    }

    def value(part: str, suffix: str = "") -> float:
        key = PART_FIGURES[part] if not suffix else f"{part}_{suffix}"
        if inside["stream_gemm_tflops"] and key in inside:
            return float(inside[key])
        during = figures.get(f"{suites[part]}_during_{key}") if part in suites else None
        return float(during if during else figures.get(key, 0.0))

    per_suite = any(f"{suite}_during_{PART_FIGURES[part]}" in figures for part, suite in suites.items())
    sample = ProbeSample(
        "calibration, during each part's suite" if per_suite else "calibration median",
        0.0,
        value("memory"),
        value("compute"),
        dispatch_us=value("dispatch"),
        memory_noise=value("memory", "noise"),
        compute_noise=value("compute", "noise"),
        dispatch_noise=value("dispatch", "noise"),
        stream_gemm_tflops=value("stream_gemm"),
        stream_gemm_noise=value("stream_gemm", "noise"),
    )
    # The scatter between successive probes (`step_scatter`); a profile recorded before it was, the run-wide
    # scatter (which counts a drift over the run as noise); before that, the probes' own noise.
    key = "step_scatter" if any(f"{part}_step_scatter" in figures for part in PARTS) else "scatter"
    sigma = {part: float(figures.get(f"{part}_{key}", 0.0) or 0.0) for part in PARTS}
    if key == "scatter" and not any(sigma.values()):
        return sample
    # A suite's speed is two probes (before and after it); the run's median, all of them.
    return with_scatter_noise(sample, sigma, 2 if per_suite else int(figures.get("n_probes", 2) or 2))


# The parts of the machine each suite's fitted figures depend on, and so the parts whose drift during the
# suite repeats it: the memory suite's plateaus (DRAM stream; the cache plateau runs at the core's load rate),
# the launch suite's host dispatch (and a GPU's device-timed rows, at its clock), the GEMM suite's weight
# stream and arithmetic. The MoE suite's fits are diagnostics, normalised by nothing, so never repeated.
SUITE_PARTS = {
    "memory": ("memory", "compute"),
    "launch": ("dispatch",),
    "gemm": ("memory", "compute"),
    "moe": (),
}


def suite_parts(suite: str, is_gpu: bool = False) -> tuple[str, ...]:
    """The parts a suite's figures follow (`SUITE_PARTS`; a GPU's launch suite also times the device)."""
    parts = SUITE_PARTS.get(suite, PARTS)
    return (*parts, "compute") if is_gpu and suite == "launch" else parts


@dataclass(frozen=True)
class SuiteDrift:
    """One suite's probes and what they imply for the parts its figures follow."""

    suite: str
    before: ProbeSample
    after: ProbeSample
    factor: SpeedRatio  # normalisation to the run's median
    parts: tuple[str, ...] = PARTS

    @property
    def drift(self) -> float:
        """The largest |after / before − 1| of the suite's parts."""
        return drift_between(self.before, self.after, self.parts)

    @property
    def excess(self) -> float:
        """The largest of the suite's parts' change ÷ its threshold: above 1, the machine drifted."""
        moved = SpeedRatio.between(self.after, self.before).as_dict()
        return max(
            (abs(moved[p] - 1.0) / threshold(self.before, self.after, p) for p in self.parts), default=0.0
        )

    @property
    def threshold(self) -> float:
        """The threshold of the suite's part that moved most relative to its own threshold."""
        if not self.parts:
            return 0.0
        moved = SpeedRatio.between(self.after, self.before).as_dict()
        part = max(self.parts, key=lambda p: abs(moved[p] - 1.0) / threshold(self.before, self.after, p))
        return threshold(self.before, self.after, part)

    @property
    def drifted(self) -> bool:
        return self.excess > 1.0


def suite_drift(
    suite: str,
    before: ProbeSample,
    after: ProbeSample,
    median: ProbeSample | None = None,
    is_gpu: bool = False,
) -> SuiteDrift:
    """A suite's drift between its probes, with its normalisation to `median` (none without one)."""
    factor = SAME_SPEED if median is None else normalisation(between_sample(before, after), median)
    return SuiteDrift(suite, before, after, factor, suite_parts(suite, is_gpu))


def suite_drift_in_run(
    suite: str,
    before: ProbeSample,
    after: ProbeSample,
    earlier: Sequence[ProbeSample],
    is_gpu: bool = False,
) -> SuiteDrift:
    """A suite's drift as the repeat-once rule judges it: each of its two probes' noise at least the scatter
    between successive probes of the run so far (`step_scatter` of `earlier` and `before`, in time order;
    none before three), so a suite is not repeated on one probe's scatter, which on the shared 2-core VM was
    2-5 times the noise of its own repeats (`benchmarks/probe_context.py`)."""
    sigma = step_scatter([*earlier, before])
    return suite_drift(suite, with_noise_floor(before, sigma), with_noise_floor(after, sigma), is_gpu=is_gpu)


def suite_drifts(
    samples: Sequence[ProbeSample], is_gpu: bool = False
) -> tuple[ProbeSample | None, dict[str, SuiteDrift]]:
    """The run's median probe and each suite's drift, from probes labelled `before:<suite>` / `after:<suite>`
    (in time order): its drift and threshold as the repeat-once rule judged them (`suite_drift_in_run` over
    the probes before it), its normalisation factor to the median from its two probes' own noise."""
    if not samples:
        return None, {}
    median = median_sample(samples)
    index = {s.label: i for i, s in enumerate(samples)}
    out: dict[str, SuiteDrift] = {}
    for label, i in index.items():
        kind, _, suite = label.partition(":")
        after = index.get(f"after:{suite}")
        if kind == "before" and after is not None:
            before, end = samples[i], samples[after]
            judged = suite_drift_in_run(suite, before, end, samples[:i], is_gpu)
            out[suite] = replace(judged, factor=suite_drift(suite, before, end, median, is_gpu).factor)
    return median, out


def record(
    samples: Sequence[ProbeSample], drifts: dict[str, SuiteDrift], plan: dict[str, float], normalised: bool
) -> dict[str, float]:
    """The probe's figures for the profile's fit_quality: median and its noise, spread over the run, each
    suite's drift, threshold and normalisation factors (applied when `normalised`), the threshold's rule,
    and the probe's sizes (`plan`) so validation reruns the same kernels."""
    median = median_sample(samples)
    moved = spread(samples)
    figures = {
        "memory_gbps": median.memory_gbps,
        "compute_tflops": median.compute_tflops,
        "dispatch_us": median.dispatch_us,
        "memory_noise": median.memory_noise,
        "compute_noise": median.compute_noise,
        "dispatch_noise": median.dispatch_noise,
        "stream_gemm_tflops": median.stream_gemm_tflops,
        "stream_gemm_noise": median.stream_gemm_noise,
        "memory_spread": moved["memory"],
        "compute_spread": moved["compute"],
        "dispatch_spread": moved["dispatch"],
        "stream_gemm_spread": moved["stream_gemm"],
        **{f"{part}_scatter": value for part, value in scatter(samples).items()},
        **{f"{part}_step_scatter": value for part, value in step_scatter(samples).items()},
        "memory_rel_iqr": median.memory_rel_iqr,
        "compute_rel_iqr": median.compute_rel_iqr,
        "dispatch_rel_iqr": median.dispatch_rel_iqr,
        **{f"probe_{part}_noise": value for part, value in typical_noise(samples).items()},
        "n_probes": float(len(samples)),
        "noise_multiple": NOISE_MULTIPLE,
        "min_drift": MIN_DRIFT,
        "normalised": float(normalised),
        "max_suite_drift": max((d.drift for d in drifts.values()), default=0.0),
    }
    for suite, d in drifts.items():
        figures[f"{suite}_drift"] = d.drift
        figures[f"{suite}_threshold"] = d.threshold
        for part, value in d.factor.as_dict().items():
            figures[f"{suite}_{part}_factor"] = value
        during = between_sample(d.before, d.after)
        for part, key in PART_FIGURES.items():
            figures[f"{suite}_during_{key}"] = float(getattr(during, key))
            figures[f"{suite}_during_{part}_noise"] = during.noise(part)
    figures.update(plan)
    return figures


__all__ = [
    "DEVICE_LAUNCH_KINDS",
    "DRIFT_NORMALISATION",
    "GEMM_REFERENCE_KEY",
    "MEASURED_IN",
    "MEDIAN_ABS_NORMAL",
    "MEDIAN_SE_PER_IQR",
    "MIN_DRIFT",
    "NOISE_MULTIPLE",
    "PARTS",
    "PROBE_KEY",
    "SAME_SPEED",
    "SECOND_DIFFERENCE_SD",
    "SIGMA_PER_IQR",
    "SPEED_WINDOW_ROWS",
    "SUITE_PARTS",
    "ProbeSample",
    "SpeedRatio",
    "SuiteDrift",
    "at_speed",
    "between_sample",
    "beyond_noise",
    "drift_between",
    "median_noise",
    "median_sample",
    "normalisation",
    "normalise_gemm_rows",
    "normalise_launch_rows",
    "record",
    "reference_factors",
    "reference_sample",
    "rel_iqr",
    "scatter",
    "spread",
    "step_scatter",
    "suite_drift",
    "suite_drift_in_run",
    "suite_drifts",
    "suite_parts",
    "threshold",
    "trend_free_scatter",
    "typical_noise",
    "window_speeds",
    "with_noise_floor",
    "with_scatter_noise",
]
