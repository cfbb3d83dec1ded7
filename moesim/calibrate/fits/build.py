"""Measurement tables → HardwareProfile: the per-suite fits (`fit_memory`, `fit_launch`, `fit_gemm`,
`fit_moe`) assembled with the datasheet section. Pure: no torch, no timing.

Each suite's part fits its table, records the fit and its notes, and says which profile fields it sets;
a suite that is missing (or, for the cache, shows no plateau) falls back to the bundled profile of a known
GPU, with a note, or stops with one message naming the suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from moesim.calibrate.fits import drift
from moesim.calibrate.fits import primitives as fit
from moesim.calibrate.fits.gemm import (
    at_suite_reference,
    cpu_bandwidths,
    fit_gemm_points,
    m1_gemm_streaming_gbps,
)
from moesim.calibrate.fits.launch import LaunchParams, fit_launch_table
from moesim.calibrate.fits.memory import MemoryParams, fit_memory_table, transcendental_rates
from moesim.calibrate.fits.moe import fit_moe_table
from moesim.calibrate.fits.primitives import Row
from moesim.calibrate.suites.timing import name_slug
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile, list_profiles, load_profile
from moesim.simulator.hardware.sections import Datasheet, Empirical, GemmEfficiency, NodeSpec, Provenance


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
    probes: list[drift.ProbeSample] = field(default_factory=list)  # labelled before:<suite> / after:<suite>
    probe_plan: dict[str, float] = field(default_factory=dict)  # the probe's sizes (ProbePlan.figures)
    # Whether each suite's figures are brought to the run's median probe speed (drift.DRIFT_NORMALISATION).
    normalise_drift: bool = drift.DRIFT_NORMALISATION


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
    slug = name_slug(device_name)
    return f"cpu-{slug}" if backend == "cpu" else slug


@dataclass
class _Assembly:
    """What the suites' parts accumulate: fits with their quality, notes, and the bundled fallback."""

    meas: Measurements
    reference: HardwareProfile | None
    notes: list[str]
    fits: dict[str, fit.FitResult] = field(default_factory=dict)
    quality: dict[str, dict[str, float]] = field(default_factory=dict)

    def record(self, key: str, result: fit.FitResult) -> None:
        self.fits[key] = result
        self.quality[key] = result.quality()

    def fallback(self, param: str, suite: str, why: str = "missing") -> Any:
        """The bundled profile's value of empirical.`param` (with a note), or one error naming the suite."""
        if self.reference is None:
            raise MoesimError(
                f"{suite} suite",
                f"failed or was not run, and no bundled profile matches {self.meas.device_name!r} to take "
                f"{param} from",
                "rerun with that suite included; completed suites' CSVs are reused",
            )
        self.notes.append(
            f"empirical.{param}: {suite} suite {why}, value from bundled profile '{self.reference.name}'"
        )
        return getattr(self.reference.empirical, param)


def _reference(meas: Measurements, notes: list[str]) -> HardwareProfile | None:
    """The bundled profile of a known GPU (its datasheet is used, its empirical values are fallbacks)."""
    match = bundled_match(meas.device_name) if meas.backend != "cpu" else None
    if not match:
        return None
    notes.append(
        f"datasheet section from the bundled profile '{match}'; empirical values measured against it"
    )
    return load_profile(match)


