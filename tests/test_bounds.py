"""Bounds before work, combinations refused, and CPU profiles described as CPUs: each case ends in one clear
message with the estimate, the limit and the flag that raises it, before any work starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import moesim
from moesim.cli import cli
from moesim.errors import MoesimError
from moesim.simulator.bounds import check_configs, check_memory
from moesim.simulator.routing.correlated import bank_bytes, bank_tokens
from moesim.simulator.routing.presets import typical_routing

ROOT = Path(__file__).resolve().parents[1]
CPU_PROFILE = str(ROOT / "docs" / "validation" / "cpu" / "cpu.toml")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, SystemExit | None), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "flag", "estimate"),
    [
        (
            ("simulate", "--model", "olmoe-1b-7b", "--draft-len", "1024", "--experts", "100000"),
            "--max-memory-gb",
            "5.4 GB",
        ),
        (("simulate", "--model", "olmoe-1b-7b", "--draft-len", "100000"), "--draft-len ≤ 1,024", "100,000"),
        (("simulate", "--model", "dbrx", "--draft-len", "100000"), "--draft-len ≤ 1,024", "100,000"),
        (("simulate", "--model", "olmoe-1b-7b", "--experts", "1000000"), "--max-memory-gb", "53.2 GB"),
        (
            ("sweep", "--model", "olmoe-1b-7b", "--batch", "1-100000"),
            "--max-configs",
            "800,000 configurations",
        ),
        (
            ("sweep", "--model", "olmoe-1b-7b", "--batch", "1-1000000000"),
            "sweep fewer values",
            "1,000,000,000",
        ),
        (
            ("serve", "--model", "olmoe-1b-7b", "--num-prompts", "10000000"),
            "--max-minutes",
            "serving 10,000,000 requests",
        ),
        (
            ("screen", "--model", "qwen3-30b-a3b", "--experts", "1..10000:1", "--expert-width", "1..10000:1"),
            "--sample N",
            "100,000,000 designs",
        ),
        (  # a sample of the 10⁸-design space: refused on its count before a design is drawn
            (
                "screen",
                "--model",
                "qwen3-30b-a3b",
                "--experts",
                "1..10000:1",
                "--expert-width",
                "1..10000:1",
                "--sample",
                "1000000",
            ),
            "--max-minutes",
            "1,000,000 designs",
        ),
        (
            (
                "routing",
                "predict",
                "--experts",
                "128",
                "--top-k",
                "8",
                "--batch",
                "1000000",
                "--tokens",
                "1000",
            ),
            "--max-memory-gb",
            "GB (20 samples)",
        ),
    ],
)
def test_oversized_runs_are_refused_with_estimate_limit_and_flag(
    args: tuple[str, ...], flag: str, estimate: str
) -> None:
    code, out = invoke(*args)
    assert code == 2
    assert flag in out and estimate in out
    assert len(out.strip().splitlines()) == 1


def test_a_sweep_refuses_any_model_whose_routing_sampling_is_too_large_before_it_sweeps_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """olmoe-1b-7b's bank at K = 1,024 (64 experts, 70.5 MB) is under 72 MB, qwen3-30b-a3b's (128, 73.9 MB)
    above: the refusal comes before olmoe is swept."""
    import moesim.simulator.speculative.sweep as sweep

    def prepare(*args: object) -> None:
        raise AssertionError("a model was swept before every model's routing was bounded")

    monkeypatch.setattr(sweep, "prepare_points", prepare)
    code, out = invoke(
        "sweep", "--model", "olmoe-1b-7b,qwen3-30b-a3b", "--batch", "1", "--draft-len", "1024",
        "--max-memory-gb", "0.072",
    )  # fmt: skip
    assert code == 2
    assert "qwen3-30b-a3b with draft length 1024" in out and "--max-memory-gb" in out


def test_a_csv_of_a_million_designs_is_refused_on_its_count_before_a_row_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import moesim.simulator.screening.space as space

    path = tmp_path / "designs.csv"
    path.write_text("experts,top_k\n" + "64,4\n" * 1_000_000)

    def parse(*args: object) -> None:
        raise AssertionError("the rows were parsed before the time bound")

    monkeypatch.setattr(space, "csv_rows", parse)
    code, out = invoke("screen", "--model", "qwen3-30b-a3b", "--designs", str(path))
    assert code == 2
    assert "--max-minutes" in out and "1,000,000 designs" in out
    assert len(out.strip().splitlines()) == 1


def test_the_limits_are_the_flags() -> None:
    code, _ = invoke(
        "sweep", "--model", "olmoe-1b-7b", "--batch", "1,2", "--draft-len", "1,2", "--max-configs", "3"
    )
    assert code == 2
    code, out = invoke(
        "sweep",
        "--model",
        "olmoe-1b-7b",
        "--batch",
        "1,2",
        "--draft-len",
        "1,2",
        "--max-configs",
        "4",
        "--json",
    )
    assert code == 0 and len(json.loads(out)["rows"]) == 4
    tight = moesim.Scenario("olmoe-1b-7b", draft_len=3, max_memory_gb=0.001)
    with pytest.raises(MoesimError, match="max-memory-gb"):
        moesim.simulate(tight)


def test_memory_estimate_grows_with_tokens_and_experts() -> None:
    assert bank_tokens(1) == bank_tokens(17) == 17 and bank_tokens(18) == 32 and bank_tokens(1025) == 2048
    assert bank_bytes(128, 4, 8) < bank_bytes(128, 64, 8) < bank_bytes(128, 1024, 8)
    assert bank_bytes(256, 4, 8) > 1.9 * bank_bytes(128, 4, 8)  # the working arrays scale with experts
    assert bank_bytes(128, 1024, 16) > 1.9 * bank_bytes(128, 1024, 8) - bank_bytes(128, 1, 8)  # ids with k
    check_memory(typical_routing(128, 8), 4, 4.0, "a normal step")  # the default limit admits normal runs
    with pytest.raises(MoesimError, match="above the limit"):
        check_memory(typical_routing(128, 8), 4096, 0.05, "a long draft")
    with pytest.raises(MoesimError, match="must be > 0"):
        check_memory(typical_routing(128, 8), 4, 0.0, "x")
    check_configs(20, 20)
    with pytest.raises(MoesimError, match="21 configurations"):
        check_configs(21, 20)


def test_acceptance_and_acceptance_length_are_exclusive() -> None:
    with pytest.raises(MoesimError, match="not both"):
        moesim.simulate(model="olmoe-1b-7b", acceptance=0.7, acceptance_length=2.0)
    code, out = invoke(
        "sweep", "--model", "olmoe-1b-7b", "--batch", "1", "--acceptance", "0.7", "--acceptance-length", "2"
    )
    assert code == 2 and "--acceptance-length" in out
    alone = moesim.simulate(model="olmoe-1b-7b", acceptance_length=2.0)
    assert alone.to_json()["tokens_per_step"] == pytest.approx(2.0)


def test_a_cpu_profile_is_described_as_a_cpu_with_its_compute_rule() -> None:
    code, out = invoke("simulate", "--model", "olmoe-1b-7b", "--hardware", CPU_PROFILE)
    assert code == 0, out
    assert "eager launch" in out and "graph" not in out
    assert "layout: 1 CPU" in out and "GPU" not in out.split("where the time goes")[0].replace("--gpus", "")
    assert "note: bf16 arithmetic timed at the fp32 peak" in out
    code, out = invoke("simulate", "--model", "olmoe-1b-7b", "--hardware", CPU_PROFILE, "--launch", "graph")
    assert code == 2 and "--launch eager" in out
    data = json.loads(invoke("simulate", "--model", "olmoe-1b-7b", "--hardware", CPU_PROFILE, "--json")[1])
    assert data["assumptions"]["launch"] == "eager" and data["assumptions"]["device"] == "CPU"


def test_a_gpu_profile_keeps_its_defaults_and_states_borrowed_peaks() -> None:
    data = json.loads(invoke("simulate", "--model", "qwen3-30b-a3b", "--json")[1])
    assert data["assumptions"]["launch"] == "graph" and data["assumptions"]["compute_rule"] is None
    fp8 = json.loads(invoke("simulate", "--model", "deepseek-v3", "--hardware", "a100-80gb", "--json")[1])
    assert "fp8 arithmetic timed at the bf16 peak" in fp8["assumptions"]["compute_rule"]


def test_a_cache_larger_than_memory_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "moesim" / "hardware_profiles" / "h200.toml").read_text()
    bad = tmp_path / "pb-cache.toml"
    bad.write_text(text.replace("last_level_cache_bytes = ", "last_level_cache_bytes = 1e15 # ", 1))
    code, out = invoke("simulate", "--model", "olmoe-1b-7b", "--hardware", str(bad))
    assert code == 2 and "last_level_cache_bytes" in out and "larger than the device memory" in out
