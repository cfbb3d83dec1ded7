"""Hardware profiles: the shipped files load and agree with the documented defaults; files round-trip;
malformed files fail with a message naming the file and the field; saving is atomic."""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.hardware import profile as hardware
from moesim.simulator.hardware.datasheet_profiles import render_datasheet_profile
from moesim.simulator.hardware.defaults import JUSTIFICATIONS, default_assumption_notes, default_empirical
from moesim.simulator.hardware.profile import (
    HardwareProfile,
    list_profiles,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)
from moesim.simulator.hardware.sections import GemmEfficiency

SHIPPED = [
    "a100-80gb",
    "a800",
    "h100-sxm",
    "h800",
    "h200",
    "b200",
    "mi300x",
    "l40s",
    "rtx-4090",
    "rtx-pro-6000",
]


def _datasheet_profiles() -> list[HardwareProfile]:
    return [p for p in map(load_profile, list_profiles()) if p.provenance.kind == "datasheet"]


def test_every_required_profile_is_shipped_and_listed():
    names = list_profiles()
    assert set(SHIPPED) <= set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_and_is_consistent(name):
    p = load_profile(name)
    assert p.name == name
    assert not p.is_cpu
    ds = p.datasheet
    # Decode GEMMs are memory-bound below the ridge point, which is in the hundreds of FLOP per byte.
    ridge = p.peak_flops_per_s("bf16") / (ds.memory_bandwidth_gbps * 1e9)
    assert 100 <= ridge <= 1000
    # Dense FP8 is twice dense BF16 on every part that has it: a sparse figure would break this ratio.
    if "fp8" in ds.peak_dense_tflops:
        assert ds.peak_dense_tflops["fp8"] / ds.peak_dense_tflops["bf16"] == pytest.approx(2.0, rel=0.02)
    assert p.empirical.cache_bandwidth_gbps > ds.memory_bandwidth_gbps
    assert 0 < p.empirical.cache_effective_bytes <= ds.last_level_cache_bytes
    assert p.node.gpus_per_node >= 1
    assert p.node.scale_up_bandwidth_gbps > 0 and p.node.scale_out_bandwidth_gbps > 0
    assert 0 < p.node.scale_up_latency_us < 20 and 0 < p.node.scale_out_latency_us < 20


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_datasheet_profile_matches_documented_defaults(name):
    """Nobody may edit a shipped [empirical] section without the defaults in assumptions.py, or vice versa."""
    p = load_profile(name)
    assert p.provenance.kind == "datasheet"
    assert p.empirical == default_empirical(p.datasheet, p.datasheet.vendor)
    for note in default_assumption_notes(p.datasheet):
        assert note in p.provenance.assumptions
    for param in JUSTIFICATIONS:
        assert any(a.startswith(f"empirical.{param}:") for a in p.provenance.assumptions)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_file_is_exactly_what_the_generator_writes(name):
    p = load_profile(name)
    extras = tuple(a for a in p.provenance.assumptions if not a.startswith("empirical."))
    text = render_datasheet_profile(
        p.name, p.datasheet, p.node, p.provenance.source, p.provenance.date, extras
    )
    shipped = hardware._bundled_dir().joinpath(f"{name}.toml").read_text(encoding="utf-8")
    assert text == shipped, (
        "run `python -m moesim.simulator.hardware.defaults` to regenerate the bundled profiles"
    )


def test_split_l2_parts_have_less_usable_cache_than_unified_ones():
    split = load_profile("h100-sxm")
    unified = load_profile("l40s")
    frac = lambda p: p.empirical.cache_effective_bytes / p.datasheet.last_level_cache_bytes  # noqa: E731
    assert split.datasheet.cache_partitions == 2 and unified.datasheet.cache_partitions == 1
    assert frac(split) < frac(unified)


def test_amd_launch_defaults_are_higher_than_nvidia():
    amd, nv = load_profile("mi300x").empirical, load_profile("h100-sxm").empirical
    for f in (
        "kernel_fixed_latency_us",
        "launch_eager_us",
        "launch_graph_gap_us",
        "graph_launch_us",
        "sync_us",
    ):
        assert getattr(amd, f) > getattr(nv, f)