def _normalised(meas: Measurements, notes: list[str]) -> tuple[Measurements, dict[str, drift.SuiteDrift]]:
    """The measurements with the launch and GEMM suites' times brought to the run's median machine speed
    (the probes before and after each suite; `drift.py`) when `meas.normalise_drift`, and each suite's drift.
    Unchanged without probes or without normalisation (the drifts are then reported only)."""
    median, drifts = drift.suite_drifts(meas.probes, meas.backend != "cpu")
    if median is None or not drifts:
        return meas, {}
    moved = drift.spread(meas.probes)
    how = (
        "each suite normalised to the median where it moved beyond the probe's noise ("
        + ", ".join(
            f"{d.suite} x" + "/".join(f"{v:.3f}" for v in d.factor.as_dict().values())
            for d in drifts.values()
        )
        + " "
        + "/".join(drift.PARTS)
        + "; moe fits are diagnostics and stay raw)"
        if meas.normalise_drift
        else "suites fitted as measured (normalisation off)"
    )
    notes.append(
        f"drift probe ({len(meas.probes)} probes): median memory {median.memory_gbps:.3g} GB/s, compute "
        f"{median.compute_tflops:.3g} TFLOP/s, dispatch {median.dispatch_us:.3g} us/op, streaming GEMM "
        f"{median.stream_gemm_tflops:.3g} TFLOP/s; spread over the run "
        "(max - min) / median: "
        + ", ".join(f"{part} {value:.1%}" for part, value in moved.items())
        + "; one probe's noise (standard error of its median): "
        + ", ".join(f"{part} {noise:.1%}" for part, noise in drift.typical_noise(meas.probes).items())
        + "; "
        + how
    )
    off = [(d, part) for d in drifts.values() for part in d.parts if d.factor.as_dict()[part] != 1.0]
    if off:
        notes.append(
            "warning: the machine's speed during "
            + ", ".join(
                f"the {d.suite} suite ({part} x{1 / d.factor.as_dict()[part]:.3f})" for d, part in off
            )
            + " differed from the run's median beyond the probe's noise: "
            + (
                "those figures are brought to the median"
                if meas.normalise_drift
                else "those figures carry it"
            )
        )
    drifted = [d for d in drifts.values() if d.drifted]
    if drifted:
        notes.append(
            "warning: the machine drifted beyond the probe's noise during "
            + ", ".join(f"the {d.suite} suite ({d.drift:.1%} > {d.threshold:.1%})" for d in drifted)
            + " (repeated once, the calmer attempt kept): those figures carry that drift, and a later run on this "
            "machine may see another speed"
        )
    if not meas.normalise_drift:
        return meas, {suite: replace(d, factor=drift.SAME_SPEED) for suite, d in drifts.items()}
    launch, gemm = meas.launch, meas.gemm
    if launch and "launch" in drifts:
        launch = drift.normalise_launch_rows(launch, drifts["launch"].factor, meas.backend != "cpu")
    if gemm and "gemm" in drifts:
        d = drifts["gemm"]
        gemm = drift.normalise_gemm_rows(gemm, d.factor, drift.between_sample(d.before, d.after))
    return replace(meas, launch=launch, gemm=gemm), drifts


GEMM_REFERENCE_KEY = drift.GEMM_REFERENCE_KEY


def _at_suite_reference(meas: Measurements, notes: list[str]) -> tuple[Measurements, dict[str, float]]:
    """The GEMM suite's points brought to the suite's median machine speed by the reference it read in every
    round (`fits.gemm.at_suite_reference`), with its figures for the profile; unchanged without one."""
    if not meas.gemm:
        return meas, {}
    rows, figures = at_suite_reference(meas.gemm)
    if not figures:
        return meas, {}
    notes.append(
        f"gemm suite: each point at the suite's median machine speed, the probe's streaming GEMM read in every "
        f"round ({figures['reference_rounds']:.0f} rounds: median "
        f"{figures['reference_stream_gemm_tflops'] * 1e3:.3g} GFLOP/s, spread {figures['reference_spread']:.1%}, "
        f"one round's scatter {figures['reference_scatter']:.1%}; "
        f"{figures['reference_rounds_corrected']:.0f} rounds beyond that noise corrected)"
    )
    return replace(meas, gemm=rows), figures


