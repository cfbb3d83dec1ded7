"""The hardware profile: datasheet facts, empirical cost-model parameters, node layout and provenance.

Datasheet peaks and measured corrections live apart so a reader can see which numbers are facts and which
are fitted. Units are in the field names; `_gbps` means 1e9 bytes per second.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from moesim.atomic import atomic_write_text
from moesim.profile_files import (
    PROFILE_SUFFIX,
    ProfileTable,
    field_error,
    profile_sections,
    read_fit_quality,
    read_profile_file,
)
from moesim.simulator.hardware.defaults import MLA_QUERY_TILE_ROWS, execution_facts
from moesim.simulator.hardware.sections import (
    ALL_TO_ALL_MODES,
    ATTENTION_KERNEL_KINDS,
    EXECUTION_FACTS,
    MAX_TRANSCENDENTAL_ELEMENTS_PER_S,
    TRANSCENDENTAL_OPS,
    AllToAllTerms,
    AttentionTerms,
    Datasheet,
    Empirical,
    ExpertGemmTerms,
    GemmEfficiency,
    NodeSpec,
    Provenance,
)
from moesim.toml_files import dump_toml

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


@dataclass(frozen=True)
class HardwareProfile:
    """Everything the cost model knows about one accelerator."""

    name: str
    datasheet: Datasheet
    empirical: Empirical
    provenance: Provenance
    node: NodeSpec = field(default_factory=NodeSpec)
    fit_quality: dict[str, dict[str, float]] = field(default_factory=dict)  # parameter -> {r2, rmse, ...}

    def __post_init__(self) -> None:
        missing = [name for name in EXECUTION_FACTS if getattr(self.empirical, name) is None]
        if missing:
            facts = execution_facts(self.datasheet, self.empirical)
            filled = replace(self.empirical, **{name: facts[name] for name in missing})  # type: ignore[arg-type]
            object.__setattr__(self, "empirical", filled)

    @property
    def is_cpu(self) -> bool:
        """True for a profile of a CPU (calibrated on one), whose "HBM" is DRAM and "launch" is dispatch."""
        return self.datasheet.device_kind == "cpu" or self.provenance.software.get("device", "") == "cpu"

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """Achieved streaming bandwidth from device memory."""
        return self.datasheet.memory_bandwidth_gbps * 1e9 * self.empirical.memory_bandwidth_fraction

    @property
    def memory_capacity_bytes(self) -> float:
        return self.datasheet.memory_capacity_bytes

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound (bf16 peak FLOP/s ÷ bandwidth)."""
        return self.peak_flops_per_s("bf16") / self.memory_bandwidth_bytes_per_s

    @property
    def gemm_panel_rows(self) -> int:
        return int(self.empirical.gemm_panel_rows or 0)

    @property
    def gemm_tile_m_expert(self) -> int:
        return int(self.empirical.gemm_tile_m_expert or 0)

    @property
    def gemm_tile_m_dense(self) -> int:
        return int(self.empirical.gemm_tile_m_dense or 0)

    @property
    def mla_query_tile_rows(self) -> int:
        """Rows of one MLA attention tile (`hardware.defaults.MLA_QUERY_TILE_ROWS` unless the profile says)."""
        rows = self.empirical.mla_query_tile_rows
        return MLA_QUERY_TILE_ROWS if rows is None else int(rows)

    def compute_dtype(self, dtype: str) -> str:
        """The dtype whose peak times arithmetic in `dtype`: its own where the profile has one; otherwise, on a
        CPU, fp32 (torch on a CPU without native bf16/fp16/fp8 units converts to fp32 and accumulates there, and
        calibration measures fp32 by default), and on a GPU bf16 (no faster path than its bf16 tensor cores)."""
        peaks = self.datasheet.peak_dense_tflops
        if dtype in peaks:
            return dtype
        preferred = ("fp32", "bf16") if self.is_cpu else ("bf16", "fp16", "fp32")
        return next((d for d in preferred if d in peaks), next(iter(peaks)))

    def compute_rule(self, dtypes: Iterable[str]) -> str | None:
        """The sentence saying which of `dtypes` have no peak of their own here and at what rate they are timed."""
        borrowed = sorted({d for d in dtypes if self.compute_dtype(d) != d})
        if not borrowed:
            return None
        used = self.compute_dtype(borrowed[0])
        reason = (
            f"torch computes them in {used} on a CPU without native units; calibrate with --dtype to measure them"
            if self.is_cpu
            else f"the profile has no peak of their own; {used} is the device's tensor-core rate"
        )
        return f"{', '.join(borrowed)} arithmetic timed at the {used} peak ({reason})"

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak for arithmetic in `dtype` (see `compute_dtype` for dtypes the profile has no peak for)."""
        return self.datasheet.peak_dense_tflops[self.compute_dtype(dtype)] * 1e12


# --- Profile files ------------------------------------------------------------------------------------------
#
# One TOML file per accelerator: [datasheet] (facts), [empirical] (cost-model parameters), [node],
# [provenance], optional [fit_quality.<param>]. Bundled files live in moesim/hardware_profiles/, measured
# ones in moesim/hardware_profiles/measured/ (addressed as "measured/<name>"), silicon ones (fitted to
# aiconfigurator-core's tables) in moesim/hardware_profiles/silicon/ ("silicon/<system>-<framework>").

MEASURED_PREFIX = "measured/"
_PROFILE_KINDS = ("datasheet", "measured", "derived", "silicon")
_DEVICE_KINDS = ("gpu", "cpu")
_BYTES_FIELDS = (
    "memory_capacity_bytes",
    "last_level_cache_bytes",
    "cache_effective_bytes",
    "half_bandwidth_transfer_bytes",
)


def _bundled_dir() -> Traversable:
    return resources.files("moesim").joinpath("hardware_profiles")


def _plain_number(key: str, value: float) -> float | int:
    """Byte counts are written as integers when they are whole, so files read as exact sizes."""
    if key in _BYTES_FIELDS and float(value).is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return float(value)


def _curve_dict(curve: GemmEfficiency) -> dict[str, list[float]]:
    return {
        "m_tokens": [float(m) for m in curve.m_tokens],
        "efficiency": [float(e) for e in curve.efficiency],
    }


def profile_to_dict(p: HardwareProfile) -> dict[str, Any]:
    """The profile as plain TOML-ready data (the inverse of `profile_from_dict`)."""
    ds = p.datasheet
    datasheet: dict[str, Any] = {
        "device_name": ds.device_name,
        "vendor": ds.vendor,
        "device_kind": ds.device_kind,
        "memory_bandwidth_gbps": float(ds.memory_bandwidth_gbps),
        "memory_capacity_bytes": _plain_number("memory_capacity_bytes", ds.memory_capacity_bytes),
        "last_level_cache_bytes": _plain_number("last_level_cache_bytes", ds.last_level_cache_bytes),
        "cache_partitions": int(ds.cache_partitions),
        "compute_units": int(ds.compute_units),
        "scale_up_link_gbps": float(ds.scale_up_link_gbps),
        "peak_dense_tflops": {k: float(v) for k, v in ds.peak_dense_tflops.items()},
    }
    em = p.empirical
    empirical: dict[str, Any] = {}
    for f in fields(Empirical):
        if f.name in (
            "gemm_efficiency",
            "expert_gemm",
            "attention",
            "gemm_efficiency_by_dtype",
            "transcendental_elements_per_s",
        ):
            continue
        value = getattr(em, f.name)
        if value is None:  # optional parameter not set: TOML has no null, so the key is left out
            continue
        empirical[f.name] = _plain_number(f.name, value)
    empirical["gemm_efficiency"] = _curve_dict(em.gemm_efficiency)
    if em.gemm_efficiency_by_dtype is not None:
        empirical["gemm_efficiency_by_dtype"] = {
            dtype: _curve_dict(curve) for dtype, curve in em.gemm_efficiency_by_dtype.items()
        }
    if em.expert_gemm is not None:
        empirical["expert_gemm"] = {
            dtype: {f.name: float(getattr(terms, f.name)) for f in fields(ExpertGemmTerms)}
            for dtype, terms in em.expert_gemm.items()
        }
    if em.attention is not None:
        empirical["attention"] = {
            kind: {f.name: float(getattr(terms, f.name)) for f in fields(AttentionTerms)}
            for kind, terms in em.attention.items()
        }
    if em.transcendental_elements_per_s is not None:
        empirical["transcendental_elements_per_s"] = {
            op: float(rate) for op, rate in em.transcendental_elements_per_s.items()
        }
    node: dict[str, Any] = {
        "gpus_per_node": int(p.node.gpus_per_node),
        "scale_up_bandwidth_gbps": float(p.node.scale_up_bandwidth_gbps),
        "scale_up_latency_us": float(p.node.scale_up_latency_us),
        "scale_out_bandwidth_gbps": float(p.node.scale_out_bandwidth_gbps),
        "scale_out_latency_us": float(p.node.scale_out_latency_us),
    }
    if p.node.all_to_all is not None:
        node["all_to_all"] = {
            mode: {f.name: float(getattr(terms, f.name)) for f in fields(AllToAllTerms)}
            for mode, terms in p.node.all_to_all
        }
    pv = p.provenance
    provenance: dict[str, Any] = {
        "kind": pv.kind,
        "source": pv.source,
        "date": pv.date,
        "assumptions": list(pv.assumptions),
        "software": dict(pv.software),
    }
    out: dict[str, Any] = {
        "name": p.name,
        "datasheet": datasheet,
        "empirical": empirical,
        "node": node,
        "provenance": provenance,
    }
    if p.fit_quality:
        out["fit_quality"] = {k: {m: float(v) for m, v in q.items()} for k, q in p.fit_quality.items()}
    return out


# Physical ceilings: a profile value above one is a typo or a unit slip, not a device, so it is refused where it
# enters. Each sits 100x or more above the largest part bundled in 2026 (HBM 8 TB/s on B300 / MI355X, dense fp4
# 15 PFLOP/s on B300, 288 GB of HBM, NVLink 5 at 1.8 TB/s; on-chip cache bandwidths of tens of TB/s; CPU
# profiles with a few TB of RAM) and far below where the arithmetic would overflow.
MAX_BANDWIDTH_GBPS = 1e6  # 1 PB/s: memory, cache and link bandwidths
MAX_PEAK_TFLOPS = 1e6  # 1 EFLOP/s dense, any dtype
MAX_PROFILE_BYTES = 1e15  # 1 PB: capacities, cache sizes, transfer sizes
MAX_LATENCY_US = 1e6  # one second per kernel, launch, gap or sync


def _read_datasheet(source: str, data: Any) -> Datasheet:
    r = ProfileTable(source, "datasheet", data, tuple(f.name for f in fields(Datasheet)))
    peaks = r.table("peak_dense_tflops")
    if not peaks.data:
        raise r.error("peak_dense_tflops", "is an empty table", "add the dense peaks, e.g. bf16 = 989.0")
    return Datasheet(
        device_name=r.string("device_name", nonempty=True),
        memory_bandwidth_gbps=r.number("memory_bandwidth_gbps", maximum=MAX_BANDWIDTH_GBPS),
        memory_capacity_bytes=r.number("memory_capacity_bytes", maximum=MAX_PROFILE_BYTES),
        last_level_cache_bytes=r.number("last_level_cache_bytes", maximum=MAX_PROFILE_BYTES),
        peak_dense_tflops={str(dtype): peaks.number(dtype, maximum=MAX_PEAK_TFLOPS) for dtype in peaks.data},
        compute_units=r.integer("compute_units", 0, minimum=0),
        scale_up_link_gbps=r.number("scale_up_link_gbps", 0.0, strict=False, maximum=MAX_BANDWIDTH_GBPS),
        vendor=r.string("vendor", ""),
        device_kind=r.choice("device_kind", _DEVICE_KINDS, "gpu"),
        cache_partitions=r.integer("cache_partitions", 1, minimum=1),
    )


def datasheet_from_dict(d: Any, source: str) -> Datasheet:
    """Validate a [datasheet] table (errors name `source` and the field)."""
    return _read_datasheet(source, d)


def _read_gemm_efficiency(r: ProfileTable) -> GemmEfficiency:
    return _read_curve(r.table("gemm_efficiency", ("m_tokens", "efficiency")))


def _read_gemm_efficiency_by_dtype(r: ProfileTable) -> dict[str, GemmEfficiency] | None:
    if not r.has("gemm_efficiency_by_dtype"):
        return None
    by_dtype = r.table("gemm_efficiency_by_dtype")
    return {
        str(dtype): _read_curve(by_dtype.table(dtype, ("m_tokens", "efficiency"))) for dtype in by_dtype.data
    }


def _read_curve(g: ProfileTable) -> GemmEfficiency:
    arrays: dict[str, list[float]] = {}
    for key in ("m_tokens", "efficiency"):
        values = g.value(key)
        if not isinstance(values, list) or not values:
            raise g.error(key, f"is {values!r}, not a non-empty array", f"write {key} = [1.0, ...]")
        arrays[key] = [
            g.check_number(f"{key}[{i}]", v, maximum=1.0 if key == "efficiency" else math.inf)
            for i, v in enumerate(values)
        ]
    m, eff = arrays["m_tokens"], arrays["efficiency"]
    if len(m) != len(eff):
        raise g.error(
            "",
            f"m_tokens has {len(m)} entries but efficiency has {len(eff)}",
            "give one efficiency per token count",
        )
    if any(b <= a for a, b in itertools.pairwise(m)):
        raise g.error(
            "m_tokens", f"is {m!r}, not strictly increasing", "list the token counts in increasing order"
        )
    if m[0] < 1.0:
        raise g.error("m_tokens", f"starts at {m[0]!r}, below 1 token", "start at >= 1 token")
    return GemmEfficiency(m_tokens=tuple(m), efficiency=tuple(eff))


# Bounds of the grouped expert GEMM terms: a fused-MoE launch floor above 1 ms or a per-expert overhead
# above 100 us would be larger than any measured table row's whole time at those sizes.
EXPERT_GEMM_MAX_FIXED_US = 1000.0
EXPERT_GEMM_MAX_PER_EXPERT_US = 100.0


def _read_expert_gemm(r: ProfileTable) -> dict[str, ExpertGemmTerms] | None:
    if not r.has("expert_gemm"):
        return None
    # An empty table is a profile that prices grouped expert GEMMs by the roofline alone (as moesim did before
    # the term existed); leaving the table out gives the documented defaults.
    by_dtype = r.table("expert_gemm")
    out: dict[str, ExpertGemmTerms] = {}
    for dtype in by_dtype.data:
        g = by_dtype.table(dtype, tuple(f.name for f in fields(ExpertGemmTerms)))
        out[str(dtype)] = ExpertGemmTerms(
            fixed_us=g.number("fixed_us", strict=False, maximum=EXPERT_GEMM_MAX_FIXED_US),
            per_expert_us=g.number("per_expert_us", strict=False, maximum=EXPERT_GEMM_MAX_PER_EXPERT_US),
            pair_flops_fraction=g.number("pair_flops_fraction", maximum=1.0),
        )
    return out


# Bounds of the attention kernel terms: a floor above 1 ms or a work unit above 100 us would exceed any measured
# table row's whole time.
ATTENTION_MAX_FIXED_US = 1000.0
ATTENTION_MAX_PER_UNIT_US = 100.0


def _read_attention(r: ProfileTable) -> dict[str, AttentionTerms] | None:
    if not r.has("attention"):
        return None
    by_kind = r.table("attention")
    out: dict[str, AttentionTerms] = {}
    for kind in by_kind.data:
        if kind not in ATTENTION_KERNEL_KINDS:
            raise by_kind.error(
                str(kind), "is not an attention kernel kind", f"kinds: {', '.join(ATTENTION_KERNEL_KINDS)}"
            )
        g = by_kind.table(kind, tuple(f.name for f in fields(AttentionTerms)))
        out[str(kind)] = AttentionTerms(
            fixed_us=g.number("fixed_us", strict=False, maximum=ATTENTION_MAX_FIXED_US),
            per_unit_us=g.number("per_unit_us", strict=False, maximum=ATTENTION_MAX_PER_UNIT_US),
            flops_fraction=g.number("flops_fraction", 0.0, strict=False, maximum=1.0),
        )
    return out


def _read_transcendental(r: ProfileTable) -> dict[str, float] | None:
    if not r.has("transcendental_elements_per_s"):
        return None
    by_op = r.table("transcendental_elements_per_s")
    for op in by_op.data:
        if op not in TRANSCENDENTAL_OPS:
            raise by_op.error(str(op), "is not a transcendental op", f"ops: {', '.join(TRANSCENDENTAL_OPS)}")
    return {str(op): by_op.number(str(op), maximum=MAX_TRANSCENDENTAL_ELEMENTS_PER_S) for op in by_op.data}


def _read_empirical(source: str, data: Any) -> Empirical:
    r = ProfileTable(source, "empirical", data, tuple(f.name for f in fields(Empirical)))
    return Empirical(
        memory_bandwidth_fraction=r.number("memory_bandwidth_fraction", maximum=1.0),
        cache_bandwidth_gbps=r.number("cache_bandwidth_gbps", maximum=MAX_BANDWIDTH_GBPS),
        cache_effective_bytes=r.number("cache_effective_bytes", strict=False, maximum=MAX_PROFILE_BYTES),
        half_bandwidth_transfer_bytes=r.number(
            "half_bandwidth_transfer_bytes", strict=False, maximum=MAX_PROFILE_BYTES
        ),
        kernel_fixed_latency_us=r.number("kernel_fixed_latency_us", strict=False, maximum=MAX_LATENCY_US),
        launch_eager_us=r.number("launch_eager_us", strict=False, maximum=MAX_LATENCY_US),
        launch_graph_gap_us=r.number("launch_graph_gap_us", strict=False, maximum=MAX_LATENCY_US),
        graph_launch_us=r.number("graph_launch_us", strict=False, maximum=MAX_LATENCY_US),
        sync_us=r.number("sync_us", strict=False, maximum=MAX_LATENCY_US),
        gemm_efficiency=_read_gemm_efficiency(r),
        elementwise_bandwidth_fraction=r.number("elementwise_bandwidth_fraction", 1.0),
        launch_eager_gemm_us=r.number("launch_eager_gemm_us", strict=False, maximum=MAX_LATENCY_US)
        if r.has("launch_eager_gemm_us")
        else None,
        vector_flops_fraction=r.number("vector_flops_fraction", maximum=1.0)
        if r.has("vector_flops_fraction")
        else None,
        launch_eager_gap_us=r.number("launch_eager_gap_us", strict=False, maximum=MAX_LATENCY_US)
        if r.has("launch_eager_gap_us")
        else None,
        **{
            name: r.integer(name, minimum=1) if r.has(name) else None
            for name in ("gemm_panel_rows", "gemm_tile_m_expert", "gemm_tile_m_dense")
        },
        mla_query_tile_rows=r.integer("mla_query_tile_rows", minimum=0)
        if r.has("mla_query_tile_rows")
        else None,
        expert_gemm=_read_expert_gemm(r),
        attention=_read_attention(r),
        gemm_efficiency_by_dtype=_read_gemm_efficiency_by_dtype(r),
        transcendental_elements_per_s=_read_transcendental(r),
    )


# Bounds of the all-to-all terms: a dispatch or combine floor above 10 ms exceeds any measured row's whole
# time; bandwidths share the profile's ceiling.
ALL_TO_ALL_MAX_FIXED_US = 10_000.0


def _read_all_to_all(r: ProfileTable) -> tuple[tuple[Any, AllToAllTerms], ...] | None:
    if not r.has("all_to_all"):
        return None
    by_mode = r.table("all_to_all")
    out = []
    for mode in by_mode.data:
        if mode not in ALL_TO_ALL_MODES:
            raise by_mode.error(
                str(mode), "is not an all-to-all mode", f"modes: {', '.join(ALL_TO_ALL_MODES)}"
            )
        g = by_mode.table(mode, tuple(f.name for f in fields(AllToAllTerms)))
        terms = {
            f.name: g.number(f.name, strict=False, maximum=ALL_TO_ALL_MAX_FIXED_US)
            if f.name.endswith("_us")
            else g.number(f.name, maximum=MAX_BANDWIDTH_GBPS)
            for f in fields(AllToAllTerms)
        }
        out.append((mode, AllToAllTerms(**terms)))
    return tuple(out)


def _read_node(source: str, data: Any) -> NodeSpec:
    r = ProfileTable(source, "node", data, tuple(f.name for f in fields(NodeSpec)))
    return NodeSpec(
        gpus_per_node=r.integer("gpus_per_node", minimum=1),
        scale_up_bandwidth_gbps=r.number("scale_up_bandwidth_gbps", strict=False, maximum=MAX_BANDWIDTH_GBPS),
        scale_up_latency_us=r.number("scale_up_latency_us", strict=False, maximum=MAX_LATENCY_US),
        scale_out_bandwidth_gbps=r.number(
            "scale_out_bandwidth_gbps", strict=False, maximum=MAX_BANDWIDTH_GBPS
        ),
        scale_out_latency_us=r.number("scale_out_latency_us", strict=False, maximum=MAX_LATENCY_US),
        all_to_all=_read_all_to_all(r),
    )


def _read_provenance(source: str, data: Any) -> Provenance:
    r = ProfileTable(source, "provenance", data, tuple(f.name for f in fields(Provenance)))
    return Provenance(
        kind=r.choice("kind", _PROFILE_KINDS),
        source=r.string("source", nonempty=True),
        date=r.string("date", ""),
        software=r.versions("software"),
        assumptions=r.strings("assumptions"),
    )


_TOP_LEVEL = ("name", "datasheet", "empirical", "node", "provenance", "fit_quality")


def _check_caches_fit_memory(source: str, ds: Datasheet, em: Empirical) -> None:
    """A cache is a fraction of what it caches: neither the last-level nor the usable cache exceeds memory."""
    for section, name, value in (
        ("datasheet", "last_level_cache_bytes", ds.last_level_cache_bytes),
        ("empirical", "cache_effective_bytes", em.cache_effective_bytes),
    ):
        if value > ds.memory_capacity_bytes:
            raise field_error(
                source,
                f"{section}.{name}",
                f"{value / 2**30:,.1f} GiB is larger than the device memory "
                f"({ds.memory_capacity_bytes / 2**30:,.1f} GiB)",
                "give the cache size in bytes (e.g. 50e6 for 50 MB)",
            )


def profile_from_dict(d: dict[str, Any], source: str) -> HardwareProfile:
    """Build and validate a profile from TOML data; `source` (a file name) prefixes every error message."""
    d, name = profile_sections(source, d, _TOP_LEVEL, ("datasheet", "empirical", "node", "provenance"))
    datasheet = _read_datasheet(source, d["datasheet"])
    empirical = _read_empirical(source, d["empirical"])
    _check_caches_fit_memory(source, datasheet, empirical)
    return HardwareProfile(
        name=name,
        datasheet=datasheet,
        empirical=empirical,
        provenance=_read_provenance(source, d["provenance"]),
        node=_read_node(source, d["node"]),
        fit_quality=read_fit_quality(source, d.get("fit_quality", {})),
    )


BUNDLED_SUBDIRS = ("measured", "silicon")  # measured/<name>: a calibration; silicon/<name>: silicon tables


def _bundled_names() -> tuple[list[str], list[str]]:
    root = _bundled_dir()
    plain = sorted(
        e.name.removesuffix(PROFILE_SUFFIX)
        for e in root.iterdir()
        if e.is_file() and e.name.endswith(PROFILE_SUFFIX)
    )
    nested = []
    for subdir in BUNDLED_SUBDIRS:
        directory = root.joinpath(subdir)
        if directory.is_dir():
            nested += sorted(
                f"{subdir}/{e.name.removesuffix(PROFILE_SUFFIX)}"
                for e in directory.iterdir()
                if e.is_file() and e.name.endswith(PROFILE_SUFFIX)
            )
    return plain, nested


def list_profiles() -> list[str]:
    """Names of the bundled profiles: datasheet ones first, then `measured/<name>` and `silicon/<name>`."""
    plain, nested = _bundled_names()
    return plain + nested


SILICON_PREFIX = "silicon/"


def silicon_profile_for(hardware: str, framework: str) -> str | None:
    """The bundled silicon profile fitted onto datasheet profile `hardware` for `framework` (its
    provenance.software names both), e.g. ('h200', 'sglang') -> 'silicon/h200_sxm-sglang'; None if none."""
    for name in list_profiles():
        if name.startswith(SILICON_PREFIX):
            software = load_profile(name).provenance.software
            if software.get("datasheet_profile") == hardware and software.get("framework") == framework:
                return name
    return None


def load_profile(name_or_path: str) -> HardwareProfile:
    """Load a bundled profile by name (`h200`, `measured/h200`) or any profile file by path."""
    known = list_profiles()
    listing = (
        f"{', '.join(n for n in known if not n.startswith(SILICON_PREFIX))}, "
        f"{SILICON_PREFIX}<system>-<framework> (see `moesim profiles`)"
    )
    data, source = read_profile_file(
        "hardware",
        name_or_path,
        "hardware profile",
        known,
        _bundled_dir(),
        listing,
    )
    return profile_from_dict(data, source)


def render_profile(profile: HardwareProfile, header: str = "") -> str:
    """The profile as TOML text, validated first so an invalid profile is never written."""
    data = profile_to_dict(profile)
    profile_from_dict(data, f"profile {profile.name}")
    return dump_toml(data, header)


def save_profile(profile: HardwareProfile, path: str | os.PathLike[str], header: str = "") -> None:
    """Write the profile as TOML atomically (a reader never sees half a file; failure leaves the old one)."""
    atomic_write_text(path, render_profile(profile, header))