@pytest.mark.parametrize("name", SHIPPED)
def test_dict_round_trip(name):
    p = load_profile(name)
    d = profile_to_dict(p)
    again = profile_from_dict(copy.deepcopy(d), f"{name}.toml")
    assert again == p
    assert profile_to_dict(again) == d


@pytest.mark.parametrize("name", SHIPPED)
def test_save_and_load_by_path_round_trip(tmp_path, name):
    p = load_profile(name)
    path = tmp_path / "sub" / "copy.toml"
    save_profile(p, path)
    assert load_profile(str(path)) == p


_positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
_fraction = st.floats(min_value=1e-3, max_value=1.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    frac=_fraction,
    cache_bw=_positive,
    launch=st.floats(min_value=0.0, max_value=1e3, allow_nan=False),
    eff=st.lists(_fraction, min_size=1, max_size=8),
    r2=st.floats(min_value=-5, max_value=1, allow_nan=False),
)
def test_any_valid_profile_round_trips_through_a_file(tmp_path_factory, frac, cache_bw, launch, eff, r2):
    base = load_profile("h200")
    curve = GemmEfficiency(m_tokens=tuple(float(2**i) for i in range(len(eff))), efficiency=tuple(eff))
    p = dataclasses.replace(
        base,
        empirical=dataclasses.replace(
            base.empirical,
            memory_bandwidth_fraction=frac,
            cache_bandwidth_gbps=cache_bw,
            launch_eager_us=launch,
            gemm_efficiency=curve,
        ),
        provenance=dataclasses.replace(base.provenance, kind="measured", software={"torch": "2.5.1"}),
        fit_quality={"cache_bandwidth_gbps": {"r2": r2, "rmse": 0.5}},
    )
    path = tmp_path_factory.mktemp("rt") / "p.toml"
    save_profile(p, path)
    assert load_profile(str(path)) == p


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SHIPPED), st.lists(st.floats(min_value=0.0, max_value=1e5, allow_nan=False), min_size=2)
)
def test_gemm_efficiency_is_monotone_in_m_and_within_0_1(name, ms):
    curve = load_profile(name).empirical.gemm_efficiency
    m = np.sort(np.asarray(ms))
    e = curve.at(m)
    assert np.all(np.diff(e) >= 0)
    assert np.all((e > 0) & (e <= 1))


def test_peak_flops_falls_back_to_bf16_for_missing_dtype():
    a100 = load_profile("a100-80gb")  # no FP8 tensor cores
    assert a100.peak_flops_per_s("fp8") == a100.peak_flops_per_s("bf16") == 312e12


# --- malformed files -----------------------------------------------------------------------------------


def _h200_dict() -> dict:
    return profile_to_dict(load_profile("h200"))


def _expect(d: dict, field: str, words: str = "") -> MoesimError:
    with pytest.raises(MoesimError) as info:
        profile_from_dict(d, "h200.toml")
    assert str(info.value).startswith(f"h200.toml: {field}"), str(info.value)
    assert words in str(info.value)
    assert info.value.fix, "every profile error says how to fix it"
    return info.value


def test_negative_bandwidth_names_file_and_field():
    d = _h200_dict()
    d["empirical"]["cache_bandwidth_gbps"] = -1.0
    err = _expect(d, "empirical.cache_bandwidth_gbps", "give a number in (0, 1e+06]")
    assert err.field == "h200.toml: empirical.cache_bandwidth_gbps"


