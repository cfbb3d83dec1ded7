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
from moesim.options import option
from moesim.simulator.bounds import (
    DEFAULT_MAX_MEMORY_GB,
    GPU_MAX_MEMORY_GB,
    check_bytes,
    check_count,
    check_max_memory_gb,
    check_seed,
)
from moesim.simulator.hardware.profile import HardwareProfile
from moesim.simulator.models.sequence_state import kv_cache_bytes
from moesim.simulator.models.spec import ModelSpec
from moesim.simulator.models.weights import total_weight_bytes
from moesim.validation.reference.configs import default_routing, validation_grid
from moesim.validation.reference.measure import MeasureSettings, clock_name, measure_model
from moesim.validation.reference.predict import predict_rows
from moesim.validation.reference.report import score_rows
from moesim.validation.reference.shapes import SHAPES, validation_model

CACHE_STATES = ("auto", "cold", "warm")
REFERENCE_STYLES = ("torch-reference", "torch-fused")


@dataclass(frozen=True)
class ValidationOptions:
    """What `moesim validate reference` measures, and how `validate measured` predicts."""

    device: str = option("cpu", "Where to run the torch reference.", choices=("cpu", "cuda"))
    models: tuple[str, ...] = option(
        tuple(SHAPES),
        "Validation shapes: fine (Qwen3-30B-A3B), coarse (Mixtral-8x7B), shared (Qwen2-57B-A14B).",
        list_of=str,
    )
    quick: bool = option(
        False,
        "Batches 1,4,32 × draft lengths 0,1,3,7 and fewer repeats (36 rows for 3 models; the full grid is 72).",
    )
    launch: str = option(
        "eager", "Eager launches, or CUDA-graph replay (GPU only).", choices=("eager", "graph")
    )
    context_len: int = option(512, "Cached tokens per sequence.")
    batches: tuple[int, ...] | None = option(
        None, "Override the batch sizes, e.g. 1,2,4,8,16,32.", flag="--batch", list_of=int
    )
    draft_lens: tuple[int, ...] | None = option(
        None,
        "Override the draft lengths K (0 = decode), e.g. 0,1,3,7.",
        flag="--draft-len",
        list_of=int,
        minimum=0,
    )
    layers: int | None = option(None, "Layers of each validation model (default 2 on cpu, 4 on cuda).")
    dtype: str | None = option(
        None,
        "Reference dtype (default: the profile's calibrated dtype, else fp32 on cpu, bf16 on cuda).",
        choices=("fp32", "bf16", "fp16"),
    )
    threads: int | None = option(
        None, "CPU torch threads (default: what the profile was calibrated with, else 1)."
    )
    routing: str = option(
        "typical",
        "Routing model the forced expert assignments are sampled from.",
        choices=("typical", "uniform"),
    )
    seed: int = option(0, "Seed of weights, inputs and routing samples.")
    clock: str = option(
        "auto",
        "auto: the thread's CPU time for a single-threaded CPU run (ignores preemption on a shared machine), "
        "wall clock otherwise.",
        choices=("auto", "wall", "thread"),
    )
    cache: str = option(  # between timed steps: cold (flushed), warm, or auto (cold on a CPU, warm on a GPU)
        "auto",
        "Cache state each timed step starts in: cold (a read of the last-level cache's size evicts it first), "
        "warm (back to back), auto: cold on a CPU (a scaled-down model partly fits its cache), warm on a GPU.",
        choices=CACHE_STATES,
    )
    style: str = option(  # the routed experts: a loop over distinct experts, or grouped GEMMs
        "torch-reference",
        "The torch step's routed experts: a loop of GEMMs per distinct expert (torch-reference), or one "
        "grouped GEMM per projection over all of them (torch-fused, torch._grouped_mm: the fused style's kind "
        "of kernel), each predicted with its own exact plan.",
        flag="--reference",
        choices=REFERENCE_STYLES,
    )

    max_memory_gb: float | None = (
        option(  # refuse a grid whose torch tensors would need more (None: per device)
            None,
            "Refuse a measurement grid whose torch tensors are estimated to need more memory (GB).",
            default_text=f"{DEFAULT_MAX_MEMORY_GB:g} on a CPU, {GPU_MAX_MEMORY_GB:g} on a GPU",
        )
    )

    def __post_init__(self) -> None:
        check_seed(self.seed, "--seed")
        check_count(self.context_len, "--context-len", low=0, fix="give the cached tokens per sequence")
        if self.layers is not None:
            check_count(self.layers, "--layers", high=4096, fix="give --layers 1 or more")
        if self.threads is not None:
            check_count(self.threads, "--threads", high=4096, fix="give --threads 1 or more")
        for flag, values, low in (("--batch", self.batches, 1), ("--draft-len", self.draft_lens, 0)):
            for value in values or ():
                check_count(value, flag, low=low, fix=f"give {flag} values ≥ {low}")
        if self.max_memory_gb is not None:
            check_max_memory_gb(self.max_memory_gb)

    @property
    def memory_limit_gb(self) -> float:
        """The limit given, or the device's default: DEFAULT_MAX_MEMORY_GB on a CPU, GPU_MAX_MEMORY_GB on a GPU."""
        if self.max_memory_gb is not None:
            return self.max_memory_gb
        return GPU_MAX_MEMORY_GB if self.device == "cuda" else DEFAULT_MAX_MEMORY_GB

    def checked(self) -> ValidationOptions:
        """These options, refused with one message when a validation shape is unknown."""
        unknown = [m for m in self.models if m not in SHAPES]
        if unknown or not self.models:
            raise MoesimError(
                "--models",
                f"unknown validation model(s) {', '.join(unknown) or '(none)'}",
                f"choose from {', '.join(SHAPES)}",
            )
        return self


DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}

ACTIVATION_COPIES = 16
"""Hidden-width activation tensors a reference step holds per token at once (inputs, norms, projections, the
expert block's gathers and outputs)."""


def reference_bytes(
    spec: ModelSpec, grid: list[tuple[int, int]], context_len: int, dtype_bytes: int
) -> float:
    """Estimated peak memory of the torch reference over `grid`: its weights, the KV cache of the largest
    batch at the longest context, and the activations of the largest step."""
    batch = max(b for b, _ in grid)
    tokens = max(k for _, k in grid) + 1
    weights = total_weight_bytes(spec)  # the spec's weight format is the reference dtype
    cache = batch * kv_cache_bytes(spec, context_len + tokens, dtype_bytes)
    activations = batch * tokens * max(spec.hidden, spec.expert_width) * dtype_bytes * ACTIVATION_COPIES
    return float(weights + cache + activations)


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


def _start_probe(hardware: HardwareProfile, device: Any) -> tuple[Any, str]:
    """(the drift probe to run beside every row, a note): the kernels the profile's calibration timed when
    it recorded them (otherwise this device's default probe, which a drift correction cannot use)."""
    from moesim.calibrate.fits.drift import PROBE_KEY
    from moesim.calibrate.suites.probe import Probe, probe_plan, recorded_plan
    from moesim.calibrate.suites.timing import Timer

    figures = hardware.fit_quality.get(PROBE_KEY, {})
    # The same kernels, repeats and warm-up as the calibration's probe: a probe's median depends a little on
    # how many repeats it takes of a skewed spread, and a correction is a ratio of two probes.
    if "read_bytes" in figures and "gemm_n" in figures:
        plan = recorded_plan(device.is_gpu, figures)
        note = ""
    else:
        plan = probe_plan(device.is_gpu, device.last_level_cache_bytes)
        note = (
            f"profile {hardware.name} records no drift probe from its calibration: the probe's spread over this "
            "run is reported, but rows cannot be corrected for drift since calibration"
        )
    try:
        return Probe(Timer(device), device, plan), note
    except (RuntimeError, MemoryError) as error:
        return None, f"drift probe unavailable ({error}): rows are not corrected for drift"


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
    if options.launch not in ("eager", "graph"):
        raise MoesimError("--launch", f"unknown launch mode {options.launch!r}", "choose eager or graph")
    if options.launch == "graph" and options.device != "cuda":
        raise MoesimError("--launch", "graph replay needs --device cuda", "use --launch eager on a CPU")
    threads = options.threads
    if options.device == "cpu" and threads is None:
        threads = profile_threads(hardware) or 1
    dtype = options.dtype or (profile_dtype(hardware) if hardware.provenance.kind == "measured" else None)
    dtype = dtype or ("fp32" if options.device == "cpu" else "bf16")
    if dtype not in ("fp32", "bf16", "fp16"):
        raise MoesimError("--dtype", f"the torch reference runs fp32, bf16 or fp16, not {dtype!r}")
    grid = validation_grid(
        options.quick,
        list(options.batches) if options.batches else None,
        list(options.draft_lens) if options.draft_lens is not None else None,
    )
    specs = [validation_model(key, options.device, dtype, options.layers) for key in options.models]
    for spec in specs:  # torch allocates nothing before this
        check_bytes(
            reference_bytes(spec, grid, options.context_len, DTYPE_BYTES[dtype]),
            options.memory_limit_gb,
            f"the torch reference of {spec.name} (weights and the KV cache of {max(b for b, _ in grid)} sequences × "
            f"{options.context_len + max(k for _, k in grid) + 1:,} tokens)",
            "give a shorter --context-len, smaller --batch values or fewer --layers",
        )
    from moesim.calibrate.suites.timing import (
        cache_flush_bytes,
        machine_description,
        machine_kind,
        resolve_device,
        today,
    )

    device = resolve_device(options.device, threads if options.device == "cpu" else None)
    settings = MeasureSettings.for_mode(options.quick)
    cache = cache_between_steps(options.cache, options.device)
    flush_bytes = cache_flush_bytes(device, llc_multiple=1.0) if cache == "cold" else 0
    probe, probe_note = _start_probe(hardware, device)
    started = time.perf_counter()
    rows = []
    checks: dict[str, bool] = {}
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
            probe=probe.sample if probe is not None else None,
        )
    notes = [probe_note] if probe_note else []
    probe_meta: dict[str, Any] = {}
    if probe is not None:
        probe_meta = {"probe": probe.plan.describe(), "probe_samples": [p.as_row() for p in probe.samples]}
        probe.close()
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
        }
        | probe_meta,
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
