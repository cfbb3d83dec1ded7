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

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from moesim.simulator.hardware.profile import HardwareProfile

# Drift within one suite above this (any part, |after / before − 1|) means the machine changed speed while
# the suite ran, which one normalisation factor cannot undo: `calibrate` warns and repeats the suite once.
# Measured on a shared 2-core EPYC VM (load 7-13 from neighbours): a probe's nine repeats have a relative IQR
# of 5-17% (memory, GEMM) and 20-60% (dispatch), so two consecutive probes' medians differ by several percent
# with no drift at all; 10% is taken as drift.
DRIFT_THRESHOLD = 0.10
PROBE_KEY = "drift_probe"  # the profile's fit_quality table holding the calibration's probe figures


@dataclass(frozen=True)
class ProbeSample:
    """One probe: the machine's memory and core speed at one moment, with the repeats' relative IQR."""

    label: str  # where in the run: e.g. "before:memory", "after:gemm", "row"
    at_s: float  # seconds since the probe was set up
    memory_gbps: float  # the read's rate
    compute_tflops: float  # the in-cache GEMM's rate
    memory_rel_iqr: float = 0.0
    compute_rel_iqr: float = 0.0
    dispatch_us: float = 0.0  # host time per tiny eager op (0: not measured)
    dispatch_rel_iqr: float = 0.0

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
        )


@dataclass(frozen=True)
class SpeedRatio:
    """Machine speed relative to a reference, per part (dimensionless; 1 = the reference's speed)."""

    memory: float
    compute: float
    dispatch: float = 1.0

    @classmethod
    def between(cls, now: ProbeSample, reference: ProbeSample) -> SpeedRatio:
        """How fast the machine is at `now` relative to `reference` (dispatch 1 where either lacks it)."""
        dispatch = (
            reference.dispatch_us / now.dispatch_us if now.dispatch_us and reference.dispatch_us else 1.0
        )
        return cls(
            now.memory_gbps / reference.memory_gbps, now.compute_tflops / reference.compute_tflops, dispatch
        )

    def as_dict(self) -> dict[str, float]:
        return {"memory": self.memory, "compute": self.compute, "dispatch": self.dispatch}


SAME_SPEED = SpeedRatio(1.0, 1.0, 1.0)
PARTS = ("memory", "compute", "dispatch")


def median_sample(samples: Sequence[ProbeSample], label: str = "median") -> ProbeSample:
    """The per-part median of several probes."""
    return ProbeSample(
        label=label,
        at_s=0.0,
        memory_gbps=statistics.median(s.memory_gbps for s in samples),
        compute_tflops=statistics.median(s.compute_tflops for s in samples),
        memory_rel_iqr=statistics.median(s.memory_rel_iqr for s in samples),
        compute_rel_iqr=statistics.median(s.compute_rel_iqr for s in samples),
        dispatch_us=statistics.median(s.dispatch_us for s in samples),
        dispatch_rel_iqr=statistics.median(s.dispatch_rel_iqr for s in samples),
    )


def between_sample(before: ProbeSample, after: ProbeSample, label: str = "during") -> ProbeSample:
    """The machine's speed during an interval bracketed by two probes: their geometric mean, per part."""
    return ProbeSample(
        label=label,
        at_s=(before.at_s + after.at_s) / 2,
        memory_gbps=math.sqrt(before.memory_gbps * after.memory_gbps),
        compute_tflops=math.sqrt(before.compute_tflops * after.compute_tflops),
        memory_rel_iqr=max(before.memory_rel_iqr, after.memory_rel_iqr),
        compute_rel_iqr=max(before.compute_rel_iqr, after.compute_rel_iqr),
        dispatch_us=math.sqrt(before.dispatch_us * after.dispatch_us),
        dispatch_rel_iqr=max(before.dispatch_rel_iqr, after.dispatch_rel_iqr),
    )


def spread(samples: Sequence[ProbeSample]) -> dict[str, float]:
    """(max − min) / median of each part over a run's probes: how far the machine's speed moved."""
    out: dict[str, float] = {}
    for part, values in (
        ("memory", [s.memory_gbps for s in samples]),
        ("compute", [s.compute_tflops for s in samples]),
        ("dispatch", [s.dispatch_us for s in samples]),
    ):
        median = statistics.median(values)
        out[part] = (max(values) - min(values)) / median if median > 0 else 0.0
    return out


