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

SWEEP_SECONDS_PER_CONFIG = 0.0076
"""Fast-path time of one sweep configuration on two cores: `moesim sweep --model all` ran 1440 in 11 s."""

DEFAULT_MAX_CONFIGS = 20_000
"""Configurations (model × batch × draft length) one sweep may run: about 2.5 minutes on two cores;
`--max-configs`."""

SEED_LIMIT = 2**32
"""Seeds are integers in [0, 2³²): what numpy's and torch's generators take on every platform."""

MAX_COUNT = 2**31 - 1
"""The largest count (layers, widths, experts, tokens, requests) any reader passes on: every array is sized in
int32-addressable steps; a model or a run beyond it is refused before any arithmetic overflows."""

MAX_LAYOUT_GPUS = 1 << 16
"""GPUs one layout may span (65,536: beyond the largest scale-up and scale-out domains built)."""

MAX_MEMORY_GB_LIMIT = 1e6
"""The highest `--max-memory-gb` taken (a petabyte): a limit above any machine's memory turns the bound off."""

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
        raise MoesimError(_field(field, where), f"must be ≤ {high:,}, got {int(number):,}", fix)
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
        max_memory_gb, "max_memory_gb", low=0.0, low_open=True, fix="give --max-memory-gb in GB"
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


def sampling_bytes(routing: Any, tokens_per_seq: int) -> int:
    """Estimated peak memory a routing model needs for steps of `tokens_per_seq` tokens per sequence (0 for
    models in closed form)."""
    estimate = getattr(routing, "sampling_bytes", None)
    return int(estimate(tokens_per_seq)) if callable(estimate) else 0


def check_memory(routing: Any, tokens_per_seq: int, max_memory_gb: float, what: str) -> None:
    """Refuse a run whose routing sampling would need more than `max_memory_gb`."""
    check_routing_bytes(
        sampling_bytes(routing, tokens_per_seq), routing.n_experts, tokens_per_seq, max_memory_gb, what
    )


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
    "MAX_COUNT",
    "MAX_EXPERTS",
    "MAX_LAYOUT_GPUS",
    "MAX_MEMORY_GB_LIMIT",
    "SEED_LIMIT",
    "check_bytes",
    "check_configs",
    "check_count",
    "check_finite",
    "check_max_memory_gb",
    "check_memory",
    "check_routing_bytes",
    "check_seed",
    "sampling_bytes",
]
