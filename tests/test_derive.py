"""Deriving a profile for hardware you do not have: measured efficiencies carried onto another datasheet."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.hardware.defaults import default_empirical
from moesim.simulator.hardware.derive import datasheet_from_file, derive_profile, load_derive_target
from moesim.simulator.hardware.profile import HardwareProfile, load_profile, profile_to_dict, save_profile
from moesim.simulator.hardware.sections import GemmEfficiency


def _measured(base: str = "h100-sxm", **changes: float) -> HardwareProfile:
    """A profile that looks measured: efficiencies that differ from the documented defaults."""
    p = load_profile(base)
    values = {
        "memory_bandwidth_fraction": 0.87,
        "cache_bandwidth_gbps": 3.1 * p.datasheet.memory_bandwidth_gbps,
        "cache_effective_bytes": 0.6 * p.datasheet.last_level_cache_bytes,
        "half_bandwidth_transfer_bytes": 5.5e6,
        "kernel_fixed_latency_us": 2.1,
        "launch_eager_us": 9.3,
        "launch_graph_gap_us": 1.1,
        "graph_launch_us": 12.0,
        "sync_us": 6.4,
        "elementwise_bandwidth_fraction": 0.7,
    }
    values.update(changes)
    curve = GemmEfficiency(m_tokens=(1.0, 8.0, 64.0, 512.0, 4096.0), efficiency=(0.02, 0.12, 0.45, 0.71, 0.8))
    return dataclasses.replace(
        p,
        name=f"{base}-measured",
        empirical=dataclasses.replace(p.empirical, gemm_efficiency=curve, **values),
        provenance=dataclasses.replace(
            p.provenance,
            kind="measured",
            source="moesim calibrate --device cuda",
            software={"torch": "2.5.1", "cuda": "12.4"},
            assumptions=(),
        ),
    )


def _cpu_measured() -> HardwareProfile:
    p = _measured(launch_eager_us=11.0)
    return dataclasses.replace(
        p,
        name="cpu-here",
        datasheet=dataclasses.replace(
            p.datasheet, device_name="x86 CPU", vendor="intel", device_kind="cpu", cache_partitions=1
        ),
    )


@pytest.mark.parametrize("base", ["h100-sxm", "mi300x", "l40s"])
def test_deriving_a_profile_onto_its_own_datasheet_changes_nothing(base):
    m = _measured(base)
    d = derive_profile(m, m, "same")
    assert d.empirical == m.empirical
    assert d.datasheet == m.datasheet and d.node == m.node


@settings(max_examples=40, deadline=None)
@given(
    frac=st.floats(min_value=0.3, max_value=1.0),
    target=st.sampled_from(["a100-80gb", "h200", "b200", "l40s", "rtx-4090", "rtx-pro-6000"]),
)
def test_derived_achieved_bandwidth_is_measured_fraction_times_target_peak(frac, target):
    m = _measured(memory_bandwidth_fraction=frac)
    t = load_profile(target)
    d = derive_profile(m, t, f"{target}-derived")
    expected = frac * t.datasheet.memory_bandwidth_gbps * 1e9
    assert d.memory_bandwidth_bytes_per_s == pytest.approx(expected, rel=1e-12)


def test_same_vendor_transfer_keeps_ratios_curve_and_launch_costs():
    m = _measured("h100-sxm")
    t = load_profile("b200")
    d = derive_profile(m, t, "b200-from-h100")
    ratio = m.empirical.cache_bandwidth_gbps / m.datasheet.memory_bandwidth_gbps
    assert d.empirical.cache_bandwidth_gbps == pytest.approx(ratio * t.datasheet.memory_bandwidth_gbps)
    # Both have split L2s, so the usable fraction of nominal carries over unchanged.
    frac = m.empirical.cache_effective_bytes / m.datasheet.last_level_cache_bytes
    assert d.empirical.cache_effective_bytes / t.datasheet.last_level_cache_bytes == pytest.approx(
        frac, rel=1e-6
    )
    # Single-read ramp-up time is kept: bytes for half bandwidth scale with the achieved bandwidth.
    ramp = lambda p: p.empirical.half_bandwidth_transfer_bytes / p.memory_bandwidth_bytes_per_s  # noqa: E731
    assert ramp(d) == pytest.approx(ramp(m))
    # GEMM efficiency is a fraction of peak, so the same curve means proportionally more FLOP/s.
    assert d.empirical.gemm_efficiency == m.empirical.gemm_efficiency
    for f in (
        "kernel_fixed_latency_us",
        "launch_eager_us",
        "launch_graph_gap_us",
        "graph_launch_us",
        "sync_us",
    ):
        assert getattr(d.empirical, f) == getattr(m.empirical, f)
    assert d.datasheet == t.datasheet and d.node == t.node


def test_split_to_unified_cache_scales_the_usable_fraction():
    m = _measured("h100-sxm")
    d = derive_profile(m, load_profile("l40s"), "l40s-from-h100")
    frac_m = m.empirical.cache_effective_bytes / m.datasheet.last_level_cache_bytes
    frac_d = d.empirical.cache_effective_bytes / d.datasheet.last_level_cache_bytes
    assert frac_d > frac_m
    assert frac_d == pytest.approx(frac_m * 0.80 / 0.55, rel=1e-3)


def test_vendor_change_applies_the_documented_launch_ratio():
    m = _measured("h100-sxm")
    d = derive_profile(m, load_profile("mi300x"), "mi300x-from-h100")
    assert d.empirical.launch_eager_us == pytest.approx(1.5 * m.empirical.launch_eager_us)
    assert d.empirical.gemm_efficiency.at(4096.0) < m.empirical.gemm_efficiency.at(4096.0)
    assert any("vendor" in a for a in d.provenance.assumptions)


@pytest.mark.parametrize(
    ("source", "target"), [("h100-sxm", "h200"), ("a100-80gb", "b200"), ("h200", "mi300x")]
)
def test_deriving_from_a_datasheet_profile_gives_the_target_datasheet_profile(source, target):
    """Nothing measured beyond the defaults, so nothing beyond the target's defaults comes out."""
    d = derive_profile(load_profile(source), load_profile(target), target)
    expected = profile_to_dict(load_profile(target))["empirical"]
    got = profile_to_dict(d)["empirical"]
    for key, value in expected.items():
        if key == "gemm_efficiency":
            np.testing.assert_allclose(got[key]["efficiency"], value["efficiency"], rtol=1e-3)
        elif key == "expert_gemm":  # per-dtype tables: the target's documented defaults
            assert got[key] == value, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-6), key


