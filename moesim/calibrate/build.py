"""Measurement tables → fitted profile parameters → HardwareProfile. Pure: no torch, no timing.

Each `fit_*_table` takes the rows a suite wrote (as dicts, numbers or numeric strings) and returns the
parameters it determines plus a FitResult; `build_profile` assembles them with the datasheet section.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from sklearn.isotonic import IsotonicRegression

from moesim.calibrate import fit
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import (
    Datasheet,
    Empirical,
    GemmEfficiency,
    HardwareProfile,
    NodeSpec,
    Provenance,
    list_profiles,
    load_profile,
)

Row = dict[str, Any]


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def column(rows: list[Row], key: str, **where: Any) -> np.ndarray:
    """Numeric column `key` of the rows matching every `where` item (compared as strings)."""
    picked = [r for r in rows if all(str(r.get(k)) == str(v) for k, v in where.items())]
    return np.array([_num(r.get(key)) for r in picked], dtype=float)


# ---------------------------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class MemoryParams:
    memory_gbps: float  # streaming plateau beyond the cache
    cache_gbps: float
    cache_bytes: float
    half_bandwidth_transfer_bytes: float
    knee: fit.CacheFit
    ramp: fit.FitResult | None
    notes: tuple[str, ...] = ()


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


def never_faster_with_more_rows(m_tokens: np.ndarray, efficiency: np.ndarray) -> np.ndarray:
    """Cap each point so compute time M / e(M) never falls as M grows: e₂ ≤ e₁ · M₂ / M₁.

    The cost model interpolates e as a power law between points, so holding this at the points holds it
    everywhere. A fitted power above 1 would break it at small M (more rows finishing sooner), which no GEMM does.
    """
    capped = np.array(efficiency, dtype=float)
    for i in range(1, len(capped)):
        capped[i] = min(capped[i], capped[i - 1] * m_tokens[i] / m_tokens[i - 1])
    return capped


def fit_memory_table(rows: list[Row]) -> MemoryParams:
    """Cache knee and plateaus from the warm sweep; the ramp from the cold single reads."""
    sizes = column(rows, "size_bytes", kind="working_set")
    bw = column(rows, "bandwidth_gbps", kind="working_set")
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
    )


# ---------------------------------------------------------------------------------------------- launch


@dataclass(frozen=True)
class LaunchParams:
    launch_eager_us: float
    kernel_fixed_latency_us: float
    launch_graph_gap_us: float
    graph_launch_us: float
    sync_us: float
    eager: fit.FitResult
    graph: fit.FitResult | None
    notes: tuple[str, ...] = ()
    launch_eager_gemm_us: float | None = None  # None: no eager_gemm_host rows in this table
    eager_gemm: fit.FitResult | None = None
    eager_tight: fit.FitResult | None = None  # the identical-op tight loop, kept for reference
    chain_graph: fit.FitResult | None = None  # graph replay of the dependent mixed chain


def _line(rows: list[Row], kind: str) -> fit.FitResult | None:
    """The N-versus-seconds line of one row kind, or None when fewer than two valid batches exist."""
    n, t = column(rows, "n_kernels", kind=kind), column(rows, "seconds", kind=kind)
    ok = np.isfinite(n) & np.isfinite(t)
    if ok.sum() < 2:
        return None
    return fit.fit_line(n[ok], t[ok])


def fit_launch_table(rows: list[Row], is_gpu: bool) -> LaunchParams:
    """Per-kernel eager cost from the batch line; on GPUs also graph gap, tiny-kernel latency and sync.

    Where the table has the dependent mixed chain (`chain_eager_host`, `chain_graph_device`), its slopes
    set the eager host cost per op and the graph per-kernel time; the identical-op figures stay in the
    fits for reference. Older tables without the chain keep the identical-op rule.
    """
    tight = fit.fit_line(
        column(rows, "n_kernels", kind="eager_host"), column(rows, "seconds", kind="eager_host")
    )
    chain_eager = _line(rows, "chain_eager_host")
    eager = chain_eager if chain_eager is not None else tight
    eager_tight = tight if chain_eager is not None else None
    eager_us = max(eager.params["slope"], 0.0) * 1e6
    tight_us = max(tight.params["slope"], 0.0) * 1e6
    eager_notes = [
        "empirical.launch_eager_us = host seconds per op of a dependent chain of mixed tiny ops (mul, small "
        "mm, add, amax, index_select; each allocates its output) issued eagerly (line slope over N"
        + (", queued behind a spin kernel)" if is_gpu else "; cpu: dispatch plus negligible work)")
        + f"; the identical-op tight loop x.add_(1.0) gives {tight_us:.2f} us (fit 'launch_eager_tight')"
        if chain_eager is not None
        else "empirical.launch_eager_us = host seconds per x.add_(1.0) in a tight loop (no dependent-chain "
        "rows in this launch table)"
    ]
    gemm_counts = column(rows, "n_kernels", kind="eager_gemm_host")
    eager_gemm: fit.FitResult | None = None
    gemm_us: float | None = None
    gemm_notes: list[str] = []
    if len(gemm_counts) >= 2:
        eager_gemm = fit.fit_line(gemm_counts, column(rows, "seconds", kind="eager_gemm_host"))
        gemm_us = max(eager_gemm.params["slope"], 0.0) * 1e6
        shape = next(r for r in rows if r.get("kind") == "eager_gemm_host")
        gemm_notes.append(
            f"empirical.launch_eager_gemm_us = host seconds per call of N back-to-back eager "
            f"x[{shape.get('gemm_m')},{shape.get('gemm_k')}] @ W[{shape.get('gemm_k')},{shape.get('gemm_n')}] {shape.get('dtype')} "
            "GEMMs (line slope over N" + (", queued behind a spin kernel)" if is_gpu else "; cpu: dispatch)")
        )
    else:
        gemm_notes.append(
            "empirical.launch_eager_gemm_us not measured in this launch table (no eager_gemm_host rows): "
            "left unset, so GEMMs are charged launch_eager_us like any kernel"
        )
    if not is_gpu:
        return LaunchParams(
            launch_eager_us=eager_us,
            kernel_fixed_latency_us=eager_us,
            launch_graph_gap_us=0.0,
            graph_launch_us=0.0,
            sync_us=0.0,
            eager=eager,
            graph=None,
            notes=(
                "cpu: launch_eager_us = kernel_fixed_latency_us = measured per-op dispatch cost: the host thread "
                "that dispatches also runs the op, so each op costs its dispatch plus its work, in sequence",
                "cpu: no graph replay and no device sync: launch_graph_gap_us = graph_launch_us = sync_us = 0",
                *eager_notes,
                *gemm_notes,
            ),
            launch_eager_gemm_us=gemm_us,
            eager_gemm=eager_gemm,
            eager_tight=eager_tight,
        )
    graph = fit.fit_line(
        column(rows, "n_kernels", kind="graph_device"), column(rows, "seconds", kind="graph_device")
    )
    per_kernel_graph_us = max(graph.params["slope"], 0.0) * 1e6
    single = float(np.median(column(rows, "seconds", kind="single_kernel")))
    empty = float(np.median(column(rows, "seconds", kind="empty_events")))
    isolated_us = min(max(single - empty, 0.0) * 1e6, per_kernel_graph_us)
    # The gap: what identical back-to-back replayed kernels cost beyond one isolated kernel (0 where the
    # GPU pipelines them faster than one kernel's latency).
    gap_us = max(per_kernel_graph_us - isolated_us, 0.0)
    chain = _line(rows, "chain_graph_device")
    if chain is not None:
        chain_us = max(chain.params["slope"], 0.0) * 1e6
        # Graph replay charges each kernel gap + fixed + work; the chain's work (4x64 activations, a 64x64
        # weight: ~10 KiB per op, nanoseconds at any GPU bandwidth) is not subtracted, so a replayed chain
        # of tiny dependent kernels costs fixed + gap = the measured chain slope per kernel.
        fixed_us = max(chain_us - gap_us, 0.0)
        graph_notes = [
            f"kernel_fixed_latency_us = graph-replay slope per kernel of a DEPENDENT chain of mixed tiny kernels "
            f"(mul, small mm, add, amax, index_select: {chain_us:.3f} us) minus launch_graph_gap_us, so a "
            "replayed dependent chain costs fixed + gap = that slope per kernel (the chain's own roofline work, "
            "~10 KiB per kernel, is negligible and not subtracted); launch_graph_gap_us = identical tiny kernels' "
            f"replay slope ({per_kernel_graph_us:.3f} us) minus one isolated tiny kernel between CUDA events "
            f"({isolated_us:.3f} us), clamped >= 0: identical kernels pipeline back to back, dependent ones "
            "do not"
        ]
    else:
        fixed_us = isolated_us
        failed = [r for r in rows if r.get("kind") == "chain_graph_failed"]
        graph_notes = [
            "kernel_fixed_latency_us = one tiny kernel between CUDA events minus empty events (capped at the "
            "graph per-kernel time); launch_graph_gap_us = graph-replay per-kernel time minus that"
            + (
                f" (the dependent-chain graph capture failed: {failed[0].get('error')})"
                if failed
                else " (no dependent-chain rows in this launch table)"
            )
        ]
    graph_host = column(rows, "seconds", kind="graph_host")
    sync = column(rows, "seconds", kind="sync")
    return LaunchParams(
        launch_eager_us=eager_us,
        kernel_fixed_latency_us=fixed_us,
        launch_graph_gap_us=gap_us,
        graph_launch_us=float(np.median(graph_host)) * 1e6 if len(graph_host) else 0.0,
        sync_us=float(np.median(sync)) * 1e6 if len(sync) else 0.0,
        eager=eager,
        graph=graph,
        notes=(*graph_notes, *eager_notes, *gemm_notes),
        launch_eager_gemm_us=gemm_us,
        eager_gemm=eager_gemm,
        eager_tight=eager_tight,
        chain_graph=chain,
    )


# ---------------------------------------------------------------------------------------------- gemm


def roofline_time_s(
    flops: np.ndarray,
    nbytes: np.ndarray,
    m: np.ndarray,
    peak_flops: float,
    memory_bytes_per_s: float,
    half_bytes: float,
    fixed_s: float,
    e_max: float,
    m_half: float,
    power: float,
) -> np.ndarray:
    """The simulator's cost of a GEMM with efficiency curve e(M) = e_max·Mᵖ/(Mᵖ + m_halfᵖ)."""
    eff = fit.efficiency_curve(m, e_max, m_half, power)
    return fixed_s + np.maximum(flops / (peak_flops * eff), (nbytes + half_bytes) / memory_bytes_per_s)


