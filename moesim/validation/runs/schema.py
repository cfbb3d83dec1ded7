"""Measured speculative-decoding runs as data: the CSV schema, reading and checking a runs file, and which
rows the simulator can represent.

One row per measured point (model, hardware, layout, engine and version, drafter, K, AL, batch, lengths,
metric and what it is a ratio of, baseline and SD values, source). The bundled file
(`moesim/data/measured_runs.csv`) carries the public runs of the reference notes; users bring their own
in the same format (`moesim validate runs --schema` prints it).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError
from moesim.reading import MAX_TABLE_BYTES, csv_rows, read_text
from moesim.simulator.bounds import MAX_RUN_ROWS, check_count, check_finite, check_rows


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # text | int | float (> 0) | float0 (≥ 0) | ints (semicolon-separated) | choice
    required: bool
    meaning: str
    choices: tuple[str, ...] = ()


# Every metric the step model predicts: a ratio of per-step token rates at one batch, or its peak over batch.
METRICS = ("speedup_per_user", "speedup_throughput", "speedup_tpot", "peak_speedup")
SCHEMA: tuple[Column, ...] = (
    Column("run_id", "text", True, "unique name of the measured point"),
    Column("source", "text", True, "where it was published (groups rows for leave-one-source-out)"),
    Column("model", "text", True, "catalogue model name or a model .toml path"),
    Column("hardware", "text", True, "bundled hardware profile name or a profile .toml path"),
    Column("gpus", "int", True, "GPUs the target runs on"),
    Column("tp", "int", True, "tensor-parallel ranks of attention"),
    Column("ep", "int", True, "expert-parallel ranks (1: experts tensor-parallel over all GPUs)"),
    Column(
        "expert_weight_format", "text", False, "expert weight format when not the catalogue's (e.g. mxfp4)"
    ),
    Column("serving_engine", "choice", True, "engine that ran it", ("vllm", "sglang", "trtllm", "other")),
    Column("engine_version", "text", False, "engine version as published"),
    Column(
        "engine_preset",
        "text",
        False,
        "moesim serving-engine preset of that version (blank: the one named by serving_engine)",
    ),
    Column("cuda_graphs", "choice", True, "CUDA graphs on", ("yes", "no")),
    Column("drafter", "text", True, "moesim --draft spelling: mtp, eagle, ngram, model:NAME"),
    Column("draft_shape", "choice", True, "chain (K + 1 verified) or tree", ("chain", "tree")),
    Column("draft_len", "int", False, "K: drafter steps per round"),
    Column("draft_tokens", "int", False, "tokens a tree verifies per sequence"),
    Column("tree_topk", "int", False, "tree branching per drafter step"),
    Column(
        "drafter_launch",
        "choice",
        False,
        "drafter passes in graph replay or eager (blank: the engine's)",
        ("graph", "eager"),
    ),
    Column("acceptance_length", "float", False, "AL: mean tokens per round (accepted + 1)"),
    Column(
        "batch", "ints", True, "batch size; for peak_speedup the batch sizes the peak is taken over (1;2;4)"
    ),
    Column("concurrency", "int", False, "concurrent requests of the benchmark"),
    Column(
        "num_prompts",
        "int",
        False,
        "requests the timed run sent with at most `batch` in flight, for a throughput metric (blank: a "
        "steady batch)",
    ),
    Column(
        "max_running_requests",
        "int",
        False,
        "the server's cap on running requests when the run set it (blank: the engine preset's SD default)",
    ),
    Column("input_len", "int", False, "prompt tokens"),
    Column("output_len", "int", False, "generated tokens"),
    Column("dataset", "text", False, "dataset and sampling"),
    Column(
        "temperature",
        "float0",
        False,
        "sampling temperature of the requests (0: greedy; blank: not stated, priced greedy)",
    ),
    Column("metric", "choice", True, "what `speedup` measures", METRICS),
    Column("ratio_of", "text", True, "what the speedup is a ratio of, in words"),
    Column("baseline_value", "float", False, "the figure without SD"),
    Column("sd_value", "float", False, "the figure with SD"),
    Column("value_unit", "text", False, "unit of baseline_value and sd_value"),
    Column("speedup", "float", True, "measured speedup (SD over baseline)"),
    Column("notes", "text", False, "conditions, derivations"),
)
COLUMN_NAMES = tuple(c.name for c in SCHEMA)
BUNDLED_RUNS = "measured_runs.csv"


@dataclass(frozen=True)
class MeasuredRun:
    """One row of a runs file, typed."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(self.values["batch"])