def _memory_part(asm: _Assembly, drifts: dict[str, drift.SuiteDrift]) -> tuple[MemoryParams | None, bool]:
    """(memory fit, whether it measured a cache plateau) from the memory suite, if it ran; its plateaus at
    the run's median machine speed (memory plateau × the memory factor, cache plateau × the compute one)."""
    meas = asm.meas
    mem = fit_memory_table(meas.memory) if meas.memory else None
    if mem is None:
        return None, False
    if "memory" in drifts:
        factor = drifts["memory"].factor
        mem = replace(
            mem, memory_gbps=mem.memory_gbps * factor.memory, cache_gbps=mem.cache_gbps * factor.compute
        )
    asm.record("memory_cache_knee", mem.knee.fit)
    asm.quality["memory_cache_knee"].update(mem.confidence())
    asm.notes.extend(mem.notes)
    if mem.ramp is not None:
        asm.record("transfer_ramp", mem.ramp)
    if not mem.cache_gbps > mem.memory_gbps:
        asm.notes.append("warning: measured cache bandwidth is not above the memory plateau (noisy run?)")
    # A knee is only identified when the warm sweep shows a cache plateau clearly above the memory one; a
    # read kernel held back by its own fixed latency at cache-sized reads (seen on an H200 with torch.sum)
    # shows none, and the fitted knee is then noise. A GPU with a bundled datasheet falls back for both.
    cache_measured = mem.cache_gbps > CACHE_PLATEAU_MIN_RATIO * mem.memory_gbps
    if not cache_measured and meas.backend != "cpu" and asm.reference is not None:
        asm.notes.append(
            f"memory suite: no cache plateau above the memory one (fitted cache {mem.cache_gbps:.0f} GB/s vs "
            f"memory {mem.memory_gbps:.0f} GB/s, knee {mem.cache_bytes / 2**20:.0f} MiB): the read kernel's "
            "fixed latency hides the cache at cache-sized reads, so cache_bandwidth_gbps and "
            "cache_effective_bytes are not taken from it"
        )
    return mem, cache_measured


def _transcendental_part(asm: _Assembly, drifts: dict[str, drift.SuiteDrift]) -> dict[str, float] | None:
    """Each transcendental op's element rate from the memory suite's rows (a CPU's), at the run's median
    machine speed (× the compute factor: the evaluation runs on the core, like a cache read); None: none."""
    rates = transcendental_rates(asm.meas.memory or [])
    if not rates:
        return None
    factor = drifts["memory"].factor.compute if "memory" in drifts else 1.0
    rates = {op: round(rate * factor, 1) for op, rate in rates.items()}
    asm.notes.append(
        "empirical.transcendental_elements_per_s: the memory suite's in-cache float32 "
        + ", ".join(f"{op} {rate / 1e9:.2f}" for op, rate in rates.items())
        + " G elements/s; an element-wise kernel of that function computes for at least its elements / rate"
    )
    return rates


def _launch_part(asm: _Assembly) -> LaunchParams | None:
    """Dispatch, fixed latency, graph gap and sync from the launch suite, if it ran."""
    meas = asm.meas
    launch = fit_launch_table(meas.launch, meas.backend != "cpu") if meas.launch else None
    if launch is None:
        return None
    asm.record("launch_eager", launch.eager)
    if launch.graph is not None:
        asm.record("launch_graph", launch.graph)
    for key, extra_fit in (
        ("launch_eager_gemm", launch.eager_gemm),
        ("launch_eager_tight", launch.eager_tight),
        ("launch_chain_graph", launch.chain_graph),
    ):
        if extra_fit is not None:
            asm.record(key, extra_fit)
    if launch.eager_tight is not None:
        asm.quality["launch_eager_tight"]["slope_us"] = max(launch.eager_tight.params["slope"], 0.0) * 1e6
    eager = asm.quality["launch_eager"]
    if "slope_low" in eager:  # the per-op cost's 95% confidence interval, in the profile's unit
        eager["slope_low_us"], eager["slope_high_us"] = eager["slope_low"] * 1e6, eager["slope_high"] * 1e6
    asm.notes.extend(launch.notes)
    return launch


