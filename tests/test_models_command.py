"""`moesim models NAME` and `moesim models --model-config PATH`: what moesim understood, as table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from moesim.cli import cli
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.weights import param_counts, total_weight_bytes

FAMILIES = Path(__file__).parent / "data" / "hf_configs" / "families"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_model_config_json_carries_counts_assumptions_and_ignored_keys() -> None:
    path = FAMILIES / "deepseek_v4.json"
    code, out, _ = invoke("models", "--model-config", str(path), "--json")
    assert code == 0
    summary = json.loads(out)
    spec = load_model(str(path))
    assert summary["params"]["total"] == param_counts(spec).total
    assert summary["params"]["active"] == param_counts(spec).active
    assert summary["weight_bytes"]["total"] == total_weight_bytes(spec)
    assert summary["attention"]["full"]["index_topk"] == 512
    assert summary["attention"]["compressed"]["compressed_ratio"] == 128
    assert summary["assumptions"] and summary["assumptions"] == list(spec.assumptions)
    assert summary["ignored_keys"] == list(spec.ignored_keys)


def test_model_name_table_shows_what_was_understood() -> None:
    code, out, _ = invoke("models", "gpt-oss-120b")
    assert code == 0
    for text in ("sliding", "128 routed, top-4", "mxfp4", "total 116.83B"):
        assert text in out
    code, out, _ = invoke("models", "--model-config", str(FAMILIES / "gemma4.json"))
    assert code == 0 and "assumption" in out and "dense MLP beside the MoE block" in out


def test_models_refuses_both_and_bad_configs_with_one_message(tmp_path: Path) -> None:
    code, out, err = invoke("models", "mixtral-8x7b", "--model-config", "x.json")
    assert code != 0 and "not both" in err and "Traceback" not in out + err
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 64}))
    code, out, err = invoke("models", "--model-config", str(bad))
    assert code != 0 and "num_attention_heads" in err and "Traceback" not in out + err


@pytest.mark.parametrize("family", sorted(path.stem for path in FAMILIES.glob("*.json")))
def test_every_family_simulates_on_a_layout_that_fits(family: str) -> None:
    code, out, err = invoke(
        "simulate",
        "--model-config",
        str(FAMILIES / f"{family}.json"),
        "--batch",
        "1",
        "--draft-len",
        "3",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    decode, verify = (
        data["decode"]["distinct_experts_per_layer"],
        data["verify"]["distinct_experts_per_layer"],
    )
    top_k = load_model(str(FAMILIES / f"{family}.json")).top_k
    assert decode == pytest.approx(top_k)  # one token: exactly its top-k
    assert top_k < verify <= 4 * top_k  # four tokens share some experts
    assert data["parallel"]["memory"]["fits"] if "parallel" in data else True
    assert 1.0 < data["speedup"] < data["tokens_per_step"]


def test_simulate_json_carries_the_model_counts() -> None:
    path = FAMILIES / "glm_moe_dsa.json"
    code, out, err = invoke("simulate", "--model-config", str(path), "--json")
    assert code == 0, err
    summary = json.loads(out)["model_summary"]
    spec = load_model(str(path))
    assert summary["params"]["total"] == param_counts(spec).total
    assert summary["params"]["active"] == param_counts(spec).active
    assert summary["weight_bytes"]["total"] == total_weight_bytes(spec)
    assert summary["experts"]["routed"] == spec.n_experts
    assert summary["ignored_keys"] == list(spec.ignored_keys)


def test_sweep_takes_model_configs_and_override_flags() -> None:
    path = str(FAMILIES / "qwen3_moe.json")
    args = ("sweep", "--model-config", path, "--batch", "1", "--draft-len", "3", "--json")
    code, out, err = invoke(*args)
    assert code == 0, err
    base = json.loads(out)["rows"][0]
    code, out, err = invoke(*args, "--top-k", "2")
    assert code == 0, err
    fewer = json.loads(out)["rows"][0]
    assert fewer["verify_distinct_experts"] < base["verify_distinct_experts"]
    # --model-config alone replaces the catalogue; with --model it adds to the models named
    code, out, err = invoke(*args)
    assert {row["model"] for row in json.loads(out)["rows"]} == {base["model"]} == {"qwen3_moe"}
    code, out, err = invoke(*args, "--model", "olmoe-1b-7b")
    assert code == 0, err
    assert {row["model"] for row in json.loads(out)["rows"]} == {"olmoe-1b-7b", "qwen3_moe"}
    # Without --model or --model-config the sweep covers the whole catalogue (issue 14: as its help says).
    code, out, err = invoke("sweep", "--batch", "1", "--draft-len", "1", "--json")
    assert code == 0, err
    from moesim.simulator.models.catalogue import list_models

    assert {row["model"] for row in json.loads(out)["rows"]} == set(list_models())


def test_models_shows_a_hypothetical_design_with_override_flags() -> None:
    code, out, err = invoke("models", "deepseek-v3", "--experts", "128", "--json")
    assert code == 0, err
    assert json.loads(out)["params"]["total"] < param_counts(load_model("deepseek-v3")).total
    code, _, err = invoke("models", "--experts", "128")
    assert code != 0 and "override flags need a model" in err
