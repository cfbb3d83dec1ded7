"""The whole `moesim validate` run as a library call: measure the grid into rows, then predict and summarise.

`measure_validation` is the torch half (rows + the meta that rebuilds each row's work); the prediction is
the same pure call `--repredict` makes on a saved run (`predict.predict_rows`). torch is imported only
inside `measure_validation` (via the measure and reference modules).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.validation.reference.configs import default_routing, validation_grid
from moesim.validation.reference.measure import MeasureSettings, clock_name, measure_model
from moesim.validation.reference.predict import predict_rows
from moesim.validation.reference.report import score_rows
from moesim.validation.reference.shapes import SHAPES, validation_model


@dataclass(frozen=True)
class ValidationOptions:
    """What `moesim validate` measures (see the command's help for each)."""

    device: str = "cpu"
    models: tuple[str, ...] = tuple(SHAPES)
    quick: bool = False
    launch: str = "eager"
    context_len: int = 512
    batches: tuple[int, ...] | None = None
    draft_lens: tuple[int, ...] | None = None
    layers: int | None = None
    dtype: str | None = None
    threads: int | None = None
    routing: str = "typical"
    seed: int = 0
    clock: str = "auto"
    cache: str = "auto"  # between timed steps: cold (flushed), warm, or auto (cold on a CPU, warm on a GPU)
    style: str = "torch-reference"  # the routed experts: a loop over distinct experts, or grouped GEMMs


CACHE_STATES = ("auto", "cold", "warm")


def cache_between_steps(cache: str, device: str) -> str:
    """'cold' or 'warm': the cache state each timed step starts in (auto: cold on a CPU, warm on a GPU).

    A CPU runs a scaled-down model that its last-level cache may hold in part, by an amount that depends
    on the machine (a 32 MiB L3 slice, or hundreds of MiB on a large server part) and on its neighbours,
    so it starts each step cold, as a full-size model on any device does. A GPU runs real widths, many
    times its L2, and keeps the engine's warm steady state.
    """
    if cache not in CACHE_STATES:
        raise MoesimError(
            "--cache", f"unknown cache state {cache!r}", f"choose one of {', '.join(CACHE_STATES)}"
        )
    if cache == "auto":
        return "cold" if device == "cpu" else "warm"
    return cache


def profile_threads(hardware: HardwareProfile) -> int | None:
    """The torch thread count a CPU profile was measured with, if it says."""
    text = hardware.provenance.software.get("threads")
    try:
        return int(text) if text else None
    except ValueError:
        return None


def profile_dtype(hardware: HardwareProfile) -> str | None:
    """The first dtype a measured profile's GEMMs were calibrated in, if it says."""
    text = hardware.provenance.software.get("dtypes", "")
    first = text.split(",")[0].strip()
    return first or None


def run_torch_validation(
    hardware: HardwareProfile,
    options: ValidationOptions,
    progress: Callable[[str], None] | None = None,
    cross_hardware: dict[str, HardwareProfile] | None = None,
) -> dict[str, Any]:
    """Measure the torch reference on the grid and compare with the simulator; returns rows + summary."""
    measured = measure_validation(hardware, options, progress)
    rows = predict_rows(measured["meta"], measured["rows"], hardware, cross_hardware)
    return measured | {"rows": rows, "summary": score_rows(rows, cross_hardware or {})}


def measure_validation(
    hardware: HardwareProfile, options: ValidationOptions, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure the torch reference on the grid: measured rows, the meta that rebuilds them, and notes.

    `hardware` only chooses the thread count and dtype a measured CPU profile was calibrated with.
    """
    from moesim.calibrate.suites.timing import (
        cache_flush_bytes,
        machine_description,
        machine_kind,
        resolve_device,
        today,
    )

    if options.launch not in ("eager", "graph"):
        raise MoesimError("--launch", f"unknown launch mode {options.launch!r}", "choose eager or graph")
    if options.launch == "graph" and options.device != "cuda":
        raise MoesimError("--launch", "graph replay needs --device cuda", "use --launch eager on a CPU")
    threads = options.threads
    if options.device == "cpu" and threads is None:
        threads = profile_threads(hardware) or 1
    device = resolve_device(options.device, threads if options.device == "cpu" else None)
    dtype = options.dtype or (profile_dtype(hardware) if hardware.provenance.kind == "measured" else None)
    dtype = dtype or ("fp32" if options.device == "cpu" else "bf16")
    if dtype not in ("fp32", "bf16", "fp16"):
        raise MoesimError("--dtype", f"the torch reference runs fp32, bf16 or fp16, not {dtype!r}")
    grid = validation_grid(
        options.quick,
        list(options.batches) if options.batches else None,
        list(options.draft_lens) if options.draft_lens is not None else None,
    )
    settings = MeasureSettings.for_mode(options.quick)
    cache = cache_between_steps(options.cache, options.device)
    flush_bytes = cache_flush_bytes(device, llc_multiple=1.0) if cache == "cold" else 0
    started = time.perf_counter()
    rows = []
    checks: dict[str, bool] = {}
    specs = [validation_model(key, options.device, dtype, options.layers) for key in options.models]
    for key, spec in zip(options.models, specs, strict=True):
        rows += measure_model(
            spec,
            key,
            device.torch_device,
            grid,
            options.context_len,
            options.launch,
            default_routing(spec, options.routing),
            settings,
            seed=options.seed,
            progress=progress,
            clock=options.clock,
            check=checks,
            flush_bytes=flush_bytes,
            style=options.style,
        )
    notes = []
    if not all(checks.values()):
        bad = [name for name, ok in checks.items() if not ok]
        notes.append(
            f"the torch-reference plan's kernel list did NOT match what torch launched: {', '.join(bad)}"
        )
    return {
        "rows": rows,
        "meta": {
            "title": f"{options.style} on {device.name} vs profile {hardware.name} ({options.launch})",
            "profile": hardware.name,
            "profile_provenance": f"{hardware.provenance.kind}: {hardware.provenance.source}",
            "device": options.device,
            "device_name": device.name,
            "machine": machine_description(device),
            "machine_kind": machine_kind(device),
            "threads": device.threads,
            "clock": clock_name(options.clock, options.device == "cuda", device.threads),
            "reference_style": options.style,
            "cache_between_steps": cache,
            "flush_bytes": flush_bytes,
            "dtype": dtype,
            "launch": options.launch,
            "routing": default_routing(specs[0], options.routing).description,
            "routing_name": options.routing,
            "seed": options.seed,
            "layers": options.layers,
            "context_len": options.context_len,
            "grid": {"batches": sorted({b for b, _ in grid}), "draft_lens": sorted({k for _, k in grid})},
            "rounds": settings.rounds,
            "repeats_per_round": settings.repeats,
            "plan_matches_torch": checks,
            "torch": device.details.get("torch", ""),
            "date": today(),
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "notes": notes,
    }


__all__ = [
    "CACHE_STATES",
    "ValidationOptions",
    "cache_between_steps",
    "measure_validation",
    "profile_dtype",
    "profile_threads",
    "run_torch_validation",
]
