"""A generated corpus of bad and edge inputs: mutations of the shipped example files and every numeric flag's
extremes, each run in a forked child of one fresh interpreter with its CPU time and peak memory recorded.

Not hand-listed: the flags come from click's own description of every command (each INT / FLOAT option, and each
TEXT option whose default is a number or a list of numbers), the file fields from walking the example files'
numeric leaves (JSON, TOML, CSV, .npz), and the values from one list of extremes. A seeded sampler keeps each
class to a budget so the whole corpus stays quick on a 2-core machine.

Expectations: a value that no field accepts (−1, 2⁶³, inf, nan, a word where a number goes, nesting deeper than
any real file, a duplicate CSV header, a ragged row) must be refused — non-zero exit, the field named, no
traceback; a value some fields accept (0, 1e308, a deleted optional key) must end without a traceback either way.
Every case must stay under the time and memory limits (`CPU_LIMIT_S`, `PEAK_LIMIT_MB`).

    python tests/corpus_generated.py --json results.json     # run it (PYTHONPATH picks the tree under test)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import random
import re
import resource
import select
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPU_LIMIT_S = 2.0
"""CPU seconds one case may spend (user + system of its child), after the interpreter and moesim are loaded."""
PEAK_LIMIT_MB = 300.0
"""Peak resident memory of one case's child (MB), counting the loaded interpreter it shares with its parent."""
KILL_WALL_S = float(os.environ.get("MOESIM_CORPUS_KILL_S", "60"))
"""A case still running after this is killed and counted as over time (only a broken build gets there)."""
KILL_RSS_MB = 2000.0
"""A case whose resident memory passes this is killed and counted as over memory (protects the shared machine)."""

INT_EXTREMES: tuple[Any, ...] = (0, -1, 2**63, 1e308, math.inf, math.nan)
REFUSED_VALUES = {"-1", str(2**63), "inf", "nan", "fast"}
"""Values no numeric field accepts; 0 and 1e308 are valid for some (no shared experts, an unbounded memory limit).
2⁶³ is refused where a whole number is read (it overflows int64); where a float is read it is a large finite
number, as 1e308 is, and may be valid (a gamma shape, a bandwidth bound) — see `_must_refuse`."""
SEED = 20261201


@dataclass
class Case:
    id: str
    kind: str  # the class: flag, config, catalogue, profile, engine, runs, bench, measured, designs, trace, stats
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    fields: tuple[str, ...] = ()  # one of these must appear in the message of a refusal
    must_refuse: bool = True
    cpu_limit_s: float = CPU_LIMIT_S
    peak_limit_mb: float = PEAK_LIMIT_MB


# ---------------------------------------------------------------------------------------------------------------
# values