@pytest.mark.parametrize("section", ["datasheet", "empirical", "node", "provenance"])
def test_missing_section(section):
    d = _h200_dict()
    del d[section]
    _expect(d, section, "missing")


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("datasheet", "memory_bandwidth_gbps"),
        ("datasheet", "device_name"),
        ("datasheet", "peak_dense_tflops"),
        ("empirical", "launch_eager_us"),
        ("empirical", "gemm_efficiency"),
        ("node", "gpus_per_node"),
        ("provenance", "source"),
    ],
)
def test_missing_field(section, key):
    d = _h200_dict()
    del d[section][key]
    _expect(d, f"{section}.{key}", "missing")


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("datasheet", "memory_bandwidth_gbps"), "fast", "not a number"),
        (("datasheet", "memory_bandwidth_gbps"), True, "not a number"),
        (("datasheet", "memory_bandwidth_gbps"), 0, "give a number in (0, 1e+06]"),
        (("datasheet", "memory_capacity_bytes"), float("nan"), "finite"),
        (("datasheet", "compute_units"), 13.5, "whole number"),
        (("datasheet", "device_kind"), "tpu", "use one of gpu, cpu"),
        (("datasheet", "peak_dense_tflops"), {}, "empty table"),
        (("empirical", "memory_bandwidth_fraction"), 1.5, "give a number in (0, 1]"),
        (("empirical", "sync_us"), -0.1, "give a number in [0, 1e+06]"),
        (("empirical", "kernel_fixed_latency_us"), "3us", "not a number"),
        (("node", "gpus_per_node"), 0, "give a whole number >= 1"),
        (("node", "scale_up_bandwidth_gbps"), -5, "give a number in [0, 1e+06]"),
        (("provenance", "kind"), "guessed", "use one of datasheet"),
        (("provenance", "assumptions"), "one", "array of strings"),
        (("provenance", "software"), {"torch": 2.5}, "strings"),
    ],
)
def test_bad_values(path, value, words):
    d = _h200_dict()
    d[path[0]][path[1]] = value
    _expect(d, ".".join(path), words)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("datasheet", "memory_bandwidth_gbps"), 9.2e18),
        (("datasheet", "memory_capacity_bytes"), 2.0**63),
        (("datasheet", "scale_up_link_gbps"), 1e300),
        (("empirical", "cache_bandwidth_gbps"), 2.0**63),
        (("empirical", "launch_eager_us"), 1e12),
        (("node", "scale_out_latency_us"), 1e308),
    ],
)
def test_finite_but_impossible_values_are_refused(path, value):
    """A value a hundred times past any device is a unit slip, not hardware: refused, with the range."""
    d = _h200_dict()
    d[path[0]][path[1]] = value
    _expect(d, ".".join(path), "out of range")


def test_a_peak_beyond_any_device_names_the_dtype():
    d = _h200_dict()
    d["datasheet"]["peak_dense_tflops"]["bf16"] = 1e9
    _expect(d, "datasheet.peak_dense_tflops.bf16", "give a number in (0, 1e+06]")


def test_bad_peak_names_the_dtype():
    d = _h200_dict()
    d["datasheet"]["peak_dense_tflops"]["fp8"] = -1
    _expect(d, "datasheet.peak_dense_tflops.fp8", "give a number in (0, 1e+06]")


@pytest.mark.parametrize(
    ("m", "e", "words"),
    [
        ([1.0, 2.0], [0.1], "entries"),
        ([1.0, 1.0], [0.1, 0.2], "strictly increasing"),
        ([0.5, 2.0], [0.1, 0.2], ">= 1"),
        ([1.0, 2.0], [0.1, 1.2], "give a number in (0, 1]"),
        ([], [], "non-empty"),
    ],
)
def test_bad_gemm_curve(m, e, words):
    d = _h200_dict()
    d["empirical"]["gemm_efficiency"] = {"m_tokens": m, "efficiency": e}
    _expect(d, "empirical.gemm_efficiency", words)


def test_unknown_field_and_section_are_refused():
    d = _h200_dict()
    d["empirical"]["cache_bandwith_gbps"] = 1.0  # a typo must not pass silently
    _expect(d, "empirical.cache_bandwith_gbps", "not a known field")
    d = _h200_dict()
    d["extras"] = {}
    _expect(d, "extras", "not a known section")


