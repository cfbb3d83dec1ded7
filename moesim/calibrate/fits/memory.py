"""The memory suite's table → cache knee, cache and memory plateaus, and the small-transfer ramp. Pure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.isotonic import IsotonicRegression

from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.primitives import Row, column
from moesim.errors import MoesimError
from moesim.simulator.hardware.sections import MAX_TRANSCENDENTAL_ELEMENTS_PER_S, TRANSCENDENTAL_OPS


@dataclass(frozen=True)
class MemoryParams:
    memory_gbps: float  # streaming plateau beyond the cache
    cache_gbps: float
    cache_bytes: float
    half_bandwidth_transfer_bytes: float
    knee: fit.CacheFit
    ramp: fit.FitResult | None
    notes: tuple[str, ...] = ()
    # Confidence: the working sets over which the measured curve moves from the cache plateau to the memory
    # one (the knee lies between them), and the timings' relative IQR on the memory plateau.
    knee_range_bytes: tuple[float, float] = (0.0, 0.0)
    plateau_rel_iqr: float = 0.0
    # The reference read's median rate over the suite (GB/s; 0: no reference reads in this table) and the
    # plateau fitted to the points as timed, before each was brought to that speed.
    reference_gbps: float = 0.0
    raw_memory_gbps: float = 0.0

    def confidence(self) -> dict[str, float]:
        """The memory fit's stated confidence, for the profile's fit_quality table."""
        low, high = self.knee_range_bytes
        out = {
            "knee_low_bytes": low,
            "knee_high_bytes": high,
            "memory_plateau_rel_iqr": self.plateau_rel_iqr,
        }
        if self.reference_gbps > 0:
            out |= {"reference_gbps": self.reference_gbps, "memory_plateau_raw_gbps": self.raw_memory_gbps}
        return out


def knee_range_bytes(sizes: np.ndarray, bw: np.ndarray, knee: fit.CacheFit) -> tuple[float, float]:
    """(first, last) working set whose monotone-smoothed bandwidth lies strictly between the plateaus
    (below 0.9 × cache, above 1.1 × memory); both the knee when the step is sharp."""
    beyond = sizes > 1.5 * knee.inner_knee_bytes
    s, b = sizes[beyond], bw[beyond]
    if len(s) < 2:
        return knee.knee_bytes, knee.knee_bytes
    curve = np.exp(IsotonicRegression(increasing=False).fit_transform(np.log(s), np.log(b)))
    between = np.flatnonzero((curve < 0.9 * knee.cache_gbps) & (curve > 1.1 * knee.memory_gbps))
    if not between.size:
        return knee.knee_bytes, knee.knee_bytes
    return float(min(s[between[0]], knee.knee_bytes)), float(max(s[between[-1]], knee.knee_bytes))


def outermost_cache_level(sizes: np.ndarray, bw: np.ndarray) -> fit.CacheFit:
    """The last-level cache: the cache fit, or a further clear step behind its knee when it found only one.

    A CPU shows a private L2 and a shared L3 in front of DRAM; whether the two-level curve wins can hinge on a
    point or two near the first knee, and the one-level fit then reports the L2. The simulator's cache is the
    last level, so behind that knee a monotone (isotonic) fit of log bandwidth against log size is taken, and
    a clear step in it (≥ 30%, two measured sizes on each side) gives the LLC: its plateau, the memory
    plateau, and the knee where the curve crosses their geometric mean.
    """
    knee = fit.fit_cache_knee(sizes, bw)
    beyond = sizes > 3.0 * knee.knee_bytes  # past the first knee's own transition
    if knee.levels != 1 or int(beyond.sum()) < 8:
        return knee
    tail_sizes = sizes[beyond]
    curve = np.exp(IsotonicRegression(increasing=False).fit_transform(np.log(tail_sizes), np.log(bw[beyond])))
    level = float(np.median(curve[:3]))
    memory = float(np.median(curve[-max(3, len(curve) // 4) :]))
    below = np.flatnonzero(curve < np.sqrt(level * memory))
    if level < 1.3 * memory or not below.size:
        return knee
    crossing = int(below[0])
    if crossing < 2 or len(curve) - crossing < 2:
        return knee
    knee_bytes = float(np.sqrt(tail_sizes[crossing - 1] * tail_sizes[crossing]))
    return fit.CacheFit(level, memory, knee_bytes, knee.knee_bytes, knee.cache_gbps, 2, knee.fit)


def fit_memory_table(rows: list[Row]) -> MemoryParams:
    """Cache knee and plateaus from the warm sweep; the ramp from the cold single reads."""
    sizes = column(rows, "size_bytes", kind="working_set")
    raw_bw = column(rows, "bandwidth_gbps", kind="working_set")
    # Points read beside the reference set are taken at the suite's median memory speed (suites/memory.py).
    normalised_bw = column(rows, "normalised_gbps", kind="working_set")
    bw = np.where(np.isfinite(normalised_bw) & (normalised_bw > 0), normalised_bw, raw_bw)
    reference_s = column(rows, "reference_s", kind="working_set")
    reference_b = column(rows, "reference_bytes", kind="working_set")
    has_reference = np.isfinite(reference_s) & (reference_s > 0)
    reference_gbps = (
        float(reference_b[has_reference][0] / reference_s[has_reference][0] / 1e9)
        if has_reference.any()
        else 0.0
    )
    raw_memory_gbps = 0.0
    if reference_gbps:
        raw_ok = np.isfinite(raw_bw) & (raw_bw > 0)
        raw_order = np.argsort(sizes[raw_ok])
        raw_memory_gbps = _plateau_gbps(sizes[raw_ok][raw_order], raw_bw[raw_ok][raw_order])
    ok = np.isfinite(bw) & (bw > 0)
    if ok.sum() < 5:
        raise MoesimError(
            "memory suite", "too few valid working-set points to fit a cache knee", "rerun with --fresh"
        )
    sizes, bw = sizes[ok], bw[ok]
    order = np.argsort(sizes)
    sizes, bw = sizes[order], bw[order]
    # Reads smaller than the bandwidth peak are held back by the per-read ramp (too little in flight), not
    # by the cache: fit from the peak on (peak of a 3-point running median, so one lucky point can't move it).
    smooth = np.array([np.median(bw[max(i - 1, 0) : i + 2]) for i in range(len(bw))])
    start = min(int(np.argmax(smooth)), len(bw) - 5)
    knee = outermost_cache_level(sizes[start:], bw[start:])
    knee_range = knee_range_bytes(sizes[start:], bw[start:], knee)
    t_med = column(rows, "median_s", kind="working_set")[ok][order]
    t_iqr = column(rows, "iqr_s", kind="working_set")[ok][order]
    plateau = (sizes > knee_range[1]) & np.isfinite(t_iqr) & (t_med > 0)
    plateau_rel_iqr = float(np.median(t_iqr[plateau] / t_med[plateau])) if plateau.any() else float("nan")
    # The ramp: the cost model's own formula, fixed + (S + h) / bandwidth, fitted to the cold single reads
    # with the read kernel's warm fixed time and the streaming plateau given (see fit_transfer_latency).
    t_sizes = column(rows, "size_bytes", kind="transfer")
    t_times = column(rows, "median_s", kind="transfer")
    warm_fixed = column(rows, "median_s", kind="fixed_warm")
    t_ok = np.isfinite(t_times) & (t_times > 0) & np.isfinite(t_sizes)
    ramp = None
    half = 0.0
    notes: list[str] = []
    bandwidth = knee.memory_gbps * 1e9
    if t_ok.sum() >= 3 and len(warm_fixed) and np.isfinite(warm_fixed[0]):
        ramp = fit.fit_transfer_latency(t_sizes[t_ok], t_times[t_ok], float(warm_fixed[0]), bandwidth)
        half = ramp.params["half_bandwidth_transfer_bytes"]
        bound = bandwidth * fit.MAX_MEMORY_LATENCY_S
        if half > bound:
            notes.append(
                f"empirical.half_bandwidth_transfer_bytes: the cold reads' extra time "
                f"({ramp.params['memory_latency_us']:.1f} us) exceeds any memory latency; kept at the "
                f"physical bound bandwidth x {fit.MAX_MEMORY_LATENCY_S * 1e6:.0f} us (the excess is not memory latency: "
                "host launch time inside the interval, or flush side effects such as TLB refills, which a "
                "running step does not pay per kernel)"
            )
            half = bound
    return MemoryParams(
        memory_gbps=knee.memory_gbps,
        cache_gbps=knee.cache_gbps,
        cache_bytes=knee.knee_bytes,
        half_bandwidth_transfer_bytes=half,
        knee=knee,
        ramp=ramp,
        notes=tuple(notes),
        knee_range_bytes=knee_range,
        plateau_rel_iqr=plateau_rel_iqr,
        reference_gbps=reference_gbps,
        raw_memory_gbps=raw_memory_gbps,
    )


def _plateau_gbps(sizes: np.ndarray, bw: np.ndarray) -> float:
    """The memory plateau the knee fit finds in one sweep (sizes ascending), from the bandwidth peak on."""
    if len(bw) < 5:
        return float("nan")
    smooth = np.array([np.median(bw[max(i - 1, 0) : i + 2]) for i in range(len(bw))])
    start = min(int(np.argmax(smooth)), len(bw) - 5)
    return outermost_cache_level(sizes[start:], bw[start:]).memory_gbps


def transcendental_rates(rows: list[Row]) -> dict[str, float]:
    """Elements per second of each op's `transcendental` rows (the memory suite on a CPU): elements over
    the median call's time less the suite's warm fixed time; an op whose net time is not positive is left
    out (unbounded), a rate above MAX_TRANSCENDENTAL_ELEMENTS_PER_S is clipped to it."""
    rates: dict[str, float] = {}
    for row in rows:
        if row.get("kind") != "transcendental" or row.get("op") not in TRANSCENDENTAL_OPS:
            continue
        net_s = float(row["median_s"]) - float(row.get("fixed_s") or 0.0)
        if np.isfinite(net_s) and net_s > 0:
            rates[str(row["op"])] = min(float(row["elements"]) / net_s, MAX_TRANSCENDENTAL_ELEMENTS_PER_S)
    return rates


__all__ = ["MemoryParams", "fit_memory_table", "outermost_cache_level", "transcendental_rates"]