def test_provenance_says_derived_and_names_the_source():
    m = _measured()
    d = derive_profile(m, load_profile("h200"), "h200-derived")
    assert d.name == "h200-derived"
    assert d.provenance.kind == "derived"
    assert m.name in d.provenance.source
    assert d.provenance.software == m.provenance.software
    rules = "\n".join(d.provenance.assumptions)
    for param in ("memory_bandwidth_fraction", "cache_bandwidth_gbps", "gemm_efficiency", "launch_eager_us"):
        assert f"empirical.{param}" in rules
    assert "host" in rules


def test_derived_profile_saves_and_reloads(tmp_path):
    d = derive_profile(_measured(), load_profile("h200"), "h200-derived")
    save_profile(d, tmp_path / "d.toml")
    assert load_profile(str(tmp_path / "d.toml")) == d


def test_cpu_to_gpu_keeps_gpu_defaults_and_warns():
    cpu = _cpu_measured()
    t = load_profile("h200")
    d = derive_profile(cpu, t, "h200-from-cpu")
    defaults = default_empirical(t.datasheet)
    assert d.empirical == dataclasses.replace(defaults, launch_eager_us=cpu.empirical.launch_eager_us)
    assert any(a.startswith("WARNING") and "CPU" in a for a in d.provenance.assumptions)
    # A CPU dispatch cheaper than the default never lowers the GPU launch cost.
    cheap = dataclasses.replace(cpu, empirical=dataclasses.replace(cpu.empirical, launch_eager_us=1.0))
    assert derive_profile(cheap, t, "x").empirical.launch_eager_us == defaults.launch_eager_us


def test_gpu_to_cpu_is_refused():
    cpu_ds = _cpu_measured().datasheet
    with pytest.raises(MoesimError, match="calibrate"):
        derive_profile(_measured(), cpu_ds, "cpu")


def test_cpu_to_cpu_uses_the_ratio_rules():
    cpu = _cpu_measured()
    bigger = dataclasses.replace(cpu.datasheet, memory_bandwidth_gbps=2 * cpu.datasheet.memory_bandwidth_gbps)
    d = derive_profile(cpu, bigger, "cpu-2x")
    assert d.empirical.memory_bandwidth_fraction == cpu.empirical.memory_bandwidth_fraction
    assert d.empirical.cache_bandwidth_gbps == pytest.approx(2 * cpu.empirical.cache_bandwidth_gbps)


def test_bare_datasheet_target_gets_a_default_node(tmp_path):
    ds = profile_to_dict(load_profile("h200"))["datasheet"]
    ds["device_name"] = "Future GPU"
    ds["memory_bandwidth_gbps"] = 10000.0
    path = tmp_path / "future.toml"
    path.write_text(tomli_w.dumps({"datasheet": ds}))
    datasheet = datasheet_from_file(path)
    assert datasheet.memory_bandwidth_gbps == 10000.0
    d = derive_profile(_measured(), datasheet, "future")
    assert d.datasheet == datasheet
    assert d.node.gpus_per_node == 8 and d.node.scale_up_bandwidth_gbps == datasheet.scale_up_link_gbps
    assert d.memory_bandwidth_bytes_per_s == pytest.approx(0.87 * 10000e9)


def test_load_derive_target_accepts_names_profiles_and_datasheet_files(tmp_path):
    assert load_derive_target("h200") == load_profile("h200")
    ds = profile_to_dict(load_profile("l40s"))["datasheet"]
    path = tmp_path / "pcie-card.toml"
    node = {
        "gpus_per_node": 4,
        "scale_up_bandwidth_gbps": 32.0,
        "scale_up_latency_us": 5.0,
        "scale_out_bandwidth_gbps": 25.0,
        "scale_out_latency_us": 6.0,
    }
    path.write_text(tomli_w.dumps({"datasheet": ds, "node": node}))
    target = load_derive_target(str(path))
    assert target.name == "pcie-card" and target.node.gpus_per_node == 4
    assert derive_profile(_measured(), target, "card").node.gpus_per_node == 4


def test_datasheet_file_errors_name_file_and_field(tmp_path):
    path = tmp_path / "nods.toml"
    path.write_text(tomli_w.dumps({"node": {"gpus_per_node": 8}}))
    with pytest.raises(MoesimError, match=r"nods\.toml: datasheet"):
        datasheet_from_file(path)
    ds = profile_to_dict(load_profile("h200"))["datasheet"]
    ds["memory_bandwidth_gbps"] = -3
    path.write_text(tomli_w.dumps({"datasheet": ds}))
    with pytest.raises(MoesimError, match=r"nods\.toml: datasheet\.memory_bandwidth_gbps"):
        datasheet_from_file(path)
    with pytest.raises(MoesimError, match="does not exist"):
        datasheet_from_file(tmp_path / "missing.toml")
    with pytest.raises(MoesimError, match="unknown hardware profile"):
        load_derive_target("h2000")