def drift_between(before: ProbeSample, after: ProbeSample) -> float:
    """The largest part's |after / before − 1|: how much the machine changed over an interval."""
    return max(abs(v - 1.0) for v in SpeedRatio.between(after, before).as_dict().values())


def normalisation(during: ProbeSample, run_median: ProbeSample) -> SpeedRatio:
    """The factor that brings speeds measured `during` a suite to the run's median machine speed: a speed
    measured then times this factor (a time divided by it) is what the median machine would have shown."""
    return SpeedRatio.between(run_median, during)


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

    Memory streaming × ratio.memory; peaks and cache bandwidth × ratio.compute; host launch, graph launch
    and sync ÷ ratio.dispatch; kernel fixed latency and device gaps ÷ ratio.compute on a GPU, ÷ ratio.dispatch
    on a CPU (where a kernel's fixed cost is its dispatch on the same core).
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
    )
    datasheet = replace(
        ds,
        memory_bandwidth_gbps=ds.memory_bandwidth_gbps * ratio.memory,
        peak_dense_tflops={k: v * ratio.compute for k, v in ds.peak_dense_tflops.items()},
    )
    return replace(profile, datasheet=datasheet, empirical=empirical)  # type: ignore[arg-type]


def reference_sample(profile: HardwareProfile) -> ProbeSample | None:
    """The probe's median during the profile's calibration (what `at_speed` ratios are taken against)."""
    figures = profile.fit_quality.get(PROBE_KEY)
    if not figures or not figures.get("memory_gbps") or not figures.get("compute_tflops"):
        return None
    return ProbeSample(
        "calibration median",
        0.0,
        figures["memory_gbps"],
        figures["compute_tflops"],
        dispatch_us=figures.get("dispatch_us", 0.0),
    )


@dataclass(frozen=True)
class SuiteDrift:
    """One suite's probes and what they imply."""

    suite: str
    before: ProbeSample
    after: ProbeSample
    factor: SpeedRatio  # normalisation to the run's median

    @property
    def drift(self) -> float:
        return drift_between(self.before, self.after)


def suite_drifts(samples: Sequence[ProbeSample]) -> tuple[ProbeSample | None, dict[str, SuiteDrift]]:
    """The run's median probe and each suite's drift, from probes labelled `before:<suite>` / `after:<suite>`."""
    if not samples:
        return None, {}
    median = median_sample(samples)
    by_label = {s.label: s for s in samples}
    out: dict[str, SuiteDrift] = {}
    for label, before in by_label.items():
        kind, _, suite = label.partition(":")
        after = by_label.get(f"after:{suite}")
        if kind == "before" and after is not None:
            out[suite] = SuiteDrift(
                suite, before, after, normalisation(between_sample(before, after), median)
            )
    return median, out


def record(
    samples: Sequence[ProbeSample], drifts: dict[str, SuiteDrift], plan: dict[str, float]
) -> dict[str, float]:
    """The probe's figures for the profile's fit_quality: median, spread over the run, each suite's drift
    and normalisation factors, the threshold, and the probe's sizes (`plan`) so validation reruns the same."""
    median = median_sample(samples)
    moved = spread(samples)
    figures = {
        "memory_gbps": median.memory_gbps,
        "compute_tflops": median.compute_tflops,
        "dispatch_us": median.dispatch_us,
        "memory_spread": moved["memory"],
        "compute_spread": moved["compute"],
        "dispatch_spread": moved["dispatch"],
        "memory_rel_iqr": median.memory_rel_iqr,
        "compute_rel_iqr": median.compute_rel_iqr,
        "dispatch_rel_iqr": median.dispatch_rel_iqr,
        "n_probes": float(len(samples)),
        "threshold": DRIFT_THRESHOLD,
        "max_suite_drift": max((d.drift for d in drifts.values()), default=0.0),
    }
    for suite, d in drifts.items():
        figures[f"{suite}_drift"] = d.drift
        for part, value in d.factor.as_dict().items():
            figures[f"{suite}_{part}_factor"] = value
    figures.update(plan)
    return figures


__all__ = [
    "DEVICE_LAUNCH_KINDS",
    "DRIFT_THRESHOLD",
    "PARTS",
    "PROBE_KEY",
    "SAME_SPEED",
    "ProbeSample",
    "SpeedRatio",
    "SuiteDrift",
    "at_speed",
    "between_sample",
    "drift_between",
    "median_sample",
    "normalisation",
    "normalise_gemm_rows",
    "normalise_launch_rows",
    "record",
    "reference_sample",
    "spread",
    "suite_drifts",
]