@dataclass(frozen=True)
class GemmParams:
    dtype: str
    peak_tflops: float  # best measured rate (used as the peak where no datasheet gives one)
    efficiency: GemmEfficiency
    fit: fit.FitResult


def fit_gemm_table(
    rows: list[Row],
    dtype: str,
    peak_tflops: float | None,
    memory_gbps: float,
    half_bytes: float,
    fixed_us: float,
) -> GemmParams:
    """Fit e(M) so the cost model (fixed + max(compute, memory)) reproduces the measured GEMM times.

    Memory-bound points only bound e(M) from below, so the curve is fixed mostly by the compute-bound
    points; the fit is least squares on log time over every shape and M. The stored curve is the fitted
    one evaluated on the measured M grid.
    """
    m = column(rows, "m", dtype=dtype)
    flops = column(rows, "flops", dtype=dtype)
    nbytes = column(rows, "bytes", dtype=dtype)
    t = column(rows, "median_s", dtype=dtype)
    ok = np.isfinite(t) & (t > 0)
    m, flops, nbytes, t = m[ok], flops[ok], nbytes[ok], t[ok]
    if len(m) < 3:
        raise MoesimError("gemm suite", f"too few valid {dtype} GEMM timings to fit", "rerun with --fresh")
    best_tflops = float(np.max(flops / t)) / 1e12
    peak = peak_tflops if peak_tflops else best_tflops
    fixed_s = fixed_us * 1e-6
    bw = memory_gbps * 1e9

    def residual(p: np.ndarray) -> np.ndarray:
        pred = roofline_time_s(
            flops, nbytes, m, peak * 1e12, bw, half_bytes, fixed_s, math.exp(p[0]), math.exp(p[1]), p[2]
        )
        return np.log(pred) - np.log(t)

    best = None
    for m_half0 in (4.0, 32.0, 256.0):
        res = least_squares(
            residual,
            np.array([math.log(0.7 * best_tflops / peak), math.log(m_half0), 1.0]),
            bounds=([math.log(1e-4), math.log(0.05), 0.3], [math.log(1.0), math.log(1e6), 4.0]),
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    e_max, m_half, power = math.exp(best.x[0]), math.exp(best.x[1]), float(best.x[2])
    pred = roofline_time_s(flops, nbytes, m, peak * 1e12, bw, half_bytes, fixed_s, e_max, m_half, power)
    log_r2, log_rmse, _ = fit.goodness(np.log(t), np.log(pred))
    result = fit._result(
        {"e_max": e_max, "m_half": m_half, "power": power, "peak_tflops": peak},
        m,
        t,
        pred,
        log_r2=log_r2,
        log_rmse=log_rmse,
        best_measured_tflops=best_tflops,
    )
    grid = np.unique(m)
    curve = np.clip(fit.efficiency_curve(grid, e_max, m_half, power), 1e-6, 1.0)
    # Monotone in M by construction of the curve; isotonic regression guards against round-off only.
    curve = IsotonicRegression(increasing=True, y_min=1e-6, y_max=1.0).fit_transform(grid, curve)
    # Round for a readable profile first, then cap: rounding after the cap could undo it.
    curve = never_faster_with_more_rows(grid, np.round(curve, 6))
    return GemmParams(
        dtype=dtype,
        peak_tflops=best_tflops,
        efficiency=GemmEfficiency(
            m_tokens=tuple(float(v) for v in grid), efficiency=tuple(float(e) for e in curve)
        ),
        fit=result,
    )


# ---------------------------------------------------------------------------------------------- moe


def fit_moe_table(rows: list[Row]) -> dict[str, fit.FitResult]:
    """Per size class: t = fixed + per_expert·U + per_slot·(M·k), with per-expert effective bandwidth."""
    out: dict[str, fit.FitResult] = {}
    for size_class in ("small", "large"):
        u = column(rows, "distinct", size_class=size_class)
        slots = column(rows, "slots", size_class=size_class)
        t = column(rows, "median_s", size_class=size_class)
        expert_bytes = column(rows, "expert_bytes", size_class=size_class)
        if len(t) < 3:
            continue
        result = fit.fit_plane(np.column_stack([u, slots]), t, ("per_expert_s", "per_slot_s"))
        per_expert = result.params["per_expert_s"]
        extra = dict(result.extra)
        extra["expert_bytes"] = float(expert_bytes[0])
        extra["effective_expert_gbps"] = float(expert_bytes[0] / per_expert / 1e9) if per_expert > 0 else 0.0
        out[size_class] = replace(result, extra=extra)
    return out


# ---------------------------------------------------------------------------------------------- profile


@dataclass
class Measurements:
    """Every suite's rows (absent suites are None) and the context they were measured in."""

    device_name: str
    backend: str  # cpu, cuda, rocm
    dtypes: list[str]
    memory_capacity_bytes: float
    reported_llc_bytes: float
    compute_units: int
    memory: list[Row] | None = None
    launch: list[Row] | None = None
    gemm: list[Row] | None = None
    moe: list[Row] | None = None
    software: dict[str, str] = field(default_factory=dict)
    source: str = "moesim calibrate"
    date: str = ""
    notes: list[str] = field(default_factory=list)


CACHE_PLATEAU_MIN_RATIO = 1.1  # fitted cache / memory bandwidth below this: no cache plateau was measured
_KNOWN_GPUS = ("h200", "h100", "h800", "a100", "a800", "b200", "mi300x", "l40s", "4090", "rtx-pro-6000")


def bundled_match(device_name: str) -> str | None:
    """The bundled profile name for a GPU whose name contains a known part (H200, H100, A100...)."""
    lowered = device_name.lower().replace(" ", "")
    for key in _KNOWN_GPUS:
        if key.replace("-", "") in lowered:
            names = [
                n
                for n in list_profiles()
                if "/" not in n and n.replace("-", "").startswith(key.replace("-", ""))
            ]
            if names:
                return sorted(names, key=len)[0]
    return None


def default_name(device_name: str, backend: str) -> str:
    """A file-friendly profile name such as 'cpu-intel-xeon-processor' or 'nvidia-h200'."""
    slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"\(r\)|\(tm\)", "", device_name.lower())).strip("-")
    return f"cpu-{slug}" if backend == "cpu" else slug