def _whole(text: str) -> int:
    """An integer cell (a decimal point is allowed for a whole number: 8.0)."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise
        return int(value)


KIND_WORDS = {
    "int": "a whole number",
    "float": "a number above 0",
    "float0": "a number ≥ 0",
    "ints": "whole numbers separated by semicolons",
}


def _parse_cell(column: Column, text: str, where: str) -> Any:
    text = text.strip()
    if not text:
        if column.required:
            raise MoesimError(f"{where}: {column.name}", "is empty", f"give {column.meaning}")
        return None
    try:
        if column.kind == "int":
            return check_count(_whole(text), column.name, where, low=0, fix=f"give {column.meaning}")
        if column.kind in ("float", "float0"):
            return check_finite(
                float(text),
                column.name,
                where,
                low=0.0,
                low_open=column.kind == "float",
                fix=f"give {column.meaning}",
            )
        if column.kind == "ints":
            return tuple(
                check_count(_whole(part), column.name, where, fix=f"give {column.meaning}")
                for part in text.split(";")
            )
    except ValueError as exc:
        raise MoesimError(
            f"{where}: {column.name}",
            f"{text!r} is not {KIND_WORDS[column.kind]}",
            f"give {column.meaning}",
        ) from exc
    if column.kind == "choice" and text not in column.choices:
        raise MoesimError(
            f"{where}: {column.name}", f"must be one of {', '.join(column.choices)}, got {text!r}"
        )
    return text


def parse_runs(text: str, source: str) -> list[MeasuredRun]:
    """Rows of a runs CSV, each cell checked against the schema (errors name the file, row and column)."""
    check_rows(text, MAX_RUN_ROWS, "runs", source, "runs CSV")
    header, rows = csv_rows(source, text, source, "runs CSV")  # duplicate columns and ragged rows refused
    missing = [c.name for c in SCHEMA if c.required and c.name not in header]
    if missing:
        raise MoesimError(
            f"{source}: {missing[0]}",
            "column is missing",
            "see `moesim validate runs --schema` for the columns",
        )
    unknown = sorted(set(header) - set(COLUMN_NAMES))
    if unknown:
        raise MoesimError(
            f"{source}: {unknown[0]}", "is not a known column", f"known: {', '.join(COLUMN_NAMES)}"
        )
    runs: list[MeasuredRun] = []
    seen: set[str] = set()
    for line, row in enumerate(rows, start=2):
        where = f"{source} line {line}"
        values = {c.name: _parse_cell(c, row.get(c.name) or "", where) for c in SCHEMA}
        _check_acceptance_length(values, where)
        _check_num_prompts(values, where)
        _check_speedup(values, where)
        if values["run_id"] in seen:
            raise MoesimError(
                f"{where}: run_id", f"{values['run_id']!r} appears twice", "give each row its own id"
            )
        seen.add(values["run_id"])
        runs.append(MeasuredRun(values))
    if not runs:
        raise MoesimError(source, "has no rows", "add one row per measured point")
    return runs


def _check_acceptance_length(values: dict[str, Any], where: str) -> None:
    """A round yields at most its verified tokens: K + 1 for a chain, the draft tokens + 1 for a tree."""
    length = values.get("acceptance_length")
    if length is None:
        return
    tree = values.get("draft_shape") == "tree"
    drafted = values.get("draft_tokens") if tree else values.get("draft_len")
    if length < 1.0:
        raise MoesimError(
            f"{where}: acceptance_length", f"is {length:g}, below 1 (a round yields at least one token)"
        )
    if drafted is not None and length > drafted + 1:
        raise MoesimError(
            f"{where}: acceptance_length",
            f"is {length:g}, above the {drafted + 1} tokens a round of "
            f"{'draft_tokens' if tree else 'draft_len'} {drafted} can yield",
            "check acceptance_length (accepted + 1 per round) against the draft length",
        )


def _check_num_prompts(values: dict[str, Any], where: str) -> None:
    """A benchmark's prompt count shapes its output throughput (total tokens over the run's time), not a
    per-user rate or a latency, and a timed run sends at least one prompt."""
    prompts = values.get("num_prompts")
    if prompts is None:
        return
    if prompts < 1:
        raise MoesimError(f"{where}: num_prompts", f"is {prompts}, below 1", "give at least one prompt")
    if values.get("metric") != "speedup_throughput":
        raise MoesimError(
            f"{where}: num_prompts",
            f"applies to a speedup_throughput row, not to {values.get('metric')}",
            "leave num_prompts blank for this metric",
        )


SPEEDUP_ROUNDING = 0.05
"""How far a row's speedup may differ from the ratio of its two values: published figures are rounded (the
bundled rows agree within 1 %)."""


def _check_speedup(values: dict[str, Any], where: str) -> None:
    """A speedup is at most the tokens a round verifies (every draft accepted, a round costing no more than one
    decode step), and the ratio of the row's SD and baseline values when it gives both (either way round: a
    rate's ratio or a latency's)."""
    speedup = values.get("speedup")
    if speedup is None:
        return
    tree = values.get("draft_shape") == "tree"
    drafted = values.get("draft_tokens") if tree else values.get("draft_len")
    if drafted is not None and speedup > drafted + 1:
        raise MoesimError(
            f"{where}: speedup",
            f"is {speedup:g}, above the {drafted + 1} tokens a round of "
            f"{'draft_tokens' if tree else 'draft_len'} {drafted} can yield",
            "check the speedup against the draft length",
        )
    baseline, sd = values.get("baseline_value"), values.get("sd_value")
    if baseline and sd and speedup > 0:
        off = min(abs(sd / baseline - speedup), abs(baseline / sd - speedup)) / speedup
        if off > SPEEDUP_ROUNDING:
            raise MoesimError(
                f"{where}: speedup",
                f"is {speedup:g}, but sd_value {sd:g} and baseline_value {baseline:g} give "
                f"{sd / baseline:.3g} (or {baseline / sd:.3g} for a latency)",
                "check the speedup, sd_value and baseline_value columns",
            )


def read_runs(path: str | None = None) -> list[MeasuredRun]:
    """The runs of `path` (a CSV in the schema), or the bundled public runs when None."""
    if path is None:
        text = resources.files("moesim").joinpath("data", BUNDLED_RUNS).read_text(encoding="utf-8")
        return parse_runs(text, BUNDLED_RUNS)
    text = read_text("runs", Path(path).expanduser(), "CSV of measured runs", max_bytes=MAX_TABLE_BYTES)
    return parse_runs(text, path)


def unrepresentable_reason(run: MeasuredRun) -> str | None:
    """Why the step model cannot predict this row, or None when it can."""
    if run.draft_len is None or run.draft_len < 1:
        return "draft length K not published"
    if run.acceptance_length is None:
        return "acceptance length not published"
    if run.draft_shape == "tree" and (run.draft_tokens is None or run.tree_topk is None):
        return "tree draft tokens or top-k not published"
    if run.metric != "peak_speedup" and len(run.batches) != 1:
        return "a single-batch metric with several batch sizes"
    return None


def schema_rows() -> list[dict[str, Any]]:
    """The schema as plain data (for `--runs-schema --json`)."""
    return [
        {
            "column": c.name,
            "type": c.kind,
            "required": c.required,
            "meaning": c.meaning,
            "choices": list(c.choices),
        }
        for c in SCHEMA
    ]
