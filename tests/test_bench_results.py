"""Serving-benchmark files in: vLLM and SGLang records, workload rebuilding, and `moesim validate
bench` (a round trip on the shipped example pair, pairing, errors)."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest
from click.testing import CliRunner

from moesim.commands.validate import validate_group
from moesim.errors import MoesimError
from moesim.validation.bench.compare import pair_records
from moesim.validation.bench.results import parse_record, read_bench_results, workload_of

DATA = resources.files("moesim") / "data"


def test_vllm_record_keeps_vllm_names() -> None:
    (record,) = read_bench_results(str(DATA / "vllm_bench_example_sd.json"))
    assert record.tool == "vllm"
    assert record.max_concurrency == 8 and math.isinf(record.request_rate)
    assert {"mean_ttft_ms", "p99_itl_ms", "mean_e2el_ms", "output_throughput"} <= set(record.metrics)
    workload = workload_of(record)
    assert len(workload.requests) == record.completed == 64
    assert workload.requests[0].input_len == 1024 and workload.requests[0].output_len == 256


def test_sglang_record_is_mapped_to_vllm_names_and_its_dataset_redrawn() -> None:
    raw = {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": math.inf,
        "max_concurrency": 4,
        "random_input_len": 1000,
        "random_output_len": 200,
        "random_range_ratio": 0.5,
        "completed": 50,
        "total_input_tokens": 37000,
        "input_throughput": 1000.0,
        "output_throughput": 500.0,
        "mean_e2e_latency_ms": 900.0,
        "p99_e2e_latency_ms": 1200.0,
        "mean_tpot_ms": 5.0,
        "accept_length": 2.4,
        "concurrency": 3.9,
    }
    record = parse_record(json.loads(json.dumps(raw)), "x.jsonl#1")
    assert record.tool == "sglang" and record.accept_length == 2.4
    assert record.metrics["mean_e2el_ms"] == 900.0 and record.metrics["total_token_throughput"] == 1500.0
    lengths = [r.input_len for r in workload_of(record).requests]
    assert len(lengths) == 50 and min(lengths) >= 500 and max(lengths) <= 1000


def test_detailed_lengths_win() -> None:
    raw = {"completed": 2, "mean_ttft_ms": 1.0, "input_lens": [10, 20], "output_lens": [3, 4]}
    workload = workload_of(parse_record(raw, "d.json"))
    assert [(r.input_len, r.output_len) for r in workload.requests] == [(10, 3), (20, 4)]


def test_records_without_lengths_need_flags() -> None:
    record = parse_record({"completed": 3, "output_throughput": 100.0}, "bare.json")
    with pytest.raises(MoesimError, match="random-input-len"):
        workload_of(record)
    assert workload_of(record, 100, 50).requests[0].input_len == 100


def test_bad_files_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "junk.json"
    junk.write_text("{not json\n")
    with pytest.raises(MoesimError, match=r"junk\.json:1"):
        read_bench_results(junk)
    empty = tmp_path / "empty.json"
    empty.write_text('{"completed": 3}')
    with pytest.raises(MoesimError, match="no benchmark metrics"):
        read_bench_results(empty)


def test_runs_are_paired_by_concurrency_and_rate() -> None:
    def rec(c: int) -> object:
        return parse_record({"completed": 1, "max_concurrency": c, "output_throughput": 1.0}, f"c{c}")

    sd = [rec(1), rec(8), rec(64)]
    base = [rec(64), rec(1)]
    pairs = pair_records(sd, base)  # type: ignore[arg-type]
    assert [(a.max_concurrency, b.max_concurrency) for a, b in pairs] == [(1, 1), (64, 64)]
    with pytest.raises(MoesimError, match="baseline"):
        pair_records([rec(2), rec(4)], base)  # type: ignore[list-item, arg-type]


def test_validate_round_trip_on_the_shipped_example_pair() -> None:
    """The example files were written from `moesim serve` itself: predicting them gives them back."""
    result = CliRunner().invoke(
        validate_group,
        [
            "bench", str(DATA / "vllm_bench_example_sd.json"),
            "--profile", "h200", "--model", "qwen3-30b-a3b",
            "--baseline", str(DATA / "vllm_bench_example_baseline.json"),
            "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    point = data["points"][0]
    assert point["summary"]["metrics_compared"] == 30
    assert data["summary"]["mape"] < 1e-9
    for row in point["rows"]:
        assert row["predicted_speedup"] == pytest.approx(row["measured_speedup"], rel=1e-9)


def test_validate_bench_takes_an_acceptance_length() -> None:
    """--acceptance-length alone is accepted (--acceptance once defaulted to 0.8, so both were always set)."""
    common = [
        "bench", str(DATA / "vllm_bench_example_sd.json"),
        "--profile", "h200", "--model", "qwen3-30b-a3b",
        "--baseline", str(DATA / "vllm_bench_example_baseline.json"),
        "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(validate_group, [*common, "--acceptance-length", "2.0"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["summary"]["mape"] > 1e-3  # not the α the files were written with


def test_validate_bench_needs_all_three_flags() -> None:
    result = CliRunner().invoke(
        validate_group, ["bench", str(DATA / "vllm_bench_example_sd.json"), "--profile", "h200"]
    )
    assert result.exit_code != 0 and "--baseline" in result.output


def _example(name: str) -> dict:
    return json.loads((DATA / f"vllm_bench_example_{name}.json").read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_concurrency": 3}, "max_concurrency is 8 .* but 3"),
        ({"request_rate": 4.0}, "request_rate is inf .* but 4.0"),
        ({"total_input_tokens": 2 * 65536}, "mean prompt length is 1,024 tokens .* but 2,048"),
        ({"total_output_tokens": 16384 // 2}, "mean output length is 256 tokens .* but 128"),
        ({"mean_e2e_latency_ms": 900.0}, "is a vllm result and .* a sglang one"),
    ],
)
def test_a_pair_from_two_different_benchmarks_is_refused(change: dict, message: str) -> None:
    sd = parse_record(_example("sd"), "sd.json")
    baseline = parse_record(_example("baseline") | change, "base.json")
    with pytest.raises(MoesimError, match=message):
        pair_records([sd], [baseline])


def test_lengths_within_the_tolerance_still_pair() -> None:
    sd = parse_record(_example("sd"), "sd.json")
    near = parse_record(_example("baseline") | {"total_output_tokens": int(16384 * 1.05)}, "base.json")
    assert pair_records([sd], [near]) == [(sd, near)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mean_tpot_ms": math.nan}, "mean_tpot_ms"),
        ({"p99_itl_ms": "fast"}, "p99_itl_ms"),
        ({"mean_ttft_ms": -1.0}, "mean_ttft_ms"),
        ({"request_rate": "fast"}, "request_rate"),
        ({"request_rate": math.nan}, "request_rate"),
        ({"max_concurrency": -1}, "max_concurrency"),
        ({"num_prompts": 2**63}, "num_prompts"),
        ({"duration": math.inf}, "duration"),
        ({"mean_tpot_ms": 9.2e18}, "mean_tpot_ms"),
        ({"output_throughput": 2.0**63}, "output_throughput"),
        ({"duration": 1e300}, "duration"),
        ({"total_output_tokens": 0}, "total_output_tokens"),
        ({"input_lens": [0, 0], "output_lens": [0, 0]}, "input_lens"),
    ],
)
def test_a_record_with_nonsense_is_refused_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(MoesimError) as error:
        parse_record(_example("sd") | change, "sd.json")
    assert field in str(error.value) and "sd.json" in str(error.value)
