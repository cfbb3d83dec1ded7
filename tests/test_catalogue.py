"""The model catalogue: every entry loads, validates, matches its published size, and round-trips."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from moesim.errors import MoesimError
from moesim.reading import parse_toml
from moesim.simulator.models.catalogue import (
    list_models,
    load_model,
    spec_from_dict,
    spec_to_dict,
    spec_to_toml,
)
from moesim.simulator.models.weights import params_as_published

REQUIRED = {
    "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3", "deepseek-r1",
    "kimi-k2", "gpt-oss-120b", "gpt-oss-20b", "glm-4.5", "glm-4.5-air", "llama-4-scout-17b-16e",
    "llama-4-maverick-17b-128e", "olmoe-1b-7b", "dbrx", "grok-1", "qwen2-57b-a14b", "qwen2-0.5b",
    "qwen3-0.6b", "llama-3.2-1b",
}  # fmt: skip
TOTAL_TOLERANCE = 0.03
ACTIVE_TOLERANCE = 0.10
REPO = Path(__file__).resolve().parents[1]


def test_catalogue_holds_every_reference_model() -> None:
    assert set(list_models()) >= REQUIRED


@pytest.mark.parametrize("name", list_models())
def test_entry_loads_with_metadata(name: str) -> None:
    spec = load_model(name)
    assert spec.name == name
    assert spec.published_total_params and spec.source and spec.notes and spec.family
    assert load_model(name.upper()) == spec


@pytest.mark.parametrize("name", list_models())
def test_params_match_published_figures(name: str) -> None:
    """Total within 3%, active within 10%, counted as the publisher counts; an entry that cannot meet
    this must say why in `params_tolerance_reason`, and the exception must really be needed."""
    spec = load_model(name)
    total, active = params_as_published(spec)
    assert spec.published_total_params is not None
    errors = [abs(total / spec.published_total_params - 1) <= TOTAL_TOLERANCE]
    if spec.published_active_params is not None:
        errors.append(abs(active / spec.published_active_params - 1) <= ACTIVE_TOLERANCE)
    if spec.params_tolerance_reason:
        assert not all(errors), f"{name}: params_tolerance_reason is stale, the counts now match"
        assert len(spec.params_tolerance_reason) > 40
    else:
        assert all(errors), f"{name}: total {total / 1e9:.2f}B, active {active / 1e9:.2f}B"


@pytest.mark.parametrize("name", list_models())
def test_toml_round_trip(name: str) -> None:
    spec = load_model(name)
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert spec_from_dict(parse_toml("round-trip", spec_to_toml(spec), "round-trip", "model")) == spec


def test_irregular_layouts_round_trip_as_explicit_lists() -> None:
    spec = load_model("qwen3-30b-a3b")
    from dataclasses import replace

    odd = replace(spec, layer_ffn=("dense", *spec.layer_ffn[1:-2], "dense", "moe"), dense_ffn_width=6144)
    data = spec_to_dict(odd)
    assert "ffn" in data["layers"]
    assert spec_from_dict(parse_toml("x", spec_to_toml(odd), "x", "model")) == odd


def test_native_weight_formats() -> None:
    for name in ("deepseek-v3", "deepseek-r1", "kimi-k2"):
        spec = load_model(name)
        assert spec.dense_format.name == spec.expert_format.name == "fp8"
        assert spec.dense_format.scale_block == (128, 128)
    for name in ("gpt-oss-120b", "gpt-oss-20b"):
        spec = load_model(name)
        assert (spec.dense_format.name, spec.expert_format.name) == ("bf16", "mxfp4")
    assert load_model("qwen3-235b-a22b").expert_format.name == "bf16"


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(MoesimError) as err:
        load_model("qwen3-30b")
    assert err.value.field == "model"
    assert "qwen3-30b-a3b" in str(err.value)
    with pytest.raises(MoesimError, match="does not exist"):
        load_model("no/such/file.toml")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "custom.toml"
    path.write_text(text)
    return path


def test_load_by_path_and_malformed_files(tmp_path: Path) -> None:
    good = _write(tmp_path, spec_to_toml(load_model("olmoe-1b-7b")))
    assert load_model(str(good)) == load_model("olmoe-1b-7b")

    broken = _write(tmp_path, "name = 'x\nhidden = 3")
    with pytest.raises(MoesimError) as err:
        load_model(str(broken))
    assert "custom.toml" in err.value.field and "TOML" in err.value.problem

    text = spec_to_toml(load_model("olmoe-1b-7b"))
    cases = {
        text.replace("top_k = 8", "top_k = 80"): "top_k",
        text.replace("top_k = 8", 'top_k = "eight"'): "top_k",
        text.replace("expert_width = 1024", "expert_width = -1024"): "expert_width",
        text.replace("hidden = 2048", "hiden = 2048"): "hiden",
        text.replace("[attention]", "[attentionx]"): "attentionx",
        text.replace("num_heads = 16", "num_headz = 16"): "attention.num_headz",
    }
    for bad, field in cases.items():
        with pytest.raises(MoesimError) as err:
            load_model(str(_write(tmp_path, bad)))
        assert err.value.field.startswith(str(tmp_path / "custom.toml"))
        assert err.value.field.endswith(field), (field, err.value)


def test_hf_config_by_path_and_directory(tmp_path: Path) -> None:
    source = REPO / "tests" / "data" / "hf_configs" / "mixtral-8x7b.json"
    spec = load_model(str(source))
    assert spec.name == "mixtral-8x7b" and spec.n_experts == 8
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(source.read_text())
    assert load_model(str(model_dir)).name == "my-model"
    assert load_model(str(model_dir / "config.json")).name == "my-model"


@pytest.mark.slow
def test_catalogue_ships_in_the_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("moesim-*.whl"))
    shipped = {
        Path(n).stem for n in zipfile.ZipFile(wheel).namelist() if n.startswith("moesim/model_catalogue/")
    }
    assert set(list_models()) <= shipped
