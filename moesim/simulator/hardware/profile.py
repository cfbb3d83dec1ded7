"""The hardware profile: datasheet facts, empirical cost-model parameters, node layout and provenance.

Datasheet peaks and measured corrections live apart so a reader can see which numbers are facts and which
are fitted. Units are in the field names; `_gbps` means 1e9 bytes per second.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moesim.atomic import atomic_write_text
from moesim.errors import MoesimError
from moesim.reading import parse_toml, read_toml
from moesim.simulator.hardware.defaults import MLA_QUERY_TILE_ROWS, execution_facts
from moesim.simulator.hardware.sections import (
    ATTENTION_KERNEL_KINDS,
    EXECUTION_FACTS,
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

PROFILE_SUFFIX = ".toml"
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
        if f.name in ("gemm_efficiency", "expert_gemm", "attention"):
            continue
        value = getattr(em, f.name)
        if value is None:  # optional parameter not set: TOML has no null, so the key is left out
            continue
        empirical[f.name] = _plain_number(f.name, value)
    empirical["gemm_efficiency"] = {
        "m_tokens": [float(m) for m in em.gemm_efficiency.m_tokens],
        "efficiency": [float(e) for e in em.gemm_efficiency.efficiency],
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
    node = {
        "gpus_per_node": int(p.node.gpus_per_node),
        "scale_up_bandwidth_gbps": float(p.node.scale_up_bandwidth_gbps),
        "scale_up_latency_us": float(p.node.scale_up_latency_us),
        "scale_out_bandwidth_gbps": float(p.node.scale_out_bandwidth_gbps),
        "scale_out_latency_us": float(p.node.scale_out_latency_us),
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


class _Reader:
    """Validates one section of a profile dict, naming the file and the dotted field in every error."""

    def __init__(self, source: str, section: str, data: Any, allowed: tuple[str, ...]) -> None:
        self.source = source
        self.section = section
        if not isinstance(data, dict):
            raise self.error(section, "must be a table", f"add a [{section}] section")
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise self.error(
                f"{section}.{unknown[0]}", "is not a known field", f"known fields: {', '.join(allowed)}"
            )
        self.data: dict[str, Any] = data

    def error(self, dotted: str, problem: str, fix: str = "") -> MoesimError:
        return MoesimError(f"{self.source}: {dotted}", problem, fix)

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            raise self.error(f"{self.section}.{key}", "is missing", "add it to the file")
        return default

    def number(
        self,
        key: str,
        *,
        minimum: float = 0.0,
        strict: bool = True,
        maximum: float | None = None,
        default: Any = None,
    ) -> float:
        """A finite number > minimum (or >= when not strict), optionally <= maximum."""
        value = self._get(key, _REQUIRED if default is None else default)
        return _check_number(value, f"{self.section}.{key}", self, minimum, strict, maximum)

    def integer(self, key: str, *, minimum: int, default: Any = None) -> int:
        dotted = f"{self.section}.{key}"
        value = self._get(key, _REQUIRED if default is None else default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(dotted, f"must be a whole number, got {value!r}")
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise self.error(dotted, f"must be a whole number, got {value!r}")
        if value < minimum:
            raise self.error(dotted, f"must be >= {minimum}, got {value!r}")
        return int(value)

    def string(
        self, key: str, *, default: Any = None, choices: tuple[str, ...] = (), nonempty: bool = False
    ) -> str:
        dotted = f"{self.section}.{key}"
        value = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(value, str):
            raise self.error(dotted, f"must be a string, got {value!r}")
        if choices and value not in choices:
            raise self.error(dotted, f"must be one of {', '.join(choices)}, got {value!r}")
        if nonempty and not value.strip():
            raise self.error(dotted, "must not be empty")
        return value


_REQUIRED = object()


def _check_number(
    value: Any, dotted: str, reader: _Reader, minimum: float, strict: bool, maximum: float | None
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise reader.error(dotted, f"must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise reader.error(dotted, f"must be finite, got {value!r}")
    if strict and not number > minimum:
        raise reader.error(dotted, f"must be > {minimum:g}, got {value!r}")
    if not strict and not number >= minimum:
        raise reader.error(dotted, f"must be >= {minimum:g}, got {value!r}")
    if maximum is not None and number > maximum:
        raise reader.error(dotted, f"must be <= {maximum:g}, got {value!r}")
    return number


def _read_datasheet(source: str, data: Any) -> Datasheet:
    r = _Reader(source, "datasheet", data, tuple(f.name for f in fields(Datasheet)))
    peaks_raw = r._get("peak_dense_tflops", _REQUIRED)
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise r.error(
            "datasheet.peak_dense_tflops",
            "must be a non-empty table of dtype = dense TFLOP/s",
            "e.g. [datasheet.peak_dense_tflops] with bf16 = 989.0",
        )
    peaks: dict[str, float] = {}
    for dtype, value in peaks_raw.items():
        peaks[str(dtype)] = _check_number(value, f"datasheet.peak_dense_tflops.{dtype}", r, 0.0, True, None)
    device_kind = r.string("device_kind", default="gpu", choices=_DEVICE_KINDS)
    return Datasheet(
        device_name=r.string("device_name", nonempty=True),
        memory_bandwidth_gbps=r.number("memory_bandwidth_gbps"),
        memory_capacity_bytes=r.number("memory_capacity_bytes"),
        last_level_cache_bytes=r.number("last_level_cache_bytes"),
        peak_dense_tflops=peaks,
        compute_units=r.integer("compute_units", minimum=0, default=0),
        scale_up_link_gbps=r.number("scale_up_link_gbps", strict=False, default=0.0),
        vendor=r.string("vendor", default=""),
        device_kind="cpu" if device_kind == "cpu" else "gpu",
        cache_partitions=r.integer("cache_partitions", minimum=1, default=1),
    )


def datasheet_from_dict(d: Any, source: str) -> Datasheet:
    """Validate a [datasheet] table (errors name `source` and the field)."""
    return _read_datasheet(source, d)


def _read_gemm_efficiency(r: _Reader) -> GemmEfficiency:
    dotted = "empirical.gemm_efficiency"
    raw = r._get("gemm_efficiency", _REQUIRED)
    g = _Reader(r.source, dotted, raw, ("m_tokens", "efficiency"))
    arrays: dict[str, list[float]] = {}
    for key in ("m_tokens", "efficiency"):
        values = g._get(key, _REQUIRED)
        if not isinstance(values, list) or not values:
            raise g.error(f"{dotted}.{key}", "must be a non-empty array of numbers")
        arrays[key] = [
            _check_number(v, f"{dotted}.{key}[{i}]", g, 0.0, True, 1.0 if key == "efficiency" else None)
            for i, v in enumerate(values)
        ]
    m, eff = arrays["m_tokens"], arrays["efficiency"]
    if len(m) != len(eff):
        raise g.error(
            dotted,
            f"m_tokens has {len(m)} entries but efficiency has {len(eff)}",
            "give one efficiency per token count",
        )
    if any(b <= a for a, b in itertools.pairwise(m)):
        raise g.error(f"{dotted}.m_tokens", "must be strictly increasing")
    if m[0] < 1.0:
        raise g.error(f"{dotted}.m_tokens", f"must start at >= 1 token, got {m[0]!r}")
    return GemmEfficiency(m_tokens=tuple(m), efficiency=tuple(eff))


# Bounds of the grouped expert GEMM terms: a fused-MoE launch floor above 1 ms or a per-expert overhead
# above 100 us would be larger than any measured table row's whole time at those sizes.
EXPERT_GEMM_MAX_FIXED_US = 1000.0
EXPERT_GEMM_MAX_PER_EXPERT_US = 100.0


def _read_expert_gemm(r: _Reader) -> dict[str, ExpertGemmTerms] | None:
    dotted = "empirical.expert_gemm"
    raw = r.data.get("expert_gemm")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise r.error(dotted, "must be a table of [empirical.expert_gemm.<dtype>] tables", "e.g. bf16")
    # An empty table is a profile that prices grouped expert GEMMs by the roofline alone (as moesim did before
    # the term existed); leaving the table out gives the documented defaults.
    out: dict[str, ExpertGemmTerms] = {}
    for dtype, table in raw.items():
        g = _Reader(r.source, f"{dotted}.{dtype}", table, tuple(f.name for f in fields(ExpertGemmTerms)))
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


def _read_attention(r: _Reader) -> dict[str, AttentionTerms] | None:
    dotted = "empirical.attention"
    raw = r.data.get("attention")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise r.error(
            dotted,
            "must be a table of [empirical.attention.<kind>] tables",
            f"kinds: {', '.join(ATTENTION_KERNEL_KINDS)}",
        )
    out: dict[str, AttentionTerms] = {}
    for kind, table in raw.items():
        if kind not in ATTENTION_KERNEL_KINDS:
            raise r.error(
                f"{dotted}.{kind}",
                "is not an attention kernel kind",
                f"kinds: {', '.join(ATTENTION_KERNEL_KINDS)}",
            )
        g = _Reader(r.source, f"{dotted}.{kind}", table, tuple(f.name for f in fields(AttentionTerms)))
        out[str(kind)] = AttentionTerms(
            fixed_us=g.number("fixed_us", strict=False, maximum=ATTENTION_MAX_FIXED_US),
            per_unit_us=g.number("per_unit_us", strict=False, maximum=ATTENTION_MAX_PER_UNIT_US),
        )
    return out


def _read_empirical(source: str, data: Any) -> Empirical:
    r = _Reader(source, "empirical", data, tuple(f.name for f in fields(Empirical)))
    return Empirical(
        memory_bandwidth_fraction=r.number("memory_bandwidth_fraction", maximum=1.0),
        cache_bandwidth_gbps=r.number("cache_bandwidth_gbps"),
        cache_effective_bytes=r.number("cache_effective_bytes", strict=False),
        half_bandwidth_transfer_bytes=r.number("half_bandwidth_transfer_bytes", strict=False),
        kernel_fixed_latency_us=r.number("kernel_fixed_latency_us", strict=False),
        launch_eager_us=r.number("launch_eager_us", strict=False),
        launch_graph_gap_us=r.number("launch_graph_gap_us", strict=False),
        graph_launch_us=r.number("graph_launch_us", strict=False),
        sync_us=r.number("sync_us", strict=False),
        gemm_efficiency=_read_gemm_efficiency(r),
        elementwise_bandwidth_fraction=r.number("elementwise_bandwidth_fraction", default=1.0),
        launch_eager_gemm_us=r.number("launch_eager_gemm_us", strict=False)
        if "launch_eager_gemm_us" in r.data
        else None,
        vector_flops_fraction=r.number("vector_flops_fraction", maximum=1.0)
        if "vector_flops_fraction" in r.data
        else None,
        launch_eager_gap_us=r.number("launch_eager_gap_us", strict=False)
        if "launch_eager_gap_us" in r.data
        else None,
        **{
            name: r.integer(name, minimum=1) if name in r.data else None
            for name in ("gemm_panel_rows", "gemm_tile_m_expert", "gemm_tile_m_dense")
        },
        mla_query_tile_rows=r.integer("mla_query_tile_rows", minimum=0)
        if "mla_query_tile_rows" in r.data
        else None,
        expert_gemm=_read_expert_gemm(r),
        attention=_read_attention(r),
    )


def _read_node(source: str, data: Any) -> NodeSpec:
    r = _Reader(source, "node", data, tuple(f.name for f in fields(NodeSpec)))
    return NodeSpec(
        gpus_per_node=r.integer("gpus_per_node", minimum=1),
        scale_up_bandwidth_gbps=r.number("scale_up_bandwidth_gbps", strict=False),
        scale_up_latency_us=r.number("scale_up_latency_us", strict=False),
        scale_out_bandwidth_gbps=r.number("scale_out_bandwidth_gbps", strict=False),
        scale_out_latency_us=r.number("scale_out_latency_us", strict=False),
    )


def _read_provenance(source: str, data: Any) -> Provenance:
    r = _Reader(source, "provenance", data, tuple(f.name for f in fields(Provenance)))
    kind = r.string("kind", choices=_PROFILE_KINDS)
    software_raw = r._get("software", {})
    if not isinstance(software_raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in software_raw.items()
    ):
        raise r.error("provenance.software", 'must be a table of name = "version" strings')
    assumptions_raw = r._get("assumptions", [])
    if not isinstance(assumptions_raw, list) or not all(isinstance(a, str) for a in assumptions_raw):
        raise r.error("provenance.assumptions", "must be an array of strings")
    return Provenance(
        kind=next(k for k in ("datasheet", "measured", "derived", "silicon") if k == kind),
        source=r.string("source", nonempty=True),
        date=r.string("date", default=""),
        software=dict(software_raw),
        assumptions=tuple(assumptions_raw),
    )


def _read_fit_quality(source: str, data: Any) -> dict[str, dict[str, float]]:
    if not isinstance(data, dict):
        raise MoesimError(f"{source}: fit_quality", "must be a table of [fit_quality.<parameter>] tables")
    out: dict[str, dict[str, float]] = {}
    for param, metrics in data.items():
        r = _Reader(
            source, f"fit_quality.{param}", metrics, tuple(metrics) if isinstance(metrics, dict) else ()
        )
        out[param] = {
            m: _check_number(v, f"fit_quality.{param}.{m}", r, -math.inf, True, None)
            for m, v in metrics.items()
        }
    return out


_TOP_LEVEL = ("name", "datasheet", "empirical", "node", "provenance", "fit_quality")


def _check_caches_fit_memory(source: str, ds: Datasheet, em: Empirical) -> None:
    """A cache is a fraction of what it caches: neither the last-level nor the usable cache exceeds memory."""
    for section, name, value in (
        ("datasheet", "last_level_cache_bytes", ds.last_level_cache_bytes),
        ("empirical", "cache_effective_bytes", em.cache_effective_bytes),
    ):
        if value > ds.memory_capacity_bytes:
            raise MoesimError(
                f"{source}: {section}.{name}",
                f"{value / 2**30:,.1f} GiB is larger than the device memory "
                f"({ds.memory_capacity_bytes / 2**30:,.1f} GiB)",
                "give the cache size in bytes (e.g. 50e6 for 50 MB)",
            )


def profile_from_dict(d: dict[str, Any], source: str) -> HardwareProfile:
    """Build and validate a profile from TOML data; `source` (a file name) prefixes every error message."""
    if not isinstance(d, dict):
        raise MoesimError(source, "is not a table of profile sections")
    unknown = sorted(set(d) - set(_TOP_LEVEL))
    if unknown:
        raise MoesimError(
            f"{source}: {unknown[0]}", "is not a known section", f"known sections: {', '.join(_TOP_LEVEL)}"
        )
    for section in ("datasheet", "empirical", "node", "provenance"):
        if section not in d:
            raise MoesimError(f"{source}: {section}", "section is missing", f"add a [{section}] table")
    default_name = Path(source).name.removesuffix(PROFILE_SUFFIX)
    name = d.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise MoesimError(f"{source}: name", f"must be a non-empty string, got {name!r}")
    datasheet = _read_datasheet(source, d["datasheet"])
    empirical = _read_empirical(source, d["empirical"])
    _check_caches_fit_memory(source, datasheet, empirical)
    return HardwareProfile(
        name=name,
        datasheet=datasheet,
        empirical=empirical,
        provenance=_read_provenance(source, d["provenance"]),
        node=_read_node(source, d["node"]),
        fit_quality=_read_fit_quality(source, d.get("fit_quality", {})),
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
    name = name_or_path.strip().lower()
    if name in known:
        *subdirs, stem = name.split("/")
        entry = _bundled_dir().joinpath(*subdirs, stem + PROFILE_SUFFIX)
        source = name + PROFILE_SUFFIX
        text = entry.read_text(encoding="utf-8")
        return profile_from_dict(parse_toml(source, text, source, "hardware profile"), source)
    if (
        name_or_path.endswith(PROFILE_SUFFIX)
        or "/" in name_or_path
        or os.sep in name_or_path
        or Path(name_or_path).expanduser().exists()
    ):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise MoesimError(
                "hardware",
                f"profile file {name_or_path} does not exist",
                "give a path to a .toml profile or a bundled name (see `moesim profiles`)",
            )
        return profile_from_dict(read_toml("hardware", path, "hardware profile"), name_or_path)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise MoesimError(
        "hardware",
        f"unknown hardware profile {name_or_path!r}",
        f"{hint}known: {', '.join(n for n in known if not n.startswith(SILICON_PREFIX))}, "
        f"{SILICON_PREFIX}<system>-<framework> (see `moesim profiles`); or give a path to a .toml file",
    )


def render_profile(profile: HardwareProfile, header: str = "") -> str:
    """The profile as TOML text, validated first so an invalid profile is never written."""
    data = profile_to_dict(profile)
    profile_from_dict(data, f"profile {profile.name}")
    return dump_toml(data, header)


def save_profile(profile: HardwareProfile, path: str | os.PathLike[str], header: str = "") -> None:
    """Write the profile as TOML atomically (a reader never sees half a file; failure leaves the old one)."""
    atomic_write_text(path, render_profile(profile, header))