def build_profile(meas: Measurements, name: str) -> tuple[HardwareProfile, dict[str, fit.FitResult]]:
    """Fit every available table and assemble the profile; missing suites fall back where one exists."""
    is_gpu = meas.backend != "cpu"
    notes = list(meas.notes)
    fits: dict[str, fit.FitResult] = {}
    quality: dict[str, dict[str, float]] = {}
    reference: HardwareProfile | None = None
    if is_gpu:
        match = bundled_match(meas.device_name)
        if match:
            reference = load_profile(match)
            notes.append(
                f"datasheet section from the bundled profile '{match}'; empirical values measured against it"
            )

    def record(key: str, result: fit.FitResult) -> None:
        fits[key] = result
        quality[key] = result.quality()

    def fallback(param: str, suite: str, why: str = "missing") -> Any:
        if reference is None:
            raise MoesimError(
                f"{suite} suite",
                f"failed or was not run, and no bundled profile matches {meas.device_name!r} to take {param} from",
                "rerun with that suite included; completed suites' CSVs are reused",
            )
        notes.append(f"empirical.{param}: {suite} suite {why}, value from bundled profile '{reference.name}'")
        return getattr(reference.empirical, param)

    mem = fit_memory_table(meas.memory) if meas.memory else None
    if mem is not None:
        record("memory_cache_knee", mem.knee.fit)
        notes.extend(mem.notes)
        if mem.ramp is not None:
            record("transfer_ramp", mem.ramp)
        if not mem.cache_gbps > mem.memory_gbps:
            notes.append("warning: measured cache bandwidth is not above the memory plateau (noisy run?)")
    # A knee is only identified when the warm sweep shows a cache plateau clearly above the memory one; a
    # read kernel held back by its own fixed latency at cache-sized reads (seen on an H200 with torch.sum)
    # shows none, and the fitted knee is then noise. A GPU with a bundled datasheet falls back for both.
    cache_measured = mem is not None and mem.cache_gbps > CACHE_PLATEAU_MIN_RATIO * mem.memory_gbps
    if mem is not None and not cache_measured and is_gpu and reference is not None:
        notes.append(
            f"memory suite: no cache plateau above the memory one (fitted cache {mem.cache_gbps:.0f} GB/s vs "
            f"memory {mem.memory_gbps:.0f} GB/s, knee {mem.cache_bytes / 2**20:.0f} MiB): the read kernel's "
            "fixed latency hides the cache at cache-sized reads, so cache_bandwidth_gbps and "
            "cache_effective_bytes are not taken from it"
        )
    launch = fit_launch_table(meas.launch, is_gpu) if meas.launch else None
    if launch is not None:
        record("launch_eager", launch.eager)
        if launch.graph is not None:
            record("launch_graph", launch.graph)
        for key, extra_fit in (
            ("launch_eager_gemm", launch.eager_gemm),
            ("launch_eager_tight", launch.eager_tight),
            ("launch_chain_graph", launch.chain_graph),
        ):
            if extra_fit is not None:
                record(key, extra_fit)
        if launch.eager_tight is not None:
            quality["launch_eager_tight"]["slope_us"] = max(launch.eager_tight.params["slope"], 0.0) * 1e6
        notes.extend(launch.notes)

    # Datasheet: the bundled one for a known GPU, otherwise what was measured here.
    memory_gbps_measured = mem.memory_gbps if mem else None
    elementwise_fraction = 1.0
    if not is_gpu and mem is not None and meas.gemm and meas.dtypes:
        gemm_gbps = m1_gemm_streaming_gbps(meas.gemm, meas.dtypes[0])
        if gemm_gbps > mem.memory_gbps:
            memory_gbps_measured, elementwise_fraction = cpu_bandwidths(mem.memory_gbps, gemm_gbps)
            notes.append(
                f"cpu: memory_bandwidth_gbps = the M=1 {meas.dtypes[0]} GEMMs' weight streaming rate "
                f"({gemm_gbps:.2f} GB/s, best over the gemm suite's shapes), above the torch.sum plateau "
                f"({mem.memory_gbps:.2f} GB/s); elementwise_bandwidth_fraction = sum plateau / that rate "
                f"= {elementwise_fraction:.3f}, so non-GEMM kernels stream at the measured sum rate"
            )
    if reference is not None:
        datasheet = reference.datasheet
        node = reference.node
    else:
        if memory_gbps_measured is None:
            fallback("memory_bandwidth_gbps", "memory")
        datasheet = Datasheet(
            device_name=meas.device_name,
            memory_bandwidth_gbps=float(memory_gbps_measured or 0.0),
            memory_capacity_bytes=float(meas.memory_capacity_bytes),
            last_level_cache_bytes=float(meas.reported_llc_bytes or (mem.cache_bytes if mem else 0.0)),
            peak_dense_tflops={},
            compute_units=int(meas.compute_units),
            vendor=_vendor(meas.device_name),
            device_kind="gpu" if is_gpu else "cpu",
        )
        node = NodeSpec(gpus_per_node=1) if not is_gpu else NodeSpec()
        notes.append(
            "datasheet.memory_bandwidth_gbps is the measured streaming plateau (memory_bandwidth_fraction = 1.0)"
        )
        if meas.reported_llc_bytes:
            notes.append(
                "datasheet.last_level_cache_bytes as the OS reports it; the measured knee is cache_effective_bytes"
            )

    # Empirical parameters.
    fraction = (
        min(float(memory_gbps_measured or mem.memory_gbps) / datasheet.memory_bandwidth_gbps, 1.0)
        if mem
        else fallback("memory_bandwidth_fraction", "memory")
    )
    achieved_gbps = datasheet.memory_bandwidth_gbps * fraction
    fixed_us = launch.kernel_fixed_latency_us if launch else fallback("kernel_fixed_latency_us", "launch")
    if mem and mem.ramp:
        half = mem.half_bandwidth_transfer_bytes
    elif mem:
        half = 0.0
        notes.append(
            "empirical.half_bandwidth_transfer_bytes = 0: too few cold single reads (or no warm fixed time) to fit"
        )
    else:
        half = fallback("half_bandwidth_transfer_bytes", "memory")

    peaks = dict(datasheet.peak_dense_tflops)
    gemm_curve: GemmEfficiency | None = None
    if meas.gemm:
        for i, dtype in enumerate(meas.dtypes):
            if not len(column(meas.gemm, "m", dtype=dtype)):
                continue
            g = fit_gemm_table(meas.gemm, dtype, peaks.get(dtype), achieved_gbps, half, fixed_us)
            record(f"gemm_efficiency_{dtype}", g.fit)
            if dtype not in peaks:
                peaks[dtype] = round(g.peak_tflops, 4)
                notes.append(
                    f"datasheet.peak_dense_tflops.{dtype}: best measured GEMM rate (no datasheet figure)"
                )
            if i == 0 or gemm_curve is None:
                gemm_curve = g.efficiency
                notes.append(
                    f"empirical.gemm_efficiency: fitted on {dtype} GEMMs (the primary calibration dtype)"
                )
    if gemm_curve is None:
        gemm_curve = fallback("gemm_efficiency", "gemm")
    if not peaks:
        raise MoesimError(
            "gemm suite", "no GEMM rate measured and no datasheet peak to use", "rerun the gemm suite"
        )
    datasheet = replace(datasheet, peak_dense_tflops=peaks)

    if meas.moe:
        for size_class, result in fit_moe_table(meas.moe).items():
            record(f"moe_{size_class}", result)

    empirical = Empirical(
        memory_bandwidth_fraction=round(float(fraction), 6),
        elementwise_bandwidth_fraction=round(float(elementwise_fraction), 6),
        cache_bandwidth_gbps=round(float(mem.cache_gbps), 3)
        if mem and (cache_measured or reference is None)
        else fallback(
            "cache_bandwidth_gbps", "memory", "missing" if mem is None else "shows no cache plateau"
        ),
        cache_effective_bytes=float(round(mem.cache_bytes))
        if mem and (cache_measured or reference is None)
        else fallback(
            "cache_effective_bytes", "memory", "missing" if mem is None else "shows no cache plateau"
        ),
        half_bandwidth_transfer_bytes=float(round(half)),
        kernel_fixed_latency_us=round(float(fixed_us), 4),
        launch_eager_us=round(launch.launch_eager_us, 4) if launch else fallback("launch_eager_us", "launch"),
        launch_graph_gap_us=round(launch.launch_graph_gap_us, 4)
        if launch
        else fallback("launch_graph_gap_us", "launch"),
        graph_launch_us=round(launch.graph_launch_us, 4) if launch else fallback("graph_launch_us", "launch"),
        sync_us=round(launch.sync_us, 4) if launch else fallback("sync_us", "launch"),
        gemm_efficiency=gemm_curve,
        launch_eager_gemm_us=(
            None if launch.launch_eager_gemm_us is None else round(launch.launch_eager_gemm_us, 4)
        )
        if launch
        else fallback("launch_eager_gemm_us", "launch"),
    )
    software = dict(meas.software)
    software.setdefault("device", "cpu" if not is_gpu else meas.backend)
    profile = HardwareProfile(
        name=name,
        datasheet=datasheet,
        empirical=empirical,
        provenance=Provenance(
            kind="measured", source=meas.source, date=meas.date, software=software, assumptions=tuple(notes)
        ),
        node=node,
        fit_quality={
            k: {m: float(v) for m, v in q.items() if math.isfinite(float(v))} for k, q in quality.items()
        },
    )
    return profile, fits


