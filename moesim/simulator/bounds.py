"""The size of a run, estimated before it starts, and the documented limits it must stay under; and the one
place numbers are checked where they enter (seeds, counts, finite floats), whatever reader they come from.

A run that would take the machine's memory or hours is refused with the estimate, the limit and the flag that
raises it, instead of being killed by the kernel or printing nothing for minutes. Every check here is
arithmetic on the requested sizes: it runs before the first array is allocated.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from moesim.errors import MoesimError

DEFAULT_MAX_MEMORY_GB = 4.0
"""Memory a run may plan to use (GB): a quarter of a 16 GB laptop; `--max-memory-gb`."""

GPU_MAX_MEMORY_GB = 64.0
"""The default limit of torch tensors on a GPU (`validate reference --device cuda`): under an 80 GB device's memory after
the CUDA context and torch's caching allocator (the full-width validation grid needs 6–19 GB)."""

SWEEP_SECONDS_PER_CONFIG = 0.0055
"""Fast-path time of one sweep configuration on two cores: `moesim sweep --model all --hardware h200` ran its
1,440 configurations in 7.9 CPU s (main 73999f4, quiet machine, `benchmarks/targets.py`)."""

DEFAULT_MAX_CONFIGS = 20_000
"""Configurations (model × batch × draft length) one sweep may run: about 2.5 minutes on two cores;
`--max-configs`."""

DEFAULT_MAX_MINUTES = 10.0
"""Wall time a serving simulation or a screen may be estimated to take before it is refused (minutes, on two
cores); `--max-minutes`."""

SERVE_SECONDS_PER_STEP = 10e-6
SERVE_SECONDS_PER_TOKEN = 3e-6
"""The serving loop's cost on two cores: 10 µs per scheduler step and 3 µs per generated token, an upper fit of
`moesim serve` CPU time less its start-up (the same command with one prompt), both runs (SD and no SD), on main
3f5e1c6 + the startup branch (2026-12-02, 2-core VM under load): olmoe-1b-7b 128/128 — 200 requests at
concurrency 1: 0.56 s (estimate 0.64 s), 1000 at 64: 0.8–1.5 s (0.81 s); qwen3-30b-a3b 1000/1000 — 100 at 1:
1.65 s (2.5 s), 1000 at 64: 3.7 s (5.3 s), 2000 at 256: 8.3 s (10.2 s). The estimate counts the steps of the run
without SD for both runs (SD takes fewer), so it stays above the loop but within 2×."""

SCREEN_SECONDS_PER_POINT = 0.0035
"""Fast-path time of one (design, batch, draft length) point of a screen on two cores (55 ms per design of
4 batches × 4 draft lengths)."""

SEED_LIMIT = 2**32
"""Seeds are integers in [0, 2³²): what numpy's and torch's generators take on every platform."""

MAX_COUNT = 2**31 - 1
"""The largest count (layers, widths, experts, tokens, requests) any reader passes on: every array is sized in
int32-addressable steps; a model or a run beyond it is refused before any arithmetic overflows."""

MAX_LAYOUT_GPUS = 1 << 16
"""GPUs one layout may span (65,536: beyond the largest scale-up and scale-out domains built)."""

MAX_MEMORY_GB_LIMIT = 1e6
"""The highest `--max-memory-gb` taken (a petabyte): a limit above any machine's memory turns the bound off."""

MAX_LAYERS = 1 << 16
"""Layers one model may have (65,536; the deepest released MoE has 94): the per-layer kinds are tuples, so a
count past this would be built layer by layer before any other check."""

MAX_DRAFT_LEN = 1024
"""Draft tokens K one verification step may hold (1,024). Engines verify a few to tens of tokens a round (vLLM's
`num_speculative_tokens`, SGLang's `speculative_num_draft_tokens`: trees of up to about 64); routing sampling grows
with K + 1 tokens per sequence: dbrx at batch 1 took 1.9 s at K = 1,000, 11 s (0.6 GB) at 10,000 and 125 s
(4.3 GB, above the 4 GB `--max-memory-gb` its estimate passed) at 100,000 (h-edges, 2026-12-02, 2 cores under
load)."""

MAX_RUN_ROWS = 2_000
"""Rows one measured-runs CSV may hold (2,000): the bundled file has 32, priced in about 2 s (60 ms a row on two
cores), so 2,000 rows take about 2 minutes; counted from the text before a row is parsed (a 461 MB file of a
million rows took 15 s and 4.6 GB to be refused on its third line)."""