def test_bad_toml_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[datasheet\nmemory_bandwidth_gbps = 1\n")
    with pytest.raises(MoesimError, match=r"broken\.toml.*not valid TOML"):
        load_profile(str(path))


def test_wrong_type_in_file_names_the_file_and_field(tmp_path):
    d = _h200_dict()
    d["node"]["scale_out_latency_us"] = "six"
    path = tmp_path / "typo.toml"
    path.write_text(tomli_w.dumps(d))
    with pytest.raises(MoesimError, match=r"typo\.toml: node\.scale_out_latency_us"):
        load_profile(str(path))


def test_name_defaults_to_file_stem(tmp_path):
    d = _h200_dict()
    del d["name"]
    path = tmp_path / "my-gpu.toml"
    path.write_text(tomli_w.dumps(d))
    assert load_profile(str(path)).name == "my-gpu"


def test_unknown_name_suggests_close_matches():
    with pytest.raises(MoesimError) as info:
        load_profile("h2000")  # (h20 is a profile of its own since the 2026 GPUs)
    assert "h200" in str(info.value) and info.value.field == "hardware"


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(MoesimError, match="does not exist"):
        load_profile(str(tmp_path / "nope.toml"))


def test_measured_profiles_are_listed_and_addressable(tmp_path, monkeypatch):
    (tmp_path / "measured").mkdir()
    save_profile(load_profile("h200"), tmp_path / "h200.toml")
    measured = dataclasses.replace(
        load_profile("h200"), provenance=dataclasses.replace(load_profile("h200").provenance, kind="measured")
    )
    save_profile(measured, tmp_path / "measured" / "h200.toml")
    (tmp_path / "measured" / "h200-raw.csv").write_text("a,b\n")
    monkeypatch.setattr(hardware, "_bundled_dir", lambda: tmp_path)
    assert list_profiles() == ["h200", "measured/h200"]
    assert load_profile("measured/h200").provenance.kind == "measured"


def test_invalid_profile_is_never_written(tmp_path):
    bad = dataclasses.replace(
        load_profile("h200"), empirical=dataclasses.replace(load_profile("h200").empirical, sync_us=-1.0)
    )
    path = tmp_path / "bad.toml"
    with pytest.raises(MoesimError, match="sync_us"):
        save_profile(bad, path)
    assert not path.exists()


def test_save_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "h200.toml"
    save_profile(load_profile("h200"), path)
    before = path.read_bytes()

    def fail_after_writing(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail_after_writing)
    with pytest.raises(OSError, match="disk full"):
        save_profile(load_profile("b200"), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["h200.toml"]


def test_expert_gemm_terms_round_trip_and_are_bounded() -> None:
    d = profile_to_dict(load_profile("h200"))
    assert set(d["empirical"]["expert_gemm"]) >= {"bf16", "fp8"}
    assert (
        profile_from_dict(copy.deepcopy(d), "h200.toml").empirical.expert_gemm
        == load_profile("h200").empirical.expert_gemm
    )
    d["empirical"]["expert_gemm"]["bf16"]["pair_flops_fraction"] = 1.5
    _expect(d, "empirical.expert_gemm.bf16.pair_flops_fraction", "give a number in (0, 1]")


def test_a_profile_without_expert_gemm_terms_gets_the_documented_defaults() -> None:
    d = profile_to_dict(load_profile("h200"))
    del d["empirical"]["expert_gemm"]
    profile = profile_from_dict(d, "h200.toml")
    assert profile.empirical.expert_gemm == load_profile("h200").empirical.expert_gemm


def test_all_to_all_terms_round_trip_and_are_bounded() -> None:
    d = profile_to_dict(load_profile("h200"))
    assert "all_to_all" not in d["node"]  # a datasheet profile prices the all-to-all on its links
    terms = {"dispatch_fixed_us": 10.6, "dispatch_bandwidth_gbps": 159.0,
             "combine_fixed_us": 10.2, "combine_bandwidth_gbps": 158.0}  # fmt: skip
    d["node"]["all_to_all"] = {"low_latency": dict(terms)}
    profile = profile_from_dict(copy.deepcopy(d), "h200.toml")
    low = profile.node.all_to_all_terms("low_latency")
    assert low is not None and low.dispatch_bandwidth_gbps == 159.0
    assert profile.node.all_to_all_terms("normal") is None
    assert profile_to_dict(profile) == d
    d["node"]["all_to_all"] = {"fast": dict(terms)}
    _expect(d, "node.all_to_all.fast", "modes: low_latency, normal")
    d["node"]["all_to_all"] = {"normal": {**terms, "combine_bandwidth_gbps": 0.0}}
    _expect(d, "node.all_to_all.normal.combine_bandwidth_gbps", "give a number")
