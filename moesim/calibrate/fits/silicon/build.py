"""A `silicon` profile: a datasheet profile whose terms are fitted to one system × framework of the database.

`calibrate_from_silicon("h200_sxm/sglang")` reads the selected tables (`tables.select`), fits

- the GEMM efficiency curves from `gemm_perf`, one per dtype (`gemm_fit`): bf16's becomes the shared
  curve, fp8's the curve of fp8 GEMMs (`empirical.gemm_efficiency_by_dtype.fp8`), each kept only when it
  beats the datasheet curve on the held-out shapes of its dtype,
- the grouped expert GEMM terms per dtype from `moe_perf`, fitted under the GEMM curve the profile keeps
  (`moe_fit`),
- the attention kernel terms (fixed + per work unit) of grouped-query and latent (MLA) decode attention and
  of grouped-query and MLA prefill from `generation_attention_perf`, `generation_mla_perf`,
  `context_attention_perf` and `context_mla_perf` (`attention_fit`),
- the node's scale-up link from `nccl_perf` and the framework's `custom_allreduce_perf`, kept when it beats
  the datasheet link held out (`comm_fit`),
- the expert-parallel all-to-all terms of DeepEP's low-latency and normal modes from the framework's
  measured MoE dispatch / combine (`wideep_deepep_*_perf`, `moe_a2a_perf`), each mode kept when it beats
  the datasheet link held out (`a2a_fit`),

each with its rows and its error in-sample and on held-out shapes (`holdout`), onto the datasheet profile of
the same GPU (`SYSTEM_PROFILES`). Every other field keeps its datasheet value or documented default, and
says so. Every fitted field names its system, framework, version, table, rows and residual in the
profile's provenance and its `[fit_quality]`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace

from moesim.calibrate.fits.silicon import tables
from moesim.calibrate.fits.silicon.a2a_fit import A2A_TABLES, AllToAllRows, fit_all_to_all, read_rows
from moesim.calibrate.fits.silicon.attention_fit import fit_attention
from moesim.calibrate.fits.silicon.comm_fit import fit_link
from moesim.calibrate.fits.silicon.gemm_fit import fit_gemm
from moesim.calibrate.fits.silicon.holdout import FitQuality
from moesim.calibrate.fits.silicon.moe_fit import fit_moe
from moesim.errors import MoesimError
from moesim.simulator.hardware.defaults import DEFAULT_EXPERT_GEMM
from moesim.simulator.hardware.profile import HardwareProfile, load_profile
from moesim.simulator.hardware.sections import ALL_TO_ALL_MODES, AttentionTerms, Provenance

# The database's systems and the bundled datasheet profile of the same GPU (its facts and node).
SYSTEM_PROFILES = {
    "a100_sxm": "a100-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}
# The dtype whose fitted GEMM curve is the profile's shared `gemm_efficiency` (the others get their own).
SHARED_GEMM_DTYPE = "bf16"
# The profile section each fitted term lives in (its provenance lines are named `<section>.<term>`).
SECTION_OF_TERM = {
    "expert_gemm": "empirical",
    "gemm_efficiency": "empirical",
    "gemm_efficiency_by_dtype": "empirical",
    "attention": "empirical",
    "node": "",
}


def field_name(term: str) -> str:
    """'expert_gemm.bf16' -> 'empirical.expert_gemm.bf16'; 'node.scale_up' stays."""
    section = SECTION_OF_TERM.get(term.split(".")[0], "")
    return f"{section}.{term}" if section else term


def profile_name(system: str, framework: str) -> str:
    """The name of a system × framework silicon profile, e.g. 'h200_sxm-sglang'."""
    return f"{system}-{framework}"


@dataclass(frozen=True)
class SiliconCalibration:
    profile: HardwareProfile
    selection: tables.Selection
    quality: dict[str, FitQuality] = field(default_factory=dict)  # term -> fit quality (incl. reported-only)
    baseline: dict[str, FitQuality] = field(
        default_factory=dict
    )  # term -> the datasheet profile on the same rows


def base_profile(system: str) -> HardwareProfile:
    name = SYSTEM_PROFILES.get(system)
    if name is None:
        raise MoesimError(
            "--from-silicon",
            f"moesim has no datasheet profile for the database's system {system!r}",
            f"systems with one: {', '.join(sorted(SYSTEM_PROFILES))}",
        )
    return load_profile(name)


def calibrate_from_silicon(text: str, root: str | None = None) -> SiliconCalibration:
    """Fit a silicon profile for `SYSTEM/FRAMEWORK[/VERSION]` (module docstring)."""
    data_root = tables.database_root(root)
    selection = tables.select(tables.scan(data_root), text)
    base = base_profile(selection.system)
    quality: dict[str, FitQuality] = {}
    baseline: dict[str, FitQuality] = {}
    empirical, node = base.empirical, base.node
    versions: dict[str, str] = {}

    gemm = selection.get("gemm_perf")
    if gemm is not None:
        own_curves = {}
        for g in fit_gemm(tables.read_columns(gemm), base, gemm.label):
            # bf16's curve is the shared one (every dtype without a curve of its own runs at it)
            key = "gemm_efficiency" if g.dtype == SHARED_GEMM_DTYPE else f"gemm_efficiency_by_dtype.{g.dtype}"
            if not g.better:  # the datasheet curve predicts the held-out shapes better: kept
                key += " (reported, not stored: the datasheet curve is better held out)"
            elif g.dtype == SHARED_GEMM_DTYPE:
                empirical = replace(empirical, gemm_efficiency=g.efficiency)
            else:
                own_curves[g.dtype] = g.efficiency
            quality[key], baseline[key] = g.quality, g.datasheet_quality
        if own_curves:
            empirical = replace(empirical, gemm_efficiency_by_dtype=own_curves)
        versions["gemm_perf"] = gemm.version

    # fitted under the GEMM curves the profile keeps, so the expert terms hold with the curve they run with
    moe = selection.get("moe_perf")
    if moe is not None:
        defaults = dict(DEFAULT_EXPERT_GEMM)
        fits = fit_moe(tables.read_columns(moe), replace(base, empirical=empirical), moe.label, defaults)
        terms = dict(defaults)
        for f in fits:
            terms[f.dtype] = f.terms
            quality[f"expert_gemm.{f.dtype}"] = f.quality
            baseline[f"expert_gemm.{f.dtype}"] = f.default_quality
        if fits:
            empirical = replace(empirical, expert_gemm=terms)
            versions["moe_perf"] = moe.version

    # priced under the GEMM curve the profile keeps, as the expert terms are
    kept_curve = replace(base, empirical=empirical)
    attention_terms: dict[str, AttentionTerms] = {}
    for table_name, kind in (
        ("generation_attention_perf", "gqa"),
        ("generation_mla_perf", "mla"),
        ("context_attention_perf", "gqa_prefill"),
        ("context_mla_perf", "mla_prefill"),
    ):
        att = selection.get(table_name)
        fitted_attention = (
            None if att is None else fit_attention(tables.read_columns(att), kept_curve, att.label, kind)
        )
        if att is not None and fitted_attention is not None:
            attention_terms[kind] = fitted_attention.terms
            quality[f"attention.{kind}"] = fitted_attention.quality
            baseline[f"attention.{kind}"] = fitted_attention.roofline_quality
            versions[table_name] = att.version
    if attention_terms:
        empirical = replace(empirical, attention=attention_terms)

    comm = [selection.get(name) for name in ("custom_allreduce_perf", "nccl_perf")]
    comm_tables = [(c.label, tables.read_columns(c)) for c in comm if c is not None]
    if comm_tables:
        link = fit_link(
            comm_tables,
            base.node.gpus_per_node,
            base.node.scale_up_bandwidth_gbps or 100.0,
            base.node.scale_up_latency_us,
        )
        if link is not None and link.quality.beats(link.datasheet_quality):
            node = replace(
                node, scale_up_bandwidth_gbps=link.bandwidth_gbps, scale_up_latency_us=link.latency_us
            )
            quality["node.scale_up"], baseline["node.scale_up"] = link.quality, link.datasheet_quality
        elif link is not None:  # the datasheet link predicts the held-out rows better: kept
            key = "node.scale_up (reported, not stored: the datasheet link is better held out)"
            quality[key], baseline[key] = link.quality, link.datasheet_quality
        if link is not None:
            for c in comm:
                if c is not None:
                    versions[c.table] = f"{c.framework} {c.version}"
    a2a = [c for c in (selection.get(name) for name in A2A_TABLES) if c is not None]
    if a2a:
        parts = [read_rows(c, selection.system) for c in a2a]
        labels = {
            mode: " + ".join(c.label for c, rows in zip(a2a, parts, strict=True) if mode in rows.mode)
            for mode in ALL_TO_ALL_MODES
        }
        kept_modes = []
        for a in fit_all_to_all(AllToAllRows.concat(parts), base, labels):
            key = f"node.all_to_all.{a.mode}"
            if a.quality.beats(a.datasheet_quality):
                kept_modes.append((a.mode, a.terms))
            else:  # the datasheet link predicts the held-out rows better: kept
                key += " (reported, not stored: the datasheet link is better held out)"
            quality[key], baseline[key] = a.quality, a.datasheet_quality
        if kept_modes:
            node = replace(node, all_to_all=tuple(kept_modes))
        for c in a2a:
            versions[c.table] = f"{c.framework} {c.version}"
    if not quality:
        raise MoesimError("--from-silicon", f"{selection.name} has no table moesim fits", "choose another")

    notes = [q.sentence(field_name(term)) for term, q in quality.items()]
    # the base's notes on fitted fields go: empirical.<field> (every dtype of it) and node.scale_up*
    stored = [t for t in quality if "(reported" not in t]
    fitted = tuple(".".join(field_name(t.split(" ")[0]).split(".")[:2]) for t in stored)
    kept = [a for a in base.provenance.assumptions if not a.startswith(fitted)]
    name = profile_name(selection.system, selection.framework)
    software = {
        "aiconfigurator-core": tables.installed_version() or tables.PINNED_VERSION,
        "framework": selection.framework,
        "datasheet_profile": base.name,
        **{f"{table} version": version for table, version in versions.items()},
    }
    provenance = Provenance(
        kind="silicon",
        source=(
            f"NVIDIA aiconfigurator-core {software['aiconfigurator-core']} silicon database ({tables.LICENCE}), "
            f"{selection.name}, fitted by moesim onto the datasheet profile '{base.name}'"
        ),
        date=datetime.date.today().isoformat(),
        software=software,
        assumptions=tuple(notes + kept),
    )
    profile = HardwareProfile(
        name=name,
        datasheet=base.datasheet,
        empirical=empirical,
        provenance=provenance,
        node=node,
        fit_quality={
            term.split(" ")[0]: {
                **q.metrics(),
                **baseline[term].metrics("datasheet_"),
                "stored": 0.0 if "(reported" in term else 1.0,
            }
            for term, q in quality.items()
        },
    )
    return SiliconCalibration(profile, selection, quality, baseline)