def _text(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


def _must_refuse(value: Any, integer: bool = True) -> bool:
    """Whether no field of this kind (whole number or float) accepts `value`."""
    if not integer and _text(value) == str(2**63):
        return False
    return _text(value) in REFUSED_VALUES


# ---------------------------------------------------------------------------------------------------------------
# flags, from click


def _bases(d: str) -> dict[tuple[str, ...], list[str]]:
    """A quick valid invocation of every command (files it needs are written by `_setup_files`)."""
    return {
        ("simulate",): ["simulate", "--model", "olmoe-1b-7b"],
        ("sweep",): ["sweep", "--model", "olmoe-1b-7b", "--batch", "1", "--draft-len", "1"],
        ("serve",): ["serve", "--model", "olmoe-1b-7b", "--num-prompts", "4", "--max-concurrency", "1"],
        ("screen",): ["screen", "--model", "olmoe-1b-7b", "--experts", "32,64", "--batch", "1", "--draft-len", "1"],
        ("layer",): ["layer", "--model", "olmoe-1b-7b", "--tokens", "4", "--distinct-experts", "4"],
        ("models",): ["models", "--model-config", f"{d}/base_config.json"],
        ("validate",): ["validate", "--runs", f"{d}/base_runs.csv"],
        ("routing", "predict"): ["routing", "predict", "--experts", "64", "--top-k", "8", "--batch", "1", "--tokens", "4"],
        ("routing", "generate"): [
            "routing", "generate", "--stats", f"{d}/base_stats.json", "--sequences", "2", "--tokens", "4",
            "-o", f"{d}/out.npz",
        ],
        ("routing", "fit"): ["routing", "fit", f"{d}/base_trace.npz", "-o", f"{d}/out.json"],
        ("routing", "inspect"): ["routing", "inspect", f"{d}/base_trace.npz"],
    }  # fmt: skip


EXPENSIVE_BASES: dict[tuple[str, ...], list[str]] = {
    # measuring commands: only values that must be refused are tried (a valid one would start measuring)
    ("validate", "measure"): ["validate", "--device", "cpu", "--profile", "docs/validation/cpu/cpu.toml"],
    ("validate", "bench"): [
        "validate", "--bench-result", "moesim/data/vllm_bench_example_sd.json", "--baseline",
        "moesim/data/vllm_bench_example_baseline.json", "--model", "qwen3-30b-a3b", "--profile", "h200",
    ],
    ("calibrate",): ["calibrate", "--device", "cpu", "--quick", "--output", "{d}/cal.toml"],
    ("routing", "record"): [
        "routing", "record", "--hf-model", "tests/data/hf_configs/olmoe-1b-7b.json", "--prompts",
        "{d}/prompts.txt", "-o", "{d}/out.npz",
    ],
}  # fmt: skip
VALIDATE_MODES = {
    "measure": {"--context-len", "--layers", "--threads", "--seed"},
    "bench": {"--acceptance-length", "--acceptance", "--kv-cache-tokens", "--tp", "--random-input-len",
              "--random-output-len", "--num-prompts"},
}  # fmt: skip
SHARED_ONCE = ("simulate",)
"""The model-override flags every model command shares get all six extremes here, two elsewhere."""


def _numeric_options(command: Any) -> Iterator[tuple[str, bool]]:
    """(flag, is_integer) of each numeric option of a click command."""
    import click

    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag or not param.opts[0].startswith("--"):
            continue
        kind = param.type
        if isinstance(kind, click.types.IntParamType):
            yield param.opts[0], True
        elif isinstance(kind, click.types.FloatParamType):
            yield param.opts[0], False
        elif isinstance(kind, click.types.StringParamType) and re.fullmatch(
            r"[0-9.,\-]+", str(param.default or "")
        ):
            yield param.opts[0], "." not in str(param.default)


def _command(cli: Any, path: tuple[str, ...]) -> Any:
    import click

    command = cli
    for name in path:  # groups load their commands lazily
        command = command.get_command(click.Context(command), name)
    return command


def flag_cases(d: str) -> list[Case]:
    from moesim.cli import cli

    shared = {opt for opt, _ in _numeric_options(_command(cli, ("models",)))}
    cases: list[Case] = []
    for path, base in _bases(d).items():
        command = _command(cli, path)
        for flag, integer in _numeric_options(command):
            if path == ("validate",) and flag in set().union(*VALIDATE_MODES.values()):
                continue
            values = INT_EXTREMES if (flag not in shared or path[0] in SHARED_ONCE) else (-1, 2**63)
            for value in values:
                argv = [*base, flag, _text(value)]
                cases.append(
                    Case(f"flag:{' '.join(path)}:{flag}={_text(value)}", "flag", argv,
                         fields=(flag,), must_refuse=_must_refuse(value, integer))
                )  # fmt: skip
    for path, base in EXPENSIVE_BASES.items():
        command = _command(cli, path[:1] if path[0] == "validate" else path)
        wanted = VALIDATE_MODES.get(path[-1]) if path[0] == "validate" else None
        for flag, integer in _numeric_options(command):
            if wanted is not None and flag not in wanted:
                continue
            for value in INT_EXTREMES:
                if not _must_refuse(value, integer):
                    continue
                argv = [part.replace("{d}", d) for part in base] + [flag, _text(value)]
                cases.append(
                    Case(f"flag:{' '.join(path)}:{flag}={_text(value)}", "flag", argv, fields=(flag,))
                )
    return cases


# ---------------------------------------------------------------------------------------------------------------
# structured files (JSON / TOML)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        yield (*path, 0), value[0]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, value


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    import copy

    out = copy.deepcopy(document)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


_DELETE = object()


def _json(document: Any) -> bytes:
    return (json.dumps(document, indent=1) + "\n").encode()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def _toml(document: dict[str, Any], prefix: str = "") -> bytes:
    lines: list[str] = []
    tables = []
    for key, value in document.items():
        if isinstance(value, dict) and not prefix:
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
    for key, value in tables:
        lines.append(f"\n[{json.dumps(key)}]")
        lines.append(_toml(value, key).decode())
    return ("\n".join(lines) + "\n").encode()


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text())


SHAPE_KEY = re.compile(
    r"(size|num_|n_|experts|heads|head_dim|layers|vocab|window|top|_k$|groups|rank|width|dim|len|bytes|gbps|"
    r"tflops|_us$|_s$|fraction|capacity|count|latency|bandwidth|efficiency|ratio|rate|concurrency|tokens|"
    r"throughput|tpot|ttft|itl|duration|prompts|acceptance)",
)
SKIP_KEY = re.compile(
    r"(eps|theta|initializer|dropout|token_id|aux_loss|coef|scaling|factor|date|version|position)"
)