def _cpu_streaming_part(asm: _Assembly, mem: MemoryParams | None) -> tuple[float | None, float]:
    """(memory bandwidth GB/s, element-wise fraction): on a CPU the M = 1 GEMMs' weight stream, with
    torch.sum's plateau as the element-wise fraction of it; elsewhere the plateau."""
    meas = asm.meas
    if mem is None:
        return None, 1.0
    if meas.backend == "cpu" and meas.gemm and meas.dtypes:
        gemm_gbps = m1_gemm_streaming_gbps(meas.gemm, meas.dtypes[0])
        memory_gbps, elementwise_fraction = cpu_bandwidths(mem.memory_gbps, gemm_gbps)
        if memory_gbps == gemm_gbps:
            asm.notes.append(
                f"cpu: memory_bandwidth_gbps = the M=1 {meas.dtypes[0]} GEMMs' weight streaming rate "
                f"({gemm_gbps:.2f} GB/s, median over the gemm suite's shapes); elementwise_bandwidth_fraction "
                f"= torch.sum plateau ({mem.memory_gbps:.2f} GB/s) / that rate = {elementwise_fraction:.3f}, "
                "so GEMMs stream at the GEMM rate and non-GEMM kernels at the measured sum rate"
            )
            return memory_gbps, elementwise_fraction
    return mem.memory_gbps, 1.0


def _datasheet_part(
    asm: _Assembly, memory_gbps: float | None, mem: MemoryParams | None
) -> tuple[Datasheet, NodeSpec]:
    """The bundled datasheet of a known GPU, otherwise what was measured here."""
    if asm.reference is not None:
        return asm.reference.datasheet, asm.reference.node
    meas = asm.meas
    is_gpu = meas.backend != "cpu"
    if memory_gbps is None:
        asm.fallback("memory_bandwidth_gbps", "memory")
    datasheet = Datasheet(
        device_name=meas.device_name,
        memory_bandwidth_gbps=float(memory_gbps or 0.0),
        memory_capacity_bytes=float(meas.memory_capacity_bytes),
        last_level_cache_bytes=float(meas.reported_llc_bytes or (mem.cache_bytes if mem else 0.0)),
        peak_dense_tflops={},
        compute_units=int(meas.compute_units),
        vendor=_vendor(meas.device_name),
        device_kind="gpu" if is_gpu else "cpu",
    )
    asm.notes.append(
        "datasheet.memory_bandwidth_gbps is the measured streaming plateau (memory_bandwidth_fraction = 1.0)"
    )
    if meas.reported_llc_bytes:
        asm.notes.append(
            "datasheet.last_level_cache_bytes as the OS reports it; the measured knee is cache_effective_bytes"
        )
    return datasheet, NodeSpec(gpus_per_node=1) if not is_gpu else NodeSpec()


def _gemm_part(
    asm: _Assembly, peaks: dict[str, float], achieved_gbps: float, half: float, fixed_us: float
) -> tuple[dict[str, float], GemmEfficiency]:
    """(peaks with measured rates where no datasheet gives one, the primary dtype's efficiency curve)."""
    meas = asm.meas
    peaks = dict(peaks)
    gemm_curve: GemmEfficiency | None = None
    for dtype in meas.dtypes if meas.gemm else []:
        assert meas.gemm is not None
        if not len(fit.column(meas.gemm, "m", dtype=dtype)):
            continue
        g = fit_gemm_points(meas.gemm, dtype, peaks.get(dtype), achieved_gbps, half, fixed_us)
        asm.record(f"gemm_efficiency_{dtype}", g.fit)
        if dtype not in peaks:
            peaks[dtype] = round(g.peak_tflops, 4)
            asm.notes.append(
                f"datasheet.peak_dense_tflops.{dtype}: best measured GEMM rate (no datasheet figure)"
            )
        if gemm_curve is None:  # the first dtype measured: the primary calibration dtype
            gemm_curve = g.efficiency
            asm.notes.append(
                f"empirical.gemm_efficiency: measured on {dtype} GEMMs (the primary calibration dtype), one "
                "value per measured M (fits.gemm.fit_gemm_points)"
            )
    if gemm_curve is None:
        gemm_curve = asm.fallback("gemm_efficiency", "gemm")
    if not peaks:
        raise MoesimError(
            "gemm suite", "no GEMM rate measured and no datasheet peak to use", "rerun the gemm suite"
        )
    return peaks, gemm_curve