def m1_gemm_streaming_gbps(gemm_rows: list[Row], dtype: str) -> float:
    """Best bytes/s of the M=1 (memory-bound) GEMMs of one dtype: weights streamed by x·W; 0 if none."""
    m = column(gemm_rows, "m", dtype=dtype)
    nbytes = column(gemm_rows, "bytes", dtype=dtype)
    t = column(gemm_rows, "median_s", dtype=dtype)
    ok = (m == 1) & np.isfinite(nbytes) & np.isfinite(t) & (t > 0) & (nbytes > 0)
    return float(np.max(nbytes[ok] / t[ok])) / 1e9 if ok.any() else 0.0


def cpu_bandwidths(sum_plateau_gbps: float, gemm_stream_gbps: float) -> tuple[float, float]:
    """CPU (memory bandwidth, elementwise fraction): the faster streaming rate, and the sum plateau's share."""
    memory_gbps = max(sum_plateau_gbps, gemm_stream_gbps)
    return memory_gbps, min(sum_plateau_gbps / memory_gbps, 1.0) if memory_gbps > 0 else 1.0


def _vendor(device_name: str) -> str:
    lowered = device_name.lower()
    for vendor in ("nvidia", "amd", "intel", "apple", "arm"):
        if vendor in lowered:
            return vendor
    if "xeon" in lowered or "core" in lowered:
        return "intel"
    if "epyc" in lowered or "ryzen" in lowered or "instinct" in lowered or "mi300" in lowered:
        return "amd"
    return ""


def fit_rows(fits: dict[str, fit.FitResult]) -> list[Row]:
    """Every fit's points as rows (parameter, x, measured, predicted, residual) for the .fit.csv file."""
    rows: list[Row] = []
    for name, result in fits.items():
        for x, pred, res in zip(result.x, result.predicted, result.residuals, strict=False):
            rows.append({"fit": name, "x": x, "measured": pred + res, "predicted": pred, "residual": res})
    return rows