def _structured_cases(
    kind: str, source: Path, parse: Callable[[Path], Any], dump: Callable[[Any], bytes], suffix: str,
    argv: Callable[[str], list[str]], budget: int, rng: random.Random,
    read: Callable[[Any], frozenset[str]] | None = None,
) -> list[Case]:  # fmt: skip
    """Mutations of `source`'s numeric leaves. `read` gives the keys its reader reads: a value in a key it does
    not read (a vision tower, a training-only setting) cannot reach the model, so it need not be refused —
    `moesim models` lists such keys as ignored."""
    document = parse(source)
    keys_read = read(document) if read else None
    leaves = [
        (path, value)
        for path, value in _leaves(document)
        if SHAPE_KEY.search(str(path[-1] if not isinstance(path[-1], int) else path[-2]))
        and not SKIP_KEY.search(str(path[-1] if not isinstance(path[-1], int) else path[-2]))
    ]
    candidates: list[Case] = []
    for path, original in leaves:
        name = str(path[-1] if not isinstance(path[-1], int) else path[-2])
        for value in (*INT_EXTREMES, "fast", _DELETE):
            tag = "delete" if value is _DELETE else _text(value)
            file = f"{kind}{suffix}"
            candidates.append(
                Case(
                    f"{kind}:{source.name}:{'.'.join(map(str, path))}={tag}",
                    kind,
                    argv(file),
                    files={file: dump(_set(document, path, value))},
                    fields=(name,),
                    must_refuse=value is not _DELETE
                    and _must_refuse(value, isinstance(original, int))
                    and (
                        keys_read is None
                        or ".".join(str(p) for p in path if not isinstance(p, int)) in keys_read
                    ),
                )
            )
    rng.shuffle(candidates)
    return candidates[:budget]


def _nesting_cases(kind: str, argv: Callable[[str], list[str]], suffix: str) -> list[Case]:
    depth = 100_000
    deep_json = ('{"a": ' * depth + "1" + "}" * depth).encode()
    deep_toml = ("a = " + "[" * depth + "1" + "]" * depth + "\n").encode()
    out = []
    for tag, data in (("deep-json", deep_json), ("deep-toml", deep_toml)):
        file = f"{kind}-{tag}{suffix}"
        out.append(Case(f"{kind}:{tag}", kind, argv(file), files={file: data}, fields=(file,)))
    return out


# ---------------------------------------------------------------------------------------------------------------
# CSV files


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().encode()


def _csv_cases(
    kind: str, rows: list[list[str]], argv: Callable[[str], list[str]], budget: int, rng: random.Random,
    comments: str = "", integer_columns: frozenset[str] | None = None,
) -> list[Case]:  # fmt: skip
    """Mutations of the first row's numeric cells, and structural ones. `integer_columns`: the columns the
    reader's schema reads as whole numbers (default: those written without a point)."""
    header, body = rows[0], rows[1:]
    numeric = [
        i for i, column in enumerate(header) if re.fullmatch(r"-?[0-9.e+]+", body[0][i] or "x") is not None
    ]
    candidates: list[Case] = []
    file = f"{kind}.csv"
    for i in numeric:
        for value in (*INT_EXTREMES, "fast"):
            mutated = [list(row) for row in body]
            mutated[0][i] = _text(value)
            candidates.append(
                Case(
                    f"{kind}:{header[i]}={_text(value)}",
                    kind,
                    argv(file),
                    files={file: comments.encode() + _csv([header, *mutated])},
                    fields=(header[i],),
                    must_refuse=_must_refuse(
                        value,
                        header[i] in integer_columns
                        if integer_columns is not None
                        else re.fullmatch(r"-?[0-9]+", body[0][i]) is not None,
                    ),
                )
            )
    rng.shuffle(candidates)
    chosen = candidates[:budget]
    duplicate = [*header, header[numeric[0]]]
    ragged_long = [[*list(body[0]), "1"]]
    ragged_short = [list(body[0])[:-2]]
    for tag, data in (
        ("duplicate-header", _csv([duplicate, *[[*row, row[numeric[0]]] for row in body]])),
        ("ragged-long-row", _csv([header, *ragged_long])),
        ("ragged-short-row", _csv([header, *ragged_short])),
    ):
        fields = (header[numeric[0]],) if tag == "duplicate-header" else ("row", file)
        chosen.append(
            Case(f"{kind}:{tag}", kind, argv(file), files={file: comments.encode() + data}, fields=fields)
        )
    return chosen


def _read_csv(path: Path) -> tuple[list[list[str]], str]:
    lines = path.read_text().splitlines(keepends=True)
    comments = "".join(line for line in lines if line.startswith("#"))
    rows = list(csv.reader(line for line in lines if not line.startswith("#")))
    return rows, comments


