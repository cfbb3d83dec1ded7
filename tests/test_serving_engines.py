"""Serving-engine profiles: files, validation, and the pure functions of what an engine adds to a step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moesim.errors import MoesimError
from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.profile import (
    HOST_PARAMETERS,
    NGRAM_BASE_US,
    NGRAM_PER_SEQUENCE_US,
    CudaGraphs,
    DrafterStyle,
    list_serving_engines,
    load_serving_engine,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)

PRESETS = ("vllm", "sglang", "trtllm")


def test_bundled_profiles_are_listed_ideal_first_and_round_trip(tmp_path: Path) -> None:
    names = list_serving_engines()
    assert names[0] == "ideal" and set(PRESETS) <= set(names)
    for name in names:
        profile = load_serving_engine(name)
        assert profile_from_dict(profile_to_dict(profile), "again") == profile
        save_profile(profile, tmp_path / f"{name}.toml")
        assert load_serving_engine(str(tmp_path / f"{name}.toml")) == profile


def test_ideal_adds_nothing_and_presets_cite_their_sources() -> None:
    ideal = load_serving_engine("ideal")
    assert ideal.is_ideal
    assert (ideal.host.ngram_base_us, ideal.host.ngram_per_sequence_us) == (
        NGRAM_BASE_US,
        NGRAM_PER_SEQUENCE_US,
    )
    for name in PRESETS:
        profile = load_serving_engine(name)
        assert not profile.is_ideal
        assert profile.provenance.kind == "documented" and profile.provenance.software
        assert all(source.strip() for source in profile.provenance.sources)
        assert profile.graphs.sizes, "a preset lists its captured sizes"


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("host", "step_us", -1.0, "host.step_us"),
        ("host", "overlap_fraction", 1.5, "host.overlap_fraction"),
        ("host", "typo_us", 1.0, "host.typo_us"),
        ("graphs", "sizes", [4, 2], "graphs.sizes"),
        ("graphs", "uncaptured", "magic", "graphs.uncaptured"),
        ("drafter", "shape", "tree", "drafter.tree_draft_tokens"),
        ("fitted", "per_token_us", 1e9, "fitted.per_token_us"),
    ],
)
def test_bad_fields_name_the_file_and_field(section: str, key: str, value: object, needle: str) -> None:
    data = profile_to_dict(load_serving_engine("vllm"))
    data.setdefault(section, {})[key] = value
    with pytest.raises(MoesimError) as info:
        profile_from_dict(data, "mine.toml")
    assert info.value.field == f"mine.toml: {needle}"
    assert info.value.fix, "every profile error says how to fix it"


def test_both_profile_readers_word_an_error_alike() -> None:
    """Hardware and serving-engine profiles are read by one reader: the same fault, the same message."""
    from moesim.simulator.hardware.profile import load_profile
    from moesim.simulator.hardware.profile import profile_from_dict as hardware_from_dict
    from moesim.simulator.hardware.profile import profile_to_dict as hardware_to_dict

    engine = profile_to_dict(load_serving_engine("vllm"))
    engine["host"]["step_us"] = -1.0
    hardware = hardware_to_dict(load_profile("h200"))
    hardware["node"]["scale_up_latency_us"] = -1.0
    errors = []
    for read, data in ((profile_from_dict, engine), (hardware_from_dict, hardware)):
        with pytest.raises(MoesimError) as info:
            read(data, "mine.toml")
        errors.append(info.value)
    assert [e.field for e in errors] == ["mine.toml: host.step_us", "mine.toml: node.scale_up_latency_us"]
    assert {e.problem for e in errors} == {"is -1.0, out of range"}
    assert errors[0].fix == "give a number in [0, 100000]" and errors[1].fix == "give a number in [0, 1e+06]"


def test_unknown_name_suggests_and_lists() -> None:
    with pytest.raises(MoesimError, match="did you mean vllm"):
        load_serving_engine("vlm")


def test_fitted_values_override_the_documented_defaults_and_stay_apart() -> None:
    vllm = load_serving_engine("vllm")
    fitted = vllm.with_fitted({"step_us": 123.0}, {"step_us": {"relative_change": 0.1}}, sources=("fit",))
    assert fitted.effective_host.step_us == 123.0 and fitted.host == vllm.host
    assert fitted.provenance.kind == "fitted"
    assert profile_from_dict(profile_to_dict(fitted), "again") == fitted


GRID = CudaGraphs(sizes=(1, 2, 4, 8, 16), padding="next_captured", uncaptured="eager")


def _with(graphs: CudaGraphs = GRID, **host: float):  # type: ignore[no-untyped-def]
    profile = load_serving_engine("ideal")
    return replace(profile, graphs=graphs, host=replace(profile.host, **host))


@pytest.mark.parametrize(("batch", "padded"), [(1, 1), (3, 4), (5, 8), (9, 16), (16, 16)])
def test_a_batch_pads_up_to_the_next_captured_size(batch: int, padded: int) -> None:
    profile = _with()
    assert ov.padded_sequences(profile, batch, 1) == padded
    assert ov.launch_for(profile, batch, 1) == "graph"


def test_above_the_largest_captured_size_the_step_is_eager_and_unpadded() -> None:
    profile = _with()
    assert ov.launch_for(profile, 17, 1) == "eager" and ov.padded_sequences(profile, 17, 1) == 17
    piecewise = _with(replace(GRID, uncaptured="piecewise"))
    assert ov.launch_for(piecewise, 17, 1) == "piecewise"
    assert ov.launch_for(profile, 3, 1, requested="eager") == "eager"
    assert ov.padded_sequences(profile, 3, 1, requested="eager") == 3


def test_token_capture_and_token_ceiling() -> None:
    tokens = _with(CudaGraphs(capture_unit="tokens", sizes=(8, 16, 32)))
    assert ov.padded_sequences(tokens, 3, 4) == 4  # 12 tokens pad to 16 = 4 sequences of 4
    assert ov.launch_for(tokens, 9, 4) == "eager"  # 36 tokens > 32
    ceiling = _with(CudaGraphs(sizes=(1, 2, 4, 8, 128), max_tokens=16))
    assert ov.launch_for(ceiling, 4, 4) == "graph" and ov.launch_for(ceiling, 8, 4) == "eager"


def test_without_padding_only_listed_sizes_are_captured() -> None:
    exact = _with(replace(GRID, padding="none"))
    assert ov.launch_for(exact, 4, 1) == "graph" and ov.launch_for(exact, 3, 1) == "eager"
    assert ov.padded_sequences(exact, 3, 1) == 3


@given(
    host_us=st.floats(0.0, 5e4),
    device_s=st.floats(0.0, 1.0),
    overlap=st.floats(0.0, 1.0),
    more_us=st.floats(0.0, 5e4),
)
def test_host_cost_never_makes_a_step_faster(
    host_us: float, device_s: float, overlap: float, more_us: float
) -> None:
    profile = _with(overlap_fraction=overlap)
    host_s, more_s = host_us * 1e-6, (host_us + more_us) * 1e-6
    step = device_s + ov.exposed_host_s(profile, host_s, device_s)
    longer = device_s + ov.exposed_host_s(profile, more_s, device_s)
    assert step >= device_s
    assert longer >= step - 1e-15
    assert step >= max(device_s, host_s) - 1e-15  # never below either side


def test_overlap_limits_are_sum_and_max() -> None:
    serial, hidden = _with(overlap_fraction=0.0), _with(overlap_fraction=1.0)
    assert ov.exposed_host_s(serial, 3e-4, 1e-3) == pytest.approx(3e-4)
    assert ov.exposed_host_s(hidden, 3e-4, 1e-3) == 0.0
    assert 1e-3 + ov.exposed_host_s(hidden, 2e-3, 1e-3) == pytest.approx(2e-3)


def test_host_time_grows_with_sequences_and_tokens() -> None:
    profile = _with(step_us=100.0, per_sequence_us=2.0, per_token_us=0.5)
    assert ov.host_time_s(profile, 4, 16) == pytest.approx((100 + 8 + 8) * 1e-6)
    assert ov.host_time_s(profile, 8, 16) > ov.host_time_s(profile, 4, 16)


def test_a_tree_verifies_its_draft_token_count_and_a_chain_k_plus_one() -> None:
    tree = DrafterStyle(shape="tree", tree_draft_tokens=16, tree_topk=4)
    assert ov.verify_tokens(tree, 4) == 16 and ov.verify_tokens(DrafterStyle(), 4) == 5
    assert ov.draft_sequences(tree, 3) == 12 and ov.draft_sequences(DrafterStyle(), 3) == 3


def test_drafter_launch_follows_the_style_or_the_target() -> None:
    assert ov.drafter_launch(DrafterStyle(launch="eager"), "graph") == "eager"
    assert ov.drafter_launch(DrafterStyle(), "piecewise") == "graph"
    assert ov.drafter_launch(DrafterStyle(), "eager") == "eager"


def test_piecewise_is_launch_bound_when_pieces_outnumber_the_device_time() -> None:
    assert ov.piecewise_step_s(1e-3, 10, 5e-6, 5e-6) == 1e-3
    assert ov.piecewise_step_s(1e-5, 48, 5e-6, 5e-6) == pytest.approx(49 * 5e-6 + 48 * 5e-6)


def test_every_host_parameter_has_unit_meaning_and_bounds() -> None:
    for spec in HOST_PARAMETERS.values():
        assert spec.unit and spec.meaning and spec.lower < spec.upper


def test_batch_expansion_verifies_q_one_token_rows_per_sequence() -> None:
    expanded = DrafterStyle(verify_mode="batch_expansion")
    assert ov.verify_shape(expanded, 3, 4) == (15, 1)
    assert ov.verify_shape(DrafterStyle(), 3, 4) == (3, 5)
    assert ov.verify_shape(DrafterStyle(shape="tree", tree_draft_tokens=8, tree_topk=2), 3, 4) == (3, 8)


def test_verification_capture_counts_tokens_in_vllm_and_sequences_in_sglang() -> None:
    """vLLM 0.33 captures at most 512 tokens per graph (max_cudagraph_capture_size), so a verification of
    B·(K+1) tokens leaves the graphs at a quarter of the batch a decode does (K = 3), and runs eagerly
    above; SGLang 0.5.23 captures its verification graphs per sequence (bs × num_draft_tokens), so the same
    batch stays captured up to its max_bs."""
    vllm, sglang = load_serving_engine("vllm"), load_serving_engine("sglang")
    k = 3
    assert ov.launch_for(vllm, 128, k + 1) == "graph" and ov.launch_for(vllm, 129, k + 1) == "eager"
    assert ov.launch_for(vllm, 512, 1) == "graph"  # the decode step of the same batch stays captured
    assert ov.launch_for(sglang, 256, k + 1) == "graph" and ov.launch_for(sglang, 256, 1) == "graph"
    assert ov.padded_sequences(sglang, 33, k + 1) == 40  # padded in sequences, whatever the tokens


def test_both_profile_readers_keep_the_reading_layers_bounds(tmp_path: Path) -> None:
    """A profile file passes through `moesim.reading`: nesting past MAX_NESTING is refused by name."""
    from moesim.reading import MAX_NESTING
    from moesim.simulator.hardware.profile import load_profile

    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n")
    for load, field in ((load_profile, "hardware"), (load_serving_engine, "serving_engine")):
        with pytest.raises(MoesimError) as info:
            load(str(deep))
        assert info.value.field == field and "nests" in info.value.problem and info.value.fix
