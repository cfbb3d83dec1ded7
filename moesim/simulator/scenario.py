"""The scenario: one frozen description of what to simulate, owning every default.

    Scenario(model="qwen3-30b-a3b", hardware="h200", batch=1, draft_len=3)

The CLI builds one from its flags, the Python API from keyword arguments, so both give the same number.
`resolve()` turns names into objects (model spec, hardware profile, routing model, drafter), validates the
sizes and chooses the layout whose memory fits; the speculative point and the sweep work on the result.

Routing: `None` means the documented *typical* correlated routing (`routing.presets.typical_routing`), or
routing fitted to `overlap` / `baseline_overlap` when those are given; "independent", "typical", a
statistics file path or a `RoutingModel` choose explicitly. Dense models route nothing (independent).

Serving engine (`serving_engine`, a bundled name or a profile path, see `moesim engines`): what the engine
adds to every step beyond the kernel stream; the default `ideal` adds nothing. Not to be confused with
`kernel_style`, how the kernels of a step are planned (`plan.styles`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moesim.errors import DoesNotFit, MoesimError
from moesim.options import option
from moesim.simulator.bounds import (
    DEFAULT_MAX_CONFIGS,
    DEFAULT_MAX_MEMORY_GB,
    MAX_DRAFT_LEN,
    check_finite,
    check_max_memory_gb,
    check_memory,
    check_routing_bytes,
)

if TYPE_CHECKING:  # the module stays light: the CLI reads its defaults at start-up
    from moesim.simulator.engines.overheads import Sampling
    from moesim.simulator.engines.profile import ServingEngineProfile
    from moesim.simulator.hardware.profile import HardwareProfile
    from moesim.simulator.models.spec import ModelSpec
    from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
    from moesim.simulator.plan.memory import MemoryUse
    from moesim.simulator.routing.base import RoutingModel
    from moesim.simulator.speculative.drafters import Drafter

DEFAULT_HARDWARE = "h200"
DEFAULT_BATCH = 1
DEFAULT_DRAFT_LEN = 3
DEFAULT_CONTEXT_LEN = 2048
DEFAULT_KERNEL_STYLE = "fused"
DEFAULT_LAUNCH = "graph"
DEFAULT_SERVING_ENGINE = "ideal"  # the kernel stream alone: what moesim predicted before serving engines
CPU_LAUNCH = "eager"  # a CPU has no graph replay: torch dispatches each operator
DEFAULT_DRAFTER = "eagle"  # an EAGLE-style draft head, what vLLM and SGLang users run most
DEFAULT_ACCEPTANCE = 0.8  # per-token acceptance of a well-trained EAGLE head on chat data
# Sampling: greedy by default (what the measured SD runs mostly use: temperature 0); top-k 0 and top-p 1
# filter nothing (vLLM's SamplingParams take -1 / 1.0 for "off", SGLang's -1 / 1.0).
DEFAULT_TEMPERATURE = 0.0
DEFAULT_TOP_K = 0
DEFAULT_TOP_P = 1.0
MAX_TEMPERATURE = 100.0  # far above any sampling temperature in use (1-2); a typo beyond it is refused
# A sweep's grid when none is given: powers of two to 256 sequences, draft lengths 1-8.
DEFAULT_SWEEP_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_SWEEP_DRAFT_LENS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)


def check_acceptance(acceptance: float) -> None:
    """A per-token acceptance rate α is a probability."""
    if not 0.0 <= acceptance <= 1.0:
        raise MoesimError("acceptance", f"must be a probability in [0, 1], got {acceptance}")


@dataclass(frozen=True)
class Scenario:
    """What to simulate. `kernel_style` names the kernel plan (see `plan.styles`), `layout` a fixed
    `ParallelLayout` or a `LayoutRequest` (None, the default: the smallest layout whose memory fits)."""

    model: ModelSpec | str
    hardware: HardwareProfile | str = option(
        DEFAULT_HARDWARE,
        "Hardware profile: a bundled name (see `moesim profiles`) or a path to a profile .toml.",
    )
    batch: int = option(DEFAULT_BATCH, "Sequences in the batch B.")
    draft_len: int = option(DEFAULT_DRAFT_LEN, "Draft tokens K per verification step.")
    context_len: int = option(DEFAULT_CONTEXT_LEN, "Cached tokens per sequence.")
    kernel_style: str = option(
        DEFAULT_KERNEL_STYLE,
        "Kernel style: fused (vLLM/SGLang kernels), per-token (naive loop), or a registered style.",
    )
    launch: str | None = option(  # None: DEFAULT_LAUNCH on a GPU, CPU_LAUNCH on a CPU
        None,
        "graph: CUDA-graph replay (one launch per step); eager: one host launch per kernel.",
        choices=lambda: _launch_modes(),
        default_text=f"{DEFAULT_LAUNCH} on a GPU, {CPU_LAUNCH} on a CPU",
    )
    routing: RoutingModel | str | None = option(
        None,
        "typical (the default: correlated routing with documented typical statistics), independent, "
        "or a routing statistics file from `moesim routing fit`. With --overlap/--baseline-overlap and no "
        "--routing, the routing model is fitted to those summary statistics.",
    )
    overlap: tuple[float, ...] | str | None = option(  # same-sequence overlap at distances 1..D
        None, "Same-sequence expert overlap at distances 1..D, e.g. 0.4,0.3."
    )
    baseline_overlap: float | None = option(None, "Overlap between different sequences.", kind=float)
    layout: ParallelLayout | LayoutRequest | None = None
    drafter: str = option(
        DEFAULT_DRAFTER,
        "Drafter: eagle, mtp, ngram, model:NAME or fraction:F (F × a decode step per draft token).",
        flag="--draft",
    )
    acceptance: float | None = (
        option(  # per-token α; None: DEFAULT_ACCEPTANCE, unless acceptance_length is given
            None,
            "Per-token acceptance rate α: E[tokens/step] = (1 − α^(K+1)) / (1 − α).",
            kind=float,
            default_text=str(DEFAULT_ACCEPTANCE),
        )
    )
    acceptance_length: float | None = option(
        None, "Mean tokens per verification step instead of --acceptance (capped at K+1).", kind=float
    )
    temperature: float = option(
        DEFAULT_TEMPERATURE,
        "Sampling temperature of the requests: 0 is greedy (argmax); above 0 the serving engine's sampler "
        "and acceptance run their sampled passes (`moesim engines` shows each engine's).",
    )
    sampling_top_k: int = option(
        DEFAULT_TOP_K, "Keep the k most likely tokens before sampling (0: all; only when --temperature > 0)."
    )
    sampling_top_p: float = option(
        DEFAULT_TOP_P,
        "Keep the smallest set of tokens whose probability reaches p before sampling (1: all; only when "
        "--temperature > 0).",
    )
    serving_engine: ServingEngineProfile | str = option(
        DEFAULT_SERVING_ENGINE,
        "What the serving engine adds to each step (host work, CUDA-graph sizes and padding, drafter "
        "style): ideal (nothing), vllm, vllm-v0, sglang, trtllm or a profile .toml (see `moesim engines`).",
    )
    max_memory_gb: float = option(  # refuse a run whose routing sampling would need more
        DEFAULT_MAX_MEMORY_GB,
        "Refuse a run whose routing sampling is estimated to need more memory than this.",
    )

    def replace(self, **changes: Any) -> Scenario:
        """The same scenario with some fields changed."""
        return dataclasses.replace(self, **changes)

    def for_device(self, hardware: HardwareProfile) -> Scenario:
        """The scenario with the defaults that depend on the device filled in, and the combinations that
        cannot go together refused: --acceptance with --acceptance-length; graph replay on a CPU (the
        default launch there is eager)."""
        from moesim.simulator.execution.launch import check_launch

        if self.acceptance is not None and self.acceptance_length is not None:
            raise MoesimError(
                "acceptance",
                "given together with acceptance_length; both set the tokens a verification step yields",
                "give --acceptance or --acceptance-length, not both",
            )
        launch = self.launch or (CPU_LAUNCH if hardware.is_cpu else DEFAULT_LAUNCH)
        check_launch(launch)
        if hardware.is_cpu and launch == "graph":
            raise MoesimError(
                "launch",
                f"{hardware.name} is a CPU profile, and a CPU has no graph replay",
                f"use --launch {CPU_LAUNCH} (the default on a CPU)",
            )
        acceptance = self.acceptance
        if acceptance is None and self.acceptance_length is None:
            acceptance = DEFAULT_ACCEPTANCE
        if acceptance is not None:
            check_acceptance(acceptance)
        if self.acceptance_length is not None:
            check_finite(
                self.acceptance_length,
                "acceptance_length",
                low=1.0,
                fix="give tokens per verification round ≥ 1",
            )
        self.check_sampling()
        return self.replace(hardware=hardware, launch=launch, acceptance=acceptance)

    @property
    def sampling(self) -> Sampling:
        """The requests' sampling (`engines.overheads.Sampling`)."""
        return self.check_sampling()

    def check_sampling(self) -> Sampling:
        """The requests' sampling, or a refusal naming the field out of range."""
        from moesim.simulator.engines.overheads import Sampling

        temperature = check_finite(
            self.temperature,
            "temperature",
            low=0.0,
            high=MAX_TEMPERATURE,
            fix="give --temperature ≥ 0 (0: greedy)",
        )
        top_k = self.sampling_top_k
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
            raise MoesimError(
                "sampling_top_k",
                f"must be a whole number ≥ 0, got {top_k!r}",
                "give --sampling-top-k ≥ 0 (0: all)",
            )
        top_p = check_finite(
            self.sampling_top_p,
            "sampling_top_p",
            low=0.0,
            low_open=True,
            high=1.0,
            fix="give --sampling-top-p in (0, 1] (1: all)",
        )
        return Sampling(temperature, top_k, top_p)

    def resolve(
        self, *, fit_draft_len: int | None = None, check_fit: bool = True, step_tokens: int | None = None
    ) -> ResolvedScenario:
        """Names to objects, sizes validated, layout chosen. The memory check reserves the KV cache of
        `fit_draft_len` (default `draft_len`) verified tokens; `check_fit=False` skips it.

        `step_tokens` resolves the scenario for one plain forward step of that many tokens per sequence (1: a
        decode step; K + 1: a verification pass timed alone) and no drafter: the draft length and acceptance
        are not consulted, the memory check reserves `step_tokens` tokens per sequence and no drafter bytes.
        A model that does not fit raises `DoesNotFit` (a sweep skips such a point); any other error is the
        input's."""
        from moesim.simulator.engines.overheads import verify_tokens
        from moesim.simulator.engines.profile import load_serving_engine
        from moesim.simulator.plan.layout import LayoutRequest, ParallelLayout
        from moesim.simulator.plan.memory import fit_layout
        from moesim.simulator.plan.step import check_step_inputs
        from moesim.simulator.plan.styles import kernel_style_builder
        from moesim.simulator.speculative.drafters import parse_drafter

        spec = resolve_model(self.model)
        hardware = resolve_hardware(self.hardware)
        scenario = self.for_device(hardware)
        drafter = parse_drafter(self.drafter)
        kernel_style_builder(self.kernel_style)
        serving = load_serving_engine(self.serving_engine)
        if step_tokens is None:
            check_draft_len(self.draft_len)
            # tokens per sequence the largest verification reserves in the KV cache (a tree's draft tokens)
            tokens = verify_tokens(
                serving.drafter, self.draft_len if fit_draft_len is None else fit_draft_len
            )
            self._check_acceptance_length(verify_tokens(serving.drafter, self.draft_len))
        else:
            tokens = step_tokens
        check_step_inputs(spec, self.batch, tokens, self.context_len)
        check_max_memory_gb(self.max_memory_gb)
        routing = self.routing_for(spec, tokens)
        request = LayoutRequest() if self.layout is None else self.layout
        if hardware.is_cpu and isinstance(request, LayoutRequest) and request.fixed() is None:
            # a CPU is one device: no multi-"GPU" search
            request = ParallelLayout(
                placement=request.placement, shared_experts=request.shared_experts, draft_on=request.draft_on
            )
        memory = None
        context = max(1, self.context_len + tokens)
        if check_fit:  # the drafter's weights and KV cache share the memory (a plain step has none)
            drafter_bytes = (
                0.0 if step_tokens is not None else drafter.memory_bytes(spec, self.batch, self.context_len)
            )
        try:
            if check_fit:
                memory = fit_layout(
                    spec, hardware, self.batch, context, layout=request, drafter_bytes=drafter_bytes
                )
                layout = memory.layout
            else:
                layout = chosen_layout(request, spec, hardware, self.batch, context)
        except MoesimError as error:
            raise DoesNotFit(error.field, error.problem, error.fix) from None
        if hardware.is_cpu:
            layout = dataclasses.replace(layout, device="CPU")
        return ResolvedScenario(scenario, spec, hardware, routing, drafter, layout, memory, serving)

    def _check_acceptance_length(self, verified: int) -> None:
        """A round cannot yield more tokens than it verifies."""
        if self.acceptance_length is not None and self.acceptance_length > verified:
            raise MoesimError(
                "acceptance_length",
                f"is {self.acceptance_length:g} tokens per round, above the {verified} a round of draft length "
                f"{self.draft_len} verifies (K + 1{' for a tree: its draft tokens + 1' if verified != self.draft_len + 1 else ''})",
                "give --acceptance-length ≤ K + 1, or a longer --draft-len",
            )

    def routing_for(self, spec: ModelSpec, tokens_per_seq: int) -> RoutingModel:
        """The scenario's routing model for `spec` (module docstring), its sampling memory checked against
        `max_memory_gb` for steps of `tokens_per_seq` tokens per sequence, before and after it is built."""
        what = f"{spec.name} with draft length {tokens_per_seq - 1}"
        check_routing_size(
            spec, self.routing, self.overlap, self.baseline_overlap, tokens_per_seq, self.max_memory_gb, what
        )
        routing = resolve_routing(spec, self.routing, self.overlap, self.baseline_overlap)
        check_memory(routing, tokens_per_seq, self.max_memory_gb, what)
        return routing


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with its objects: what the speculative point and the sweep compute on."""

    scenario: Scenario
    model: ModelSpec
    hardware: HardwareProfile
    routing: RoutingModel
    drafter: Drafter
    layout: ParallelLayout
    memory: MemoryUse | None
    serving_engine: ServingEngineProfile

    @property
    def batch(self) -> int:
        return self.scenario.batch

    @property
    def context_len(self) -> int:
        return self.scenario.context_len

    @property
    def kernel_style(self) -> str:
        return self.scenario.kernel_style

    @property
    def launch(self) -> str:
        return self.scenario.launch or DEFAULT_LAUNCH  # filled in by `Scenario.for_device`

    def assumptions(self) -> dict[str, Any]:
        """What a result rests on, printed beside it."""
        s = self.scenario
        return {
            "routing": self.routing.description,
            "acceptance": None if s.acceptance_length is not None else s.acceptance,
            "acceptance_length": s.acceptance_length,
            "drafter": self.drafter.label,
            "kernel_style": s.kernel_style,
            "launch": s.launch,
            "context_len": s.context_len,
            "hardware_provenance": self.hardware.provenance.kind,
            "serving_engine": self.serving_engine.name,
            "serving_engine_provenance": self.serving_engine.provenance.kind,
            "sampling": s.sampling.describe(),
            "device": "CPU" if self.hardware.is_cpu else "GPU",
            "compute_rule": self.hardware.compute_rule(
                {"bf16", self.model.dense_format.compute_dtype, self.model.expert_format.compute_dtype}
            ),
        }


@dataclass(frozen=True)
class SweepGrid:
    """What a sweep covers: models × batch sizes × draft lengths, and how it runs."""

    models: str = option(
        "",
        "Comma-separated catalogue names or model files, or 'all'.",
        flag="--model",
        default_text="all, or none when --model-config is given",
    )
    model_configs: str = option(
        "",
        "Comma-separated Hugging Face config.json files (or catalogue-style .toml) to sweep (alone: instead of "
        "the catalogue; with --model: as well).",
        flag="--model-config",
    )
    batches: tuple[int, ...] = option(DEFAULT_SWEEP_BATCHES, "Batch sizes.", flag="--batch", list_of=int)
    draft_lens: tuple[int, ...] = option(
        DEFAULT_SWEEP_DRAFT_LENS, "Draft lengths K.", flag="--draft-len", list_of=int
    )
    max_configs: int = option(
        DEFAULT_MAX_CONFIGS,
        "Refuse a sweep of more configurations (models × batches × draft lengths) than this.",
    )
    workers: int = option(1, "Processes sweeping the models side by side.")

    @property
    def chosen_models(self) -> str:
        """The --model list swept: as given, else the whole catalogue unless --model-config names models."""
        return self.models or ("" if self.model_configs.strip() else "all")


def _launch_modes() -> tuple[str, ...]:
    from moesim.simulator.execution.launch import LAUNCH_MODES

    return LAUNCH_MODES


def check_draft_len(draft_len: int) -> None:
    if not isinstance(draft_len, int) or isinstance(draft_len, bool) or draft_len < 1:
        raise MoesimError("draft_len", f"must be a positive integer, got {draft_len!r}")
    if draft_len > MAX_DRAFT_LEN:
        raise MoesimError(
            "draft_len",
            f"is {draft_len:,} draft tokens per verification step, above the {MAX_DRAFT_LEN:,} a scenario may "
            "ask (engines verify tens; routing sampling grows with K)",
            f"give --draft-len ≤ {MAX_DRAFT_LEN:,}",
        )


def resolve_model(model: ModelSpec | str) -> ModelSpec:
    """A model spec, or one loaded by catalogue name or file path."""
    from moesim.simulator.models.spec import ModelSpec

    if isinstance(model, ModelSpec):
        return model
    from moesim.simulator.models.catalogue import load_model

    return load_model(model)


def resolve_hardware(hardware: HardwareProfile | str) -> HardwareProfile:
    """A hardware profile, or one loaded by bundled name or file path."""
    from moesim.simulator.hardware.profile import HardwareProfile, load_profile

    return hardware if isinstance(hardware, HardwareProfile) else load_profile(hardware)


def resolve_routing(
    spec: ModelSpec,
    routing: RoutingModel | str | None,
    overlap: tuple[float, ...] | str | None = None,
    baseline_overlap: float | None = None,
) -> RoutingModel:
    """The routing model of a scenario (see the module docstring for the rules)."""
    from moesim.simulator.routing.base import RoutingModel
    from moesim.simulator.routing.independent import IndependentRouting

    if isinstance(routing, RoutingModel):
        return routing
    if not spec.is_moe or (spec.top_k >= spec.n_experts and isinstance(routing, str | None)):
        return IndependentRouting()  # dense, or every token uses every expert: no routing to describe
    from moesim.simulator.routing.presets import routing_from_cli

    if routing is None:
        routing = "independent" if (overlap is not None or baseline_overlap is not None) else "typical"
    return routing_from_cli(
        routing, spec.n_experts, spec.top_k, overlap, baseline_overlap, spec.n_groups, spec.topk_groups
    )


def check_routing_size(
    spec: ModelSpec,
    routing: RoutingModel | str | None,
    overlap: tuple[float, ...] | str | None,
    baseline_overlap: float | None,
    tokens_per_seq: int,
    max_memory_gb: float,
    what: str,
) -> None:
    """Refuse, before any routing model is built (the typical preset samples sequences to describe itself), a
    correlated routing whose sampling would need more than `max_memory_gb`: its bank is sized by the model's
    expert count, top-k and the tokens per sequence alone."""
    from moesim.simulator.routing.base import RoutingModel

    independent = routing == "independent" and overlap is None and baseline_overlap is None
    if not spec.is_moe or isinstance(routing, RoutingModel) or independent:
        return
    from moesim.simulator.routing.correlated import bank_bytes

    need = bank_bytes(spec.n_experts, tokens_per_seq, spec.top_k)
    check_routing_bytes(need, spec.n_experts, tokens_per_seq, max_memory_gb, what)


def chosen_layout(
    request: ParallelLayout | LayoutRequest | None,
    model: ModelSpec,
    hardware: HardwareProfile,
    batch: int,
    context_len: int,
) -> ParallelLayout:
    """The layout to simulate: the one given, one GPU for None, the smallest that fits for an open request."""
    from moesim.simulator.plan.layout import ParallelLayout
    from moesim.simulator.plan.memory import fit_layout

    if request is None:
        return ParallelLayout()
    if isinstance(request, ParallelLayout):
        return request
    fixed = request.fixed()
    if fixed is not None:
        return fixed
    return fit_layout(model, hardware, batch, max(1, context_len), layout=request).layout


__all__ = [
    "CPU_LAUNCH",
    "DEFAULT_ACCEPTANCE",
    "DEFAULT_BATCH",
    "DEFAULT_CONTEXT_LEN",
    "DEFAULT_DRAFTER",
    "DEFAULT_DRAFT_LEN",
    "DEFAULT_HARDWARE",
    "DEFAULT_KERNEL_STYLE",
    "DEFAULT_LAUNCH",
    "DEFAULT_SWEEP_BATCHES",
    "DEFAULT_SWEEP_DRAFT_LENS",
    "ResolvedScenario",
    "Scenario",
    "SweepGrid",
    "check_acceptance",
    "check_routing_size",
    "chosen_layout",
    "resolve_hardware",
    "resolve_model",
    "resolve_routing",
]