# ---------------------------------------------------------------------------------------------------------------
# traces and statistics (generated: no example file ships)


def _npz(**arrays: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _trace_arrays(tokens: int = 32, layers: int = 2, k: int = 4, n: int = 16) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    experts = np.stack(
        [np.stack([rng.choice(n, k, replace=False) for _ in range(layers)]) for _ in range(tokens)]
    )
    return {
        "experts": experts.astype(np.int64),
        "sequence_ids": np.repeat(np.arange(tokens // 8), 8).astype(np.int64),
        "n_experts": np.int64(n),
    }


def stats_document(n: int = 64, k: int = 8) -> dict[str, Any]:
    weights = [1.0 / (i + 1) for i in range(n)]
    total = sum(weights)
    return {
        "format": "moesim-routing-stats",
        "version": 1,
        "source": "generated by tests/corpus_generated.py",
        "n_experts": n,
        "top_k": k,
        "n_groups": 1,
        "topk_groups": 1,
        "seed": 0,
        "default_layer": 0,
        "layers": [
            {"layer": 0, "params": {"sigma": 3.0, "sequence_share": 0.35, "token_corr": 0.55,
                                    "popularity": [w / total for w in weights]}},
        ],
    }  # fmt: skip


def _trace_cases(rng: random.Random, budget: int) -> list[Case]:
    import numpy as np

    base = _trace_arrays()
    candidates: list[Case] = []
    mutations: list[tuple[str, dict[str, Any], tuple[str, ...]]] = []
    for value in (-1, 2**62, 10**12, 0):
        mutations.append(
            (f"n_experts={value}", {**base, "n_experts": np.int64(value)}, ("n_experts", "expert"))
        )
    for value in (-1, 2**40, 16):
        experts = base["experts"].copy()
        experts[3, 1, 0] = value
        mutations.append((f"expert-id={value}", {**base, "experts": experts}, ("expert", "experts")))
    floats = base["experts"].astype(np.float64)
    floats[0, 0, 0] = np.nan
    mutations.append(("experts-float-nan", {**base, "experts": floats}, ("experts",)))
    mutations.append(("experts-1d", {**base, "experts": base["experts"].reshape(-1)}, ("experts",)))
    mutations.append(("experts-empty", {**base, "experts": base["experts"][:0], "sequence_ids": base["sequence_ids"][:0]}, ("empty", "tokens", "experts")))  # fmt: skip
    mutations.append(("sequence-ids-short", {**base, "sequence_ids": base["sequence_ids"][:-1]}, ("sequence_ids",)))  # fmt: skip
    mutations.append(("sequence-ids-negative", {**base, "sequence_ids": -base["sequence_ids"] - 1}, ("sequence",)))  # fmt: skip
    mutations.append(("layer-indices-huge", {**base, "layer_indices": np.array([0, 2**62])}, ("layer_indices", "layer")))  # fmt: skip
    mutations.append(("layer-indices-negative", {**base, "layer_indices": np.array([-1, 0])}, ("layer_indices", "layer")))  # fmt: skip
    for tag, arrays, fields in mutations:
        for command in (["routing", "fit", "{f}", "-o", "{d}/out.json"], ["routing", "inspect", "{f}"]):
            candidates.append(
                Case(f"trace:{command[1]}:{tag}", "trace", command, files={"trace.npz": _npz(**arrays)},
                     fields=fields, must_refuse=not tag.endswith("=0") or True)
            )  # fmt: skip
    # JSON-lines traces
    lines = [
        {"sequence": int(s), "experts": e.tolist()}
        for s, e in zip(base["sequence_ids"], base["experts"], strict=True)
    ]
    for tag, mutate, fields in (
        (
            "jsonl-expert-huge",
            lambda r: {**r, "experts": [[2**63, *r["experts"][0][1:]], *r["experts"][1:]]},
            ("expert",),
        ),
        (
            "jsonl-expert-nan",
            lambda r: {**r, "experts": [[math.nan, *r["experts"][0][1:]], *r["experts"][1:]]},
            ("expert",),
        ),
        ("jsonl-sequence-inf", lambda r: {**r, "sequence": math.inf}, ("sequence",)),
        ("jsonl-sequence-negative", lambda r: {**r, "sequence": -5}, ("sequence",)),
        (
            "jsonl-experts-deep",
            lambda r: {**r, "experts": json.loads("[" * 50000 + "]" * 50000)},
            ("experts", "deep", "nest"),
        ),
    ):
        if tag == "jsonl-experts-deep":
            body = json.dumps(lines[0])[:-1].rsplit('"experts":', 1)[0] + '"experts": ' + "[" * 50000 + "]" * 50000 + "}\n"  # fmt: skip
            data = (body + "\n".join(json.dumps(x) for x in lines[1:]) + "\n").encode()
        else:
            data = (
                "\n".join(json.dumps(mutate(x) if i == 2 else x) for i, x in enumerate(lines)) + "\n"
            ).encode()
        candidates.append(
            Case(f"trace:fit:{tag}", "trace", ["routing", "fit", "{f}", "-o", "{d}/out.json", "--experts", "16"],
                 files={"trace.jsonl": data}, fields=fields)
        )  # fmt: skip
    rng.shuffle(candidates)
    return candidates[:budget]


# ---------------------------------------------------------------------------------------------------------------
# bounds before work: each command's worst case, refused with the estimate, the limit and the flag that raises it

BOUND_CPU_LIMIT_S = 1.0
BOUND_PEAK_LIMIT_MB = 200.0


def bound_cases(d: str) -> list[Case]:
    huge = json.loads((ROOT / "tests/data/hf_configs/mixtral-8x7b.json").read_text()) | {
        "num_local_experts": 10**12
    }
    deep = json.loads((ROOT / "tests/data/hf_configs/deepseek-v3.json").read_text()) | {
        "num_hidden_layers": 10**9
    }
    nested = json.loads((ROOT / "tests/data/hf_configs/llama-4-scout-17b-16e.json").read_text())
    nested["text_config"]["num_local_experts"] = 10**6
    table = [
        ("simulate-experts", ["simulate", "--model", "olmoe-1b-7b", "--experts", "1000000"], {}, ("--max-memory-gb",)),
        ("simulate-draft-len", ["simulate", "--model", "olmoe-1b-7b", "--draft-len", "100000"], {}, ("--draft-len",)),
        ("simulate-draft-len-memory", ["simulate", "--model", "olmoe-1b-7b", "--draft-len", "1024", "--experts", "100000"], {}, ("--max-memory-gb",)),
        ("sweep-draft-len", ["sweep", "--draft-len", "100000"], {}, ("--draft-len",)),
        ("sweep-batch", ["sweep", "--model", "olmoe-1b-7b", "--batch", "1-100000"], {}, ("--max-configs",)),
        ("serve-num-prompts", ["serve", "--model", "olmoe-1b-7b", "--num-prompts", "10000000"], {}, ("--max-minutes",)),
        ("screen-1e8-designs", ["screen", "--model", "olmoe-1b-7b", "--experts", "1..10000:1", "--top-k", "1..10000:1"], {}, ("--sample",)),
        ("config-1e12-experts", ["simulate", "--model-config", f"{d}/huge.json"], {"huge.json": _json(huge)}, ("num_local_experts",)),
        ("config-1e9-layers", ["simulate", "--model-config", f"{d}/deep.json"], {"deep.json": _json(deep)}, ("num_hidden_layers",)),
        ("config-text-config-1e6-experts", ["simulate", "--model-config", f"{d}/nested.json"], {"nested.json": _json(nested)}, ("--max-memory-gb",)),
        ("routing-generate", ["routing", "generate", "--stats", f"{d}/base_stats.json", "--sequences", "100000", "--tokens", "100000", "-o", f"{d}/out.npz"], {}, ("--max-memory-gb", "--sequences", "--tokens")),
        ("routing-predict", ["routing", "predict", "--experts", "128", "--top-k", "8", "--batch", "1000000", "--tokens", "1000"], {}, ("--max-memory-gb",)),
        ("validate-context-len", ["validate", "--device", "cpu", "--profile", "docs/validation/cpu/cpu.toml", "--context-len", "100000000"], {}, ("--max-memory-gb", "--context-len")),
    ]  # fmt: skip
    return [
        Case(f"bound:{name}", "bound", argv, files, fields, True, BOUND_CPU_LIMIT_S, BOUND_PEAK_LIMIT_MB)
        for name, argv, files, fields in table
    ]


# ---------------------------------------------------------------------------------------------------------------
# the corpus


def corpus(d: str, budget_per_file: int = 14) -> list[Case]:
    """Every case, argv and files referring to the directory `d` the runner writes the files into."""
    from moesim.simulator.models.hf import config_keys_read

    rng = random.Random(SEED)
    cases = bound_cases(d) + flag_cases(d)
    configs = ROOT / "tests" / "data" / "hf_configs"
    for name in ("mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b", "deepseek-v3", "llama-4-scout-17b-16e",
                 "qwen3-next-80b-a3b", "gpt-oss-20b"):  # fmt: skip
        cases += _structured_cases(
            "config", configs / f"{name}.json", lambda p: json.loads(p.read_text()), _json, ".json",
            lambda f: ["simulate", "--model-config", f], budget_per_file, rng, config_keys_read,
        )  # fmt: skip
    cases += _nesting_cases("config", lambda f: ["simulate", "--model-config", f], ".json")
    catalogue = ROOT / "moesim" / "model_catalogue"
    for name in ("olmoe-1b-7b", "deepseek-v3", "qwen3-30b-a3b"):
        cases += _structured_cases(
            "catalogue", catalogue / f"{name}.toml", _read_toml, _toml, ".toml",
            lambda f: ["simulate", "--model-config", f], budget_per_file, rng,
        )  # fmt: skip
    profiles = ROOT / "moesim" / "hardware_profiles"
    for source in (profiles / "h200.toml", ROOT / "docs" / "validation" / "cpu" / "cpu.toml"):
        cases += _structured_cases(
            "profile", source, _read_toml, _toml, ".toml",
            lambda f: ["simulate", "--model", "olmoe-1b-7b", "--hardware", f, "--launch", "eager"], 2 * budget_per_file, rng,
        )  # fmt: skip
    cases += _nesting_cases(
        "profile", lambda f: ["simulate", "--model", "olmoe-1b-7b", "--hardware", f], ".toml"
    )
    for name in ("vllm", "sglang"):
        cases += _structured_cases(
            "engine", profiles / "engines" / f"{name}.toml", _read_toml, _toml, ".toml",
            lambda f: ["simulate", "--model", "olmoe-1b-7b", "--serving-engine", f], budget_per_file, rng,
        )  # fmt: skip
    rows, comments = _read_csv(ROOT / "moesim" / "data" / "measured_runs.csv")
    from moesim.validation.runs.schema import SCHEMA

    whole = frozenset(column.name for column in SCHEMA if column.kind in ("int", "ints"))
    cases += _csv_cases(
        "runs", rows[:2], lambda f: ["validate", "--runs", f], 2 * budget_per_file, rng, comments, whole
    )
    rows, comments = _read_csv(ROOT / "moesim" / "data" / "validation_example.csv")
    cases += _csv_cases(
        "measured", rows[:2], lambda f: ["validate", "--measured", f, "--profile", "docs/validation/cpu/cpu.toml"],
        budget_per_file, rng, comments,
    )  # fmt: skip
    design_rows = [["experts", "top-k", "expert-width"], ["32", "4", "512"], ["64", "8", "1024"]]
    cases += _csv_cases(
        "designs", design_rows,
        lambda f: ["screen", "--model", "olmoe-1b-7b", "--designs", f, "--batch", "1", "--draft-len", "1", "--workers", "1"],
        budget_per_file, rng,
    )  # fmt: skip
    data = ROOT / "moesim" / "data"
    baseline = "moesim/data/vllm_bench_example_baseline.json"
    cases += _structured_cases(
        "bench", data / "vllm_bench_example_sd.json", lambda p: json.loads(p.read_text()), _json, ".json",
        lambda f: ["validate", "--bench-result", f, "--baseline", baseline, "--model", "qwen3-30b-a3b", "--profile", "h200"],
        2 * budget_per_file, rng,
    )  # fmt: skip
    cases += _structured_cases(
        "bench", data / "vllm_bench_example_baseline.json", lambda p: json.loads(p.read_text()), _json, ".json",
        lambda f: ["validate", "--bench-result", "moesim/data/vllm_bench_example_sd.json", "--baseline", f,
                   "--model", "qwen3-30b-a3b", "--profile", "h200"],
        budget_per_file, rng,
    )  # fmt: skip
    cases += _structured_cases(
        "stats", Path("<stats>"), lambda p: stats_document(), _json, ".json",
        lambda f: ["simulate", "--model", "olmoe-1b-7b", "--routing", f], budget_per_file, rng,
    )  # fmt: skip
    cases += _structured_cases(
        "stats", Path("<stats>"), lambda p: stats_document(), _json, ".json",
        lambda f: ["routing", "generate", "--stats", f, "--sequences", "2", "--tokens", "4", "-o", "{d}/out.npz"],
        budget_per_file // 2, rng,
    )  # fmt: skip
    cases += _trace_cases(rng, 2 * budget_per_file)
    seen: Counter[str] = Counter()
    for case in cases:  # the same mutation read by two commands: told apart by the command
        seen[case.id] += 1
        if seen[case.id] > 1:
            case.id = f"{case.id}@{' '.join(case.argv[:2])}"
    # file names in argv point into d, one name per case (cases may run side by side)
    for number, case in enumerate(cases):
        names = {name: f"{number}-{name}" for name in case.files}
        first = f"{d}/{next(iter(names.values()))}" if names else ""
        argv = []
        for part in case.argv:
            for name, unique in names.items():
                if part in (name, f"{d}/{name}"):
                    part = f"{d}/{unique}"
            argv.append(part.replace("{f}", first).replace("{d}", d))
        case.argv = argv
        case.files = {names[name]: data for name, data in case.files.items()}
    return cases


def _setup_files(d: str) -> None:
    """The files the flag cases' base invocations read."""
    import numpy as np

    root = Path(d)
    (root / "base_config.json").write_bytes((ROOT / "tests/data/hf_configs/olmoe-1b-7b.json").read_bytes())
    rows, comments = _read_csv(ROOT / "moesim" / "data" / "measured_runs.csv")
    (root / "base_runs.csv").write_bytes(comments.encode() + _csv(rows[:2]))
    (root / "base_stats.json").write_bytes(_json(stats_document()))
    buffer = io.BytesIO()
    np.savez(buffer, **_trace_arrays())
    (root / "base_trace.npz").write_bytes(buffer.getvalue())
    (root / "prompts.txt").write_text("hello world\n")


# ---------------------------------------------------------------------------------------------------------------
# the runner: one fresh interpreter, a forked child per case


@dataclass
class Result:
    id: str
    kind: str
    must_refuse: bool
    exit_code: int | None
    traceback: bool
    field_named: bool
    cpu_s: float
    wall_s: float
    peak_mb: float
    killed: str
    output: str
    cpu_limit_s: float = CPU_LIMIT_S
    peak_limit_mb: float = PEAK_LIMIT_MB

    def failures(self) -> list[str]:
        problems = []
        if self.traceback:
            problems.append("traceback")
        if self.killed:
            problems.append(f"killed ({self.killed})")
        if self.cpu_s > self.cpu_limit_s:
            problems.append(f"{self.cpu_s:.2f} s CPU")
        if self.peak_mb > self.peak_limit_mb:
            problems.append(f"{self.peak_mb:.0f} MB peak")
        if self.must_refuse and not self.traceback and not self.killed:
            if self.exit_code == 0:
                problems.append("accepted")
            elif not self.field_named:
                problems.append("field not named")
        return problems


def _child(case: Case, write_fd: int) -> None:
    from click.testing import CliRunner

    from moesim.cli import cli

    with contextlib.suppress(OSError):  # the peak of this child alone, from here on
        Path("/proc/self/clear_refs").write_text("5")
    result = CliRunner().invoke(cli, case.argv, catch_exceptions=True)
    output = result.output or ""
    traceback = result.exception is not None and not isinstance(result.exception, SystemExit)
    if traceback:
        output += f"\n{type(result.exception).__name__}: {result.exception}"
    traceback = traceback or "Traceback (most recent call last)" in output
    peak_kb = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak_kb = int(line.split()[1])
    lowered = output.lower()
    named = any(
        f.lower() in lowered or f.lower().lstrip("-").replace("-", "_") in lowered.replace("-", "_")
        for f in case.fields
    )
    payload = {"exit_code": result.exit_code, "traceback": traceback, "field_named": named,
               "peak_kb": peak_kb, "output": output[-600:]}  # fmt: skip
    os.write(write_fd, json.dumps(payload).encode())
    os.close(write_fd)
    os._exit(0)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class _Running:
    case: Case
    pid: int
    fd: int
    start: float
    chunks: list[bytes] = field(default_factory=list)


def _start(case: Case, d: str) -> _Running:
    for name, data in case.files.items():
        Path(d, name).write_bytes(data)
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        try:
            _child(case, write_fd)
        finally:
            os._exit(3)
    os.close(write_fd)
    return _Running(case, pid, read_fd, start)


def _drain(job: _Running, wait_s: float) -> None:
    while True:
        ready, _, _ = select.select([job.fd], [], [], wait_s)
        if not ready:
            return
        chunk = os.read(job.fd, 1 << 16)
        if not chunk:
            return
        job.chunks.append(chunk)
        wait_s = 0.0


def _finish(job: _Running, d: str, usage: Any, killed: str) -> Result:
    _drain(job, 0.0)
    os.close(job.fd)
    wall = time.perf_counter() - job.start
    for name in job.case.files:
        Path(d, name).unlink(missing_ok=True)
    cpu = (usage.ru_utime + usage.ru_stime) if usage else wall
    try:
        payload = json.loads(b"".join(job.chunks) or b"{}")
    except json.JSONDecodeError:
        payload = {}
    peak_mb = max(payload.get("peak_kb", 0), (usage.ru_maxrss if usage else 0) if killed else 0) / 1024
    if killed == "memory":
        peak_mb = max(peak_mb, KILL_RSS_MB)
    case = job.case
    return Result(
        case.id, case.kind, case.must_refuse, payload.get("exit_code"), bool(payload.get("traceback")),
        bool(payload.get("field_named")), cpu, wall, peak_mb, killed, payload.get("output", ""),
        case.cpu_limit_s, case.peak_limit_mb,
    )  # fmt: skip


def run_cases(
    cases: list[Case], d: str, jobs: int = 1, progress: Callable[[Result], None] | None = None
) -> list[Result]:
    """Each case in a forked child, `jobs` at a time; results in the order of `cases`."""
    pending = list(enumerate(cases))
    running: dict[int, tuple[int, _Running]] = {}
    results: dict[int, Result] = {}
    while pending or running:
        while pending and len(running) < jobs:
            index, case = pending.pop(0)
            job = _start(case, d)
            running[job.pid] = (index, job)
        for pid, (index, job) in list(running.items()):
            _drain(job, 0.02)
            done, _status, usage = os.wait4(pid, os.WNOHANG)
            killed = ""
            if not done:
                if time.perf_counter() - job.start > KILL_WALL_S:
                    killed = "time"
                elif _rss_mb(pid) > KILL_RSS_MB:
                    killed = "memory"
                if not killed:
                    continue
                os.kill(pid, signal.SIGKILL)
                _, _, usage = os.wait4(pid, 0)
            del running[pid]
            results[index] = _finish(job, d, usage, killed)
            if progress:
                progress(results[index])
    return [results[i] for i in range(len(cases))]


def run_corpus(
    cases_filter: Callable[[Case], bool] | None = None,
    jobs: int = 1,
    progress: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run the corpus in this process (which must be a fresh interpreter: the children share its memory)."""
    # The library's modules are loaded once here, so each child measures its own work, not the imports
    # (scikit-learn, which `routing fit` loads, takes about 2 s of CPU to import on two cores).
    import moesim.cli
    import moesim.simulator.routing.estimator
    import moesim.simulator.simulate  # noqa: F401

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with tempfile.TemporaryDirectory(prefix="moesim-corpus-") as d:
        _setup_files(d)
        os.chdir(ROOT)
        cases = [case for case in corpus(d) if cases_filter is None or cases_filter(case)]
        return run_cases(cases, d, jobs, progress)


def summary(results: list[Result]) -> dict[str, Any]:
    by_kind: dict[str, int] = {}
    for r in results:
        by_kind[r.kind] = by_kind.get(r.kind, 0) + 1
    slowest = max(results, key=lambda r: r.cpu_s)
    largest = max(results, key=lambda r: r.peak_mb)
    return {
        "cases": len(results),
        "classes": by_kind,
        "tracebacks": sum(r.traceback for r in results),
        "over_2s": sum(r.cpu_s > CPU_LIMIT_S or r.killed == "time" for r in results),
        "over_300mb": sum(r.peak_mb > PEAK_LIMIT_MB for r in results),
        "accepted_must_refuse": sum(r.must_refuse and r.exit_code == 0 and not r.killed for r in results),
        "field_not_named": sum(
            r.must_refuse and r.exit_code not in (0, None) and not r.field_named and not r.traceback
            for r in results
        ),
        "failing": sum(bool(r.failures()) for r in results),
        "slowest": {"id": slowest.id, "cpu_s": round(slowest.cpu_s, 3)},
        "largest": {"id": largest.id, "peak_mb": round(largest.peak_mb, 1)},
        "total_cpu_s": round(sum(r.cpu_s for r in results), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--only", help="regular expression on case ids")
    parser.add_argument("--ids", help="a file of case ids, one a line: run only these")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--jobs", type=int, default=2, help="cases run side by side (default 2)")
    args = parser.parse_args()
    pattern = re.compile(args.only) if args.only else None
    wanted = set(Path(args.ids).read_text().split("\n")) if args.ids else None
    if args.list:
        with tempfile.TemporaryDirectory() as d:
            for case in corpus(d):
                print(case.id, case.must_refuse)
        return

    def show(result: Result) -> None:
        print(f"{result.cpu_s:6.2f} s {result.peak_mb:6.0f} MB {result.id}", file=sys.stderr, flush=True)

    def chosen(case: Case) -> bool:
        return (pattern is None or bool(pattern.search(case.id))) and (wanted is None or case.id in wanted)

    results = run_corpus(chosen, args.jobs, show)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary(results), "results": [asdict(r) for r in results]}, indent=1)
        )
    print(json.dumps(summary(results), indent=1))
    for r in results:
        if r.failures():
            print(f"FAIL {r.id}: {', '.join(r.failures())} :: {r.output.strip().splitlines()[-1:] or ''}")


if __name__ == "__main__":
    sys.exit(main())