WORKERS_PER_CPU = 4
"""Most worker processes per CPU of this machine (`os.cpu_count()`) a pool may start: more only wait for a core,
and each is an interpreter of about 100 MB (`screen --workers 100000` forked until the machine stalled)."""

MAX_EXPERTS = 1 << 20
"""Routed experts per layer the routing models can describe (1,048,576; the largest released model has 384)."""


def _field(field: str, where: str | None) -> str:
    return f"{where}: {field}" if where else field


def check_seed(seed: Any, field: str = "seed", where: str | None = None) -> int:
    """`seed` as an int in [0, 2³²), or a refusal naming `field` (and the file `where` it came from)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < SEED_LIMIT:
        raise MoesimError(
            _field(field, where),
            f"must be an integer in [0, 2**32), got {seed!r}",
            "give a non-negative seed such as 0 or 1234",
        )
    return int(seed)


def check_count(
    value: Any,
    field: str,
    where: str | None = None,
    *,
    low: int = 1,
    high: int = MAX_COUNT,
    fix: str = "",
) -> int:
    """`value` as an int in [low, high] (a float that is a whole number counts: JSON writes 8.0), or a refusal
    naming the field and the file."""
    number = value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise MoesimError(_field(field, where), f"must be a whole number, got {value!r}", fix)
    if int(number) < low:
        raise MoesimError(_field(field, where), f"must be ≥ {low:,}, got {int(number):,}", fix)
    if int(number) > high:
        shown = f"{int(number):,}" if int(number) < 10**18 else f"{float(number):.3g}"
        raise MoesimError(_field(field, where), f"must be ≤ {high:,}, got {shown}", fix)
    return int(number)


def check_finite(
    value: Any,
    field: str,
    where: str | None = None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    fix: str = "",
) -> float:
    """`value` as a finite float within the bounds given (`low_open`: strictly above `low`), or a refusal."""
    try:
        number = math.nan if isinstance(value, bool | str) else float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        raise MoesimError(_field(field, where), f"must be a finite number, got {value!r}", fix)
    if low is not None and (number <= low if low_open else number < low):
        raise MoesimError(
            _field(field, where), f"must be {'>' if low_open else '≥'} {low:g}, got {number:g}", fix
        )
    if high is not None and number > high:
        raise MoesimError(_field(field, where), f"must be ≤ {high:g}, got {number:g}", fix)
    return number


def check_max_memory_gb(max_memory_gb: Any) -> float:
    return check_finite(
        max_memory_gb,
        "max_memory_gb",
        low=0.0,
        low_open=True,
        high=MAX_MEMORY_GB_LIMIT,
        fix="give --max-memory-gb in GB",
    )


def check_bytes(need_bytes: float, max_memory_gb: float, what: str, fix: str) -> None:
    """Refuse work whose estimated peak memory `need_bytes` is above `max_memory_gb`."""
    limit = check_max_memory_gb(max_memory_gb)
    need_gb = need_bytes / 1e9
    if need_gb > limit:
        raise MoesimError(
            "max_memory_gb",
            f"{what} needs about {need_gb:,.1f} GB, above the limit of {limit:g} GB",
            f"{fix}, or raise --max-memory-gb",
        )


def check_max_minutes(max_minutes: Any) -> float:
    return check_finite(
        max_minutes, "max_minutes", low=0.0, low_open=True, high=1e6, fix="give --max-minutes in minutes"
    )


def check_minutes(estimate_s: float, max_minutes: float, what: str, fix: str) -> None:
    """Refuse work estimated at `estimate_s` seconds when that is above `max_minutes`."""
    limit = check_max_minutes(max_minutes)
    if estimate_s > 60.0 * limit:
        raise MoesimError(
            "max_minutes",
            f"{what} is estimated at about {estimate_s / 60:,.0f} minutes on two cores, above the limit of "
            f"{limit:g} minutes",
            f"{fix}, or raise --max-minutes",
        )


def serving_seconds(generated_tokens: float, concurrency: float, runs: int) -> float:
    """Estimated time of `runs` serving simulations that each generate `generated_tokens` tokens with up to
    `concurrency` requests in flight (SD shortens the steps; ignored, so this is an upper estimate)."""
    steps = generated_tokens / max(1.0, concurrency)
    return runs * (steps * SERVE_SECONDS_PER_STEP + generated_tokens * SERVE_SECONDS_PER_TOKEN)


def check_serving(
    n_requests: int, output_len: float, concurrencies: Any, runs: int, max_minutes: float
) -> None:
    """Refuse a serving simulation of `n_requests` × `output_len` generated tokens (each of `runs` runs; a run
    per concurrency limit in `concurrencies`, None: unbounded) estimated above `max_minutes`."""
    slowest = min(n_requests if c is None else min(c, n_requests) for c in concurrencies)
    estimate = serving_seconds(n_requests * output_len, slowest, 1) * runs
    check_minutes(
        estimate,
        max_minutes,
        f"serving {n_requests:,} requests × {output_len:,.0f} output tokens ({runs} runs)",
        "send fewer --num-prompts or shorter outputs",
    )


def check_screen(n_designs: int, points_per_design: int, max_minutes: float) -> None:
    """Refuse a screen of `n_designs` × `points_per_design` fast-path points estimated above `max_minutes`."""
    check_minutes(
        n_designs * points_per_design * SCREEN_SECONDS_PER_POINT,
        max_minutes,
        f"screening {n_designs:,} designs × {points_per_design} points (batches × draft lengths)",
        "sample fewer designs (--sample N) or screen fewer batches and draft lengths",
    )


def sampling_bytes(routing: Any, tokens_per_seq: int) -> int:
    """Estimated peak memory a routing model needs for steps of `tokens_per_seq` tokens per sequence (0 for
    models in closed form)."""
    estimate = getattr(routing, "sampling_bytes", None)
    return int(estimate(tokens_per_seq)) if callable(estimate) else 0


def check_memory(routing: Any, tokens_per_seq: int, max_memory_gb: float, what: str) -> None:
    """Refuse a run whose routing sampling would need more than `max_memory_gb`."""
    need = sampling_bytes(routing, tokens_per_seq)
    check_routing_bytes(need, getattr(routing, "n_experts", 0), tokens_per_seq, max_memory_gb, what)


def check_routing_bytes(
    need_bytes: float, n_experts: int, tokens_per_seq: int, max_memory_gb: float, what: str
) -> None:
    """Refuse a run whose routing sampling, estimated at `need_bytes` before any routing model is built, is above
    `max_memory_gb`."""
    check_bytes(
        need_bytes,
        max_memory_gb,
        f"{what} (sampling routing for {tokens_per_seq:,} tokens per sequence over {n_experts:,} experts)",
        "use a shorter --draft-len or fewer --experts",
    )


def check_rows(text: str, limit: int, field: str, where: str, kind: str) -> None:
    """Refuse CSV `text` of more than `limit` lines after its header, counted before any row is parsed."""
    lines = text.count("\n") + (0 if text.endswith("\n") else 1) - 1
    if lines > limit:
        raise MoesimError(
            field,
            f"{where} has {lines:,} rows, above the {limit:,} a {kind} may hold",
            f"split it into files of at most {limit:,} rows",
        )


def check_workers(workers: Any, field: str = "--workers") -> int:
    """`workers` as a process count in [1, WORKERS_PER_CPU × the CPUs], or a refusal naming `field`."""
    import os

    cpus = os.cpu_count() or 1
    return check_count(
        workers,
        field,
        high=WORKERS_PER_CPU * cpus,
        fix=f"give 1 to {WORKERS_PER_CPU * cpus}: {WORKERS_PER_CPU} per CPU ({cpus} here); 1 runs in this process",
    )


def check_configs(n_configs: int, max_configs: int) -> None:
    """Refuse a sweep of more configurations than `max_configs`."""
    check_count(max_configs, "max_configs", fix="give --max-configs as a positive integer")
    if n_configs > max_configs:
        raise MoesimError(
            "max_configs",
            f"the sweep has {n_configs:,} configurations (models × batches × draft lengths), "
            f"above the limit of {max_configs:,} (about {n_configs * SWEEP_SECONDS_PER_CONFIG / 60:,.0f} minutes on two cores)",
            "sweep fewer values (e.g. powers of two for --batch), or raise --max-configs",
        )


__all__ = [
    "DEFAULT_MAX_CONFIGS",
    "DEFAULT_MAX_MEMORY_GB",
    "DEFAULT_MAX_MINUTES",
    "GPU_MAX_MEMORY_GB",
    "MAX_COUNT",
    "MAX_DRAFT_LEN",
    "MAX_EXPERTS",
    "MAX_LAYERS",
    "MAX_LAYOUT_GPUS",
    "MAX_MEMORY_GB_LIMIT",
    "MAX_RUN_ROWS",
    "SEED_LIMIT",
    "WORKERS_PER_CPU",
    "check_bytes",
    "check_configs",
    "check_count",
    "check_finite",
    "check_max_memory_gb",
    "check_max_minutes",
    "check_memory",
    "check_minutes",
    "check_routing_bytes",
    "check_rows",
    "check_screen",
    "check_seed",
    "check_serving",
    "check_workers",
    "sampling_bytes",
]
