"""A profile for hardware you do not have: measured efficiencies carried onto another datasheet.

The rule for every GPU→GPU (or CPU→CPU) parameter is one ratio: derived = measured × default(target) ÷
default(source), where `default` is the documented uncalibrated value from `assumptions.py`. So whatever the
measurement found beyond our defaults (a better achieved bandwidth fraction, a faster cache, a flatter GEMM
curve, slower launches) carries over, while what the defaults already tie to the datasheet (peak bandwidth,
cache size, vendor launch paths) follows the target. Between parts of one vendor this is exactly:
achieved fraction of peak bandwidth kept, cache bandwidth kept as a ratio to peak memory bandwidth, cache
effective fraction of nominal kept (adjusted for split vs monolithic caches), GEMM efficiency as a fraction of
peak kept, launch and fixed latencies kept. Each applied rule, with its numbers, is written into the derived
profile's provenance.

A CPU profile says little about GPU kernels, so deriving a GPU from one keeps the GPU defaults for every
device-side parameter and uses the measurement only where it is a sound bound (see `_from_cpu`).
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from moesim.errors import MoesimError
from moesim.reading import read_toml
from moesim.simulator.hardware.datasheet_profiles import datasheet_profile
from moesim.simulator.hardware.defaults import default_empirical, default_node, defaults_for
from moesim.simulator.hardware.profile import (
    PROFILE_SUFFIX,
    HardwareProfile,
    datasheet_from_dict,
    list_profiles,
    load_profile,
    profile_from_dict,
    profile_to_dict,
)
from moesim.simulator.hardware.sections import Datasheet, Empirical, GemmEfficiency, NodeSpec, Provenance

# Parameters moved by the ratio rule, with what the rule means in words (for provenance).
_RATIO_PARAMS: dict[str, str] = {
    "memory_bandwidth_fraction": "achieved fraction of peak memory bandwidth",
    "cache_bandwidth_gbps": "cache bandwidth as a ratio to the datasheet peak memory bandwidth",
    "cache_effective_bytes": "usable fraction of the nominal last-level cache",
    "half_bandwidth_transfer_bytes": "single-read ramp-up; bytes in flight scale with bandwidth",
    "kernel_fixed_latency_us": "device-side fixed latency of a tiny kernel",
    "launch_graph_gap_us": "device-side per-kernel gap in graph replay",
    "launch_eager_gap_us": "device-side per-kernel gap between eager launches",
    "launch_eager_us": "host-side eager launch cost",
    "graph_launch_us": "host-side graph launch cost",
    "sync_us": "host-side synchronisation cost",
    "elementwise_bandwidth_fraction": "elementwise kernels' fraction of streaming bandwidth",
}
_HOST_SIDE = ("launch_eager_us", "graph_launch_us", "sync_us")
_UPPER_BOUNDS = {"memory_bandwidth_fraction": 1.0}


def _today() -> str:
    return datetime.date.today().isoformat()


def _ratio(target_default: float, source_default: float) -> float:
    return target_default / source_default if source_default > 0 else 1.0


def _transfer_gemm(measured: GemmEfficiency, src: GemmEfficiency, tgt: GemmEfficiency) -> GemmEfficiency:
    """Measured efficiency at each of its M points × default(target, M) ÷ default(source, M), capped at 1."""
    m = np.asarray(measured.m_tokens)
    scaled = np.asarray(measured.efficiency) * (tgt.at(m) / src.at(m))
    return GemmEfficiency(m_tokens=measured.m_tokens, efficiency=tuple(float(min(e, 1.0)) for e in scaled))


def _gpu_to_gpu(measured: HardwareProfile, target: Datasheet) -> tuple[Empirical, list[str]]:
    src_default = default_empirical(measured.datasheet)
    tgt_default = default_empirical(target)
    src_vendor = measured.datasheet.vendor or "unknown"
    tgt_vendor = target.vendor or "unknown"
    values: dict[str, float] = {}
    notes = [
        "derive rule: derived = measured x default(target) / default(source), with the documented defaults "
        "of moesim.simulator.hardware.defaults; the measurement's deviation from the defaults carries over"
    ]
    for param, meaning in _RATIO_PARAMS.items():
        measured_value = float(getattr(measured.empirical, param))
        factor = _ratio(float(getattr(tgt_default, param)), float(getattr(src_default, param)))
        value = measured_value * factor
        if param in _UPPER_BOUNDS:
            value = min(value, _UPPER_BOUNDS[param])
        values[param] = value
        notes.append(
            f"empirical.{param} ({meaning}) = measured {measured_value:.6g} x {factor:.6g} = {value:.6g}"
        )
    same_vendor = defaults_for(src_vendor) == defaults_for(tgt_vendor)
    notes.append(
        "empirical.gemm_efficiency (fraction of peak FLOP/s) = measured curve at its own M points x "
        "default(target, M) / default(source, M), capped at 1"
        + ("" if same_vendor else f" (vendor change {src_vendor} -> {tgt_vendor} rescales the plateau)")
    )
    notes.append(
        "host-side launch costs (launch_eager_us, graph_launch_us, sync_us) "
        + (
            "are kept as measured: they are spent by the host CPU and software stack "
            f"({_software_summary(measured)}), assumed to be the same on the target machine"
            if same_vendor
            else f"are scaled by the documented {src_vendor} -> {tgt_vendor} launch-path ratio; they still "
            f"assume the target host runs the same framework ({_software_summary(measured)})"
        )
    )
    notes.append(
        "device fixed latency and graph gap are kept as measured"
        + ("" if same_vendor else " (scaled by the vendor ratio)")
        + ": they assume a similar GPU generation; across generations treat them as approximate"
    )
    gemm_launch = measured.empirical.launch_eager_gemm_us
    if gemm_launch is not None:
        # Host-side like launch_eager_us: kept as measured, or scaled by the vendor launch-path ratio.
        factor = _ratio(tgt_default.launch_eager_us, src_default.launch_eager_us)
        gemm_launch = gemm_launch * factor
        notes.append(
            f"empirical.launch_eager_gemm_us (host-side eager GEMM launch cost) = measured "
            f"{measured.empirical.launch_eager_gemm_us:.6g} x {factor:.6g} = {gemm_launch:.6g}"
        )
    empirical = Empirical(
        gemm_efficiency=_transfer_gemm(
            measured.empirical.gemm_efficiency, src_default.gemm_efficiency, tgt_default.gemm_efficiency
        ),
        launch_eager_gemm_us=gemm_launch,
        **values,  # type: ignore[arg-type]
    )
    return empirical, notes


def _software_summary(measured: HardwareProfile) -> str:
    software = measured.provenance.software
    return ", ".join(f"{k} {v}" for k, v in sorted(software.items())) or "as recorded in the source profile"


def _from_cpu(measured: HardwareProfile, target: Datasheet) -> tuple[Empirical, list[str]]:
    """CPU → GPU: defaults everywhere but the eager launch, which the measured dispatch bounds from below."""
    tgt_default = default_empirical(target)
    launch = max(tgt_default.launch_eager_us, measured.empirical.launch_eager_us)
    notes = [
        "WARNING: the source is a CPU profile; a CPU's DRAM bandwidth fraction, cache behaviour, GEMM curve "
        "and kernel latencies are a poor proxy for GPU kernels, so every device-side parameter is the "
        "documented default for the target (as in an uncalibrated datasheet profile); calibrate on the GPU "
        "for measured numbers",
        f"empirical.launch_eager_us = max(default {tgt_default.launch_eager_us:.6g}, measured CPU op dispatch "
        f"{measured.empirical.launch_eager_us:.6g}) = {launch:.6g}: a GPU launch from the same PyTorch on the "
        "same host runs the same Python/ATen dispatch plus a driver call, so it is no cheaper than the "
        "measured dispatch",
        "every other empirical parameter: documented default (moesim.simulator.hardware.defaults)",
    ]
    return replace(tgt_default, launch_eager_us=launch), notes


def derive_profile(
    measured: HardwareProfile,
    target: Datasheet | HardwareProfile,
    target_name: str,
    node: NodeSpec | None = None,
) -> HardwareProfile:
    """A `derived` profile for `target` carrying `measured`'s efficiencies (rules in the module docstring).

    The node comes from `node`, else the target profile's, else `assumptions.default_node`.
    """
    target_profile = target if isinstance(target, HardwareProfile) else None
    target_ds = target.datasheet if isinstance(target, HardwareProfile) else target
    if node is None:
        node = target_profile.node if target_profile is not None else default_node(target_ds)
    target_is_cpu = target_ds.device_kind == "cpu"
    if target_is_cpu and not measured.is_cpu:
        raise MoesimError(
            "derive",
            f"cannot derive a CPU profile ({target_ds.device_name}) from a GPU measurement ({measured.name})",
            "calibrate the CPU itself: moesim calibrate --device cpu",
        )
    if measured.is_cpu and not target_is_cpu:
        empirical, notes = _from_cpu(measured, target_ds)
    else:
        empirical, notes = _gpu_to_gpu(measured, target_ds)
    target_notes: tuple[str, ...] = ()
    if target_profile is not None:
        target_notes = tuple(
            a for a in target_profile.provenance.assumptions if a.startswith(("datasheet.", "node."))
        )
    profile = HardwareProfile(
        name=target_name,
        datasheet=target_ds,
        empirical=empirical,
        provenance=Provenance(
            kind="derived",
            source=(
                f"derived from '{measured.name}' ({measured.provenance.kind}: {measured.provenance.source}) "
                f"onto the datasheet of {target_ds.device_name}"
            ),
            date=_today(),
            software=dict(measured.provenance.software),
            assumptions=(*notes, *target_notes),
        ),
        node=node,
    )
    return profile_from_dict(profile_to_dict(profile), f"derived profile {target_name}")


def datasheet_from_file(path: str | Path) -> Datasheet:
    """The [datasheet] table of a TOML file (a bare datasheet file, or any full profile)."""
    path = Path(path).expanduser()
    return _datasheet_table(read_toml("--to", path, "datasheet file"), str(path))


def _datasheet_table(data: dict[str, Any], source: str) -> Datasheet:
    if "datasheet" not in data:
        raise MoesimError(f"{source}: datasheet", "section is missing", "add a [datasheet] table")
    return datasheet_from_dict(data["datasheet"], source)


def load_derive_target(name_or_path: str) -> HardwareProfile:
    """The target of `profiles derive --to`: a bundled name, a full profile file, or a datasheet file.

    A file holding only [datasheet] (and optionally [node]) becomes an uncalibrated datasheet profile.
    """
    if name_or_path.strip().lower() in list_profiles():
        return load_profile(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        return load_profile(name_or_path)  # raises the unknown-name / missing-file error with suggestions
    source = str(path)
    data = read_toml("--to", path, "profile or datasheet file")
    if "empirical" in data:
        return profile_from_dict(data, source)
    datasheet = _datasheet_table(data, source)
    node = default_node(datasheet)
    if "node" in data:
        node = profile_from_dict(
            {**profile_to_dict(datasheet_profile("x", datasheet, node, source)), "node": data["node"]}, source
        ).node
    name = path.name.removesuffix(PROFILE_SUFFIX)
    return datasheet_profile(name, datasheet, node, source=f"datasheet file {source}", date=_today())