def _moe_part(asm: _Assembly) -> None:
    """The MoE layer fits: recorded for their residuals (the cost model predicts the layer from its kernels)."""
    if asm.meas.moe:
        for size_class, result in fit_moe_table(asm.meas.moe).items():
            asm.record(f"moe_{size_class}", result)


def build_profile(meas: Measurements, name: str) -> tuple[HardwareProfile, dict[str, fit.FitResult]]:
    """Fit every available table and assemble the profile; missing suites fall back where one exists."""
    notes = list(meas.notes)
    meas, reference = _at_suite_reference(meas, notes)
    meas, drifts = _normalised(meas, notes)
    asm = _Assembly(meas, _reference(meas, notes), notes)
    mem, cache_measured = _memory_part(asm, drifts)
    launch = _launch_part(asm)
    memory_gbps, elementwise_fraction = _cpu_streaming_part(asm, mem)
    datasheet, node = _datasheet_part(asm, memory_gbps, mem)
    fraction = (
        min(float(memory_gbps) / datasheet.memory_bandwidth_gbps, 1.0)
        if mem is not None and memory_gbps is not None
        else asm.fallback("memory_bandwidth_fraction", "memory")
    )
    fixed_us = launch.kernel_fixed_latency_us if launch else asm.fallback("kernel_fixed_latency_us", "launch")
    if mem and mem.ramp:
        half = mem.half_bandwidth_transfer_bytes
    elif mem:
        half = 0.0
        notes.append(
            "empirical.half_bandwidth_transfer_bytes = 0: too few cold single reads (or no warm fixed time) to fit"
        )
    else:
        half = asm.fallback("half_bandwidth_transfer_bytes", "memory")
    achieved_gbps = datasheet.memory_bandwidth_gbps * fraction
    peaks, gemm_curve = _gemm_part(asm, datasheet.peak_dense_tflops, achieved_gbps, half, fixed_us)
    _moe_part(asm)
    cache_taken = mem is not None and (cache_measured or asm.reference is None)
    why_no_cache = "missing" if mem is None else "shows no cache plateau"

    def launch_value(param: str) -> Any:
        if launch is None:
            return asm.fallback(param, "launch")
        value = getattr(launch, param)
        return None if value is None else round(value, 4)

    empirical = Empirical(
        memory_bandwidth_fraction=round(float(fraction), 6),
        elementwise_bandwidth_fraction=round(float(elementwise_fraction), 6),
        transcendental_elements_per_s=_transcendental_part(asm, drifts),
        cache_bandwidth_gbps=round(float(mem.cache_gbps), 3)
        if mem and cache_taken
        else asm.fallback("cache_bandwidth_gbps", "memory", why_no_cache),
        cache_effective_bytes=float(round(mem.cache_bytes))
        if mem and cache_taken
        else asm.fallback("cache_effective_bytes", "memory", why_no_cache),
        half_bandwidth_transfer_bytes=float(round(half)),
        kernel_fixed_latency_us=round(float(fixed_us), 4),
        launch_eager_us=launch_value("launch_eager_us"),
        launch_graph_gap_us=launch_value("launch_graph_gap_us"),
        graph_launch_us=launch_value("graph_launch_us"),
        sync_us=launch_value("sync_us"),
        gemm_efficiency=gemm_curve,
        launch_eager_gemm_us=launch_value("launch_eager_gemm_us"),
    )
    if reference:
        asm.quality[GEMM_REFERENCE_KEY] = reference
    if meas.probes:
        asm.quality[drift.PROBE_KEY] = drift.record(
            meas.probes, drifts, meas.probe_plan, meas.normalise_drift
        )
    software = dict(meas.software)
    software.setdefault("device", meas.backend)
    profile = HardwareProfile(
        name=name,
        datasheet=replace(datasheet, peak_dense_tflops=peaks),
        empirical=empirical,
        provenance=Provenance(
            kind="measured", source=meas.source, date=meas.date, software=software, assumptions=tuple(notes)
        ),
        node=node,
        fit_quality={
            k: {m: float(v) for m, v in q.items() if math.isfinite(float(v))} for k, q in asm.quality.items()
        },
    )
    return profile, asm.fits


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
