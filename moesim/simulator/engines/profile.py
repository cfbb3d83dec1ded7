"""The serving-engine profile: host costs, CUDA-graph capture, drafter style, provenance; its TOML files.

A profile says what a serving engine adds to each forward step beyond the kernels the step model times.
Facts read from an engine's source (captured graph sizes, padding, what runs above them, drafter styles)
and documented defaults (host costs, with their source) live in `[graphs]`, `[drafter]` and `[host]`;
values fitted from measured runs live apart in `[fitted]` (same names as `[host]`, overriding them) with
their quality in `[fit_quality.<name>]`, so a reader always sees what was read and what was fitted.

Bundled profiles live in `moesim/hardware_profiles/engines/<name>.toml`; `ideal` adds nothing (the
simulator's kernel stream as it is).
"""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from typing import Any, Literal

from moesim.atomic import atomic_write_text
from moesim.profile_files import (
    ProfileTable,
    field_error,
    profile_sections,
    read_fit_quality,
    read_profile_file,
)
from moesim.toml_files import dump_toml

SUFFIX = ".toml"
IDEAL = "ideal"
CAPTURE_UNITS = ("sequences", "tokens")
PADDING_RULES = ("next_captured", "none")
UNCAPTURED_MODES = ("eager", "piecewise")
DRAFT_SHAPES = ("chain", "tree")
DRAFTER_LAUNCHES = ("target", "graph", "eager", "piecewise")
VERIFY_MODES = ("multi_token", "batch_expansion")
FIRST_PASSES = ("one_token", "verified", "accepted")
DRAFTER_TPS = ("target", "one")
PASS_PREPARATIONS = ("device", "host_unless_tp1")
PROFILE_KINDS = ("ideal", "documented", "fitted")
# An SD round's own op and sync counts (DrafterStyle): an engine's Python round issues tens to hundreds of
# ops; 10,000 would be seconds of host time per round.
MAX_ROUND_OPS = 10_000


@dataclass(frozen=True)
class HostParameter:
    """One host-cost parameter: unit, physical meaning, bounds a fit may use."""

    unit: str
    meaning: str
    lower: float
    upper: float


# The host parameters a profile carries and a fit may change (bounds are what is physically plausible
# for a CPU process driving one step: a step never costs the host more than 100 ms).
HOST_PARAMETERS: dict[str, HostParameter] = {
    "step_us": HostParameter(
        "µs", "host work per forward step (scheduling, input preparation, output processing)", 0.0, 1e5
    ),
    "per_sequence_us": HostParameter(
        "µs",
        "host work per running sequence per step (block tables, sampling metadata, detokenising)",
        0.0,
        1e3,
    ),
    "per_token_us": HostParameter(
        "µs", "host work per token the step processes (input ids, positions, sampler rows)", 0.0, 1e2
    ),
    "overlap_fraction": HostParameter(
        "1", "share of min(host, device) hidden behind the device by asynchronous scheduling", 0.0, 1.0
    ),
    "draft_step_us": HostParameter(
        "µs", "host work per drafter pass (proposer inputs, tree building)", 0.0, 1e4
    ),
    "accept_sync_us": HostParameter(
        "µs", "per SD round: the device-to-host copy of accepted counts before the next round", 0.0, 1e4
    ),
    "sd_overlap_kept": HostParameter(
        "1",
        "share of the asynchronous overlap (overlap_fraction) the engine keeps while SD runs: 1 when its "
        "overlap scheduler runs SD rounds too (SGLang spec-v2, vLLM V1 async scheduling), 0 when SD turns "
        "it off (SGLang spec v1, vLLM V0); it also hides the acceptance sync",
        0.0,
        1.0,
    ),
    "sd_per_sequence_us": HostParameter(
        "µs",
        "host work per sequence per SD round beyond a decode step's: acceptance bookkeeping (rejected "
        "drafts' computed tokens and KV slots rolled back), the draft-token list, output processing of "
        "the extra accepted tokens",
        0.0,
        1e3,
    ),
    "runner_pass_us": HostParameter(
        "µs",
        "host work of one drafter pass the host prepares and reads back (`[drafter] pass_preparation`): "
        "building the pass's inputs, broadcasting them to the other tensor-parallel workers, returning "
        "the sampled tokens to the host",
        0.0,
        1e4,
    ),
    "runner_per_row_us": HostParameter(
        "µs",
        "host work per row of such a host-prepared drafter pass (its inputs, its sampled token)",
        0.0,
        1e3,
    ),
    "attention_plan_us": HostParameter(
        "µs",
        "host work of one attention-backend plan() call (FlashInfer: its Python checks and the C++ work "
        "partition over the batch's query and KV lengths), counted per SD round by `[drafter] "
        "tree_metadata_plans` / `tree_step_plans`",
        0.0,
        1e4,
    ),
    "scheduler_per_sequence_us": HostParameter(
        "µs",
        "host work of the scheduler per running sequence per engine step (a decode step's sequences, an SD "
        "round's sequences — not its batch-expansion rows): KV block bookkeeping incl. lookahead slots, "
        "the sequence's metadata for the workers",
        0.0,
        1e3,
    ),
    "expansion_per_token_us": HostParameter(
        "µs",
        "host work per batch-expansion row of an SD round and per token of the sequence's context: the "
        "scorer copies each sequence's token ids into every one of its K + 1 expanded rows",
        0.0,
        1.0,
    ),
    "output_per_token_us": HostParameter(
        "µs",
        "host work per token an SD round emits when the engine processes outputs synchronously under SD: "
        "appending the token, incremental detokenisation, stop checks (a decode step's output processing "
        "is left to overlap_fraction)",
        0.0,
        1e3,
    ),
    "tp_broadcast_us": HostParameter(
        "µs",
        "host work per scheduler iteration of a tensor-parallel group (TP > 1): rank 0 broadcasts the "
        "iteration's new requests to the other ranks over a CPU process group (gloo), and every rank waits "
        "for it before it schedules",
        0.0,
        1e4,
    ),
    "plan_scan_us": HostParameter(
        "µs",
        "host work per host-tensor element one attention-backend plan() call walks in Python one element "
        "at a time (FlashInfer 0.3.1's prefill plan takes Python's max() over its host query indptr and KV "
        "lengths: 2B + 1 elements for a batch of B sequences), counted per SD round by `[drafter] "
        "tree_metadata_plans`",
        0.0,
        1e3,
    ),
    "ngram_base_us": HostParameter("µs", "n-gram (prompt lookup) drafting on the host per round", 0.0, 1e4),
    "ngram_per_sequence_us": HostParameter("µs", "n-gram drafting per sequence per round", 0.0, 1e3),
}

# moesim's n-gram (prompt lookup) drafter, the same under every engine unless a profile says otherwise: a
# host-side suffix match over the sequence's tokens, a few microseconds per sequence (vLLM 0.33.0
# `v1/spec_decode/ngram_proposer.py` runs it on the CPU with numba). `engines.overheads.ngram_draft_s`.
NGRAM_BASE_US = 10.0
NGRAM_PER_SEQUENCE_US = 1.0

# Parameters the ideal profile keeps at their defaults rather than 0: the n-gram drafter's own host costs
# (moesim's, not an engine's) and the SD share of an overlap that is 0 anyway.
SCALING_PARAMETERS = ("sd_overlap_kept", "ngram_base_us", "ngram_per_sequence_us")


@dataclass(frozen=True)
class HostCosts:
    """Host work an engine adds per step (field meanings, units and bounds: `HOST_PARAMETERS`)."""

    step_us: float = 0.0
    per_sequence_us: float = 0.0
    per_token_us: float = 0.0
    overlap_fraction: float = 0.0
    draft_step_us: float = 0.0
    accept_sync_us: float = 0.0
    sd_overlap_kept: float = 1.0  # 1: SD rounds overlap as decode steps do (the ideal and older files)
    sd_per_sequence_us: float = 0.0
    runner_pass_us: float = 0.0
    runner_per_row_us: float = 0.0
    attention_plan_us: float = 0.0
    scheduler_per_sequence_us: float = 0.0
    expansion_per_token_us: float = 0.0
    output_per_token_us: float = 0.0
    plan_scan_us: float = 0.0
    tp_broadcast_us: float = 0.0
    ngram_base_us: float = NGRAM_BASE_US
    ngram_per_sequence_us: float = NGRAM_PER_SEQUENCE_US


@dataclass(frozen=True)
class CudaGraphs:
    """Which steps replay a captured CUDA graph.

    `sizes` are the captured batch sizes (`capture_unit = "sequences"`) or token counts (`"tokens"`);
    empty means every size is captured (no padding). `max_tokens` > 0 also leaves steps of more tokens
    uncaptured (vLLM's max_cudagraph_capture_size). A step pads up to the next captured size
    (`padding = "next_captured"`); one that is not captured runs `uncaptured` (eager launches, or
    piecewise graphs with attention launched eagerly between them).
    """

    enabled: bool = True
    capture_unit: Literal["sequences", "tokens"] = "sequences"
    sizes: tuple[int, ...] = ()
    max_tokens: int = 0
    padding: Literal["next_captured", "none"] = "next_captured"
    uncaptured: Literal["eager", "piecewise"] = "eager"


@dataclass(frozen=True)
class DrafterStyle:
    """How the engine runs the drafter: a chain verifies K + 1 tokens per sequence, a tree its
    `tree_draft_tokens` (with tree-masked attention); drafter passes in graph replay, eager, piecewise
    graphs (each drafter layer's attention launched eagerly between graph pieces) or like the target step
    (`target`); a tree's drafter passes run `tree_topk` candidates per sequence;
    `draft_vocab_size` > 0 is a reduced drafter LM head (EAGLE-3). The target scores the drafts in one
    pass of q tokens per sequence (`multi_token`), or by batch expansion: q one-token rows per sequence,
    each attending over the whole context (vLLM V0's scorer with CUDA graphs).

    `first_pass`: a round's first drafter pass runs one token per sequence like the others (`one_token`,
    the ideal engine), or over the positions the round just verified (`verified`: K + 1 per sequence for a
    chain, the tree's draft tokens), which puts the accepted tokens into the drafter's KV cache before it
    proposes — vLLM 0.33.0 `v1/spec_decode/llm_base_proposer.py` `propose` and SGLang 0.5.23
    `speculative/eagle_worker_v2.py` `_draft_extend_for_decode` both do so (`speculative.drafters`);
    `accepted`: over each sequence's accepted tokens padded to K + 1 positions, for a tree as for a chain
    (SGLang 0.5.2 spec v1's draft extend, captured at speculative_num_steps + 1 tokens per request:
    `speculative/eagle_draft_extend_cuda_graph_runner.py`).

    `draft_tp` / `head_tp`: the tensor parallelism a separate draft model / a hidden-state head (EAGLE,
    MTP) runs at on a multi-GPU layout: the target's (`target`, split like the target's attention), or
    unsplit on one of the target's GPUs while the others wait (`one`: vLLM 0.6.3 runs EAGLE only so).

    `pass_preparation`: how the proposer's K passes get their inputs. `device`: prepared on the device
    (each pass costs the host `draft_step_us`); `host_unless_tp1`: each pass's inputs are built on the
    host and its sampled tokens read back before the next (`runner_pass_us + runner_per_row_us × rows`,
    not hidden), unless the drafter runs at TP 1, when only the first pass is and the K − 1 others advance
    on the GPU (vLLM 0.6.3 `spec_decode/multi_step_worker.py` `sampler_output`).

    `bonus_rows`: every drafter pass also re-runs, for each sequence whose previous round accepted all K
    drafts, the position before its bonus token (which the drafter never saw) as an extra row: B·(1 + p)
    rows for a share p of such sequences (vLLM 0.6.3 `_expand_execute_model_request`).

    The SD round's own ops, counted from the engine's source (`engines.overheads.round_ops_s`):
    `round_eager_ops` device ops the round launches eagerly outside every captured graph (draft KV-slot
    assignment, tree building, the acceptance and KV-slot release after verification, the drafter graphs'
    input copies, the draft-extend inputs); `round_syncs` host-device synchronisations inside the round
    (`.item()`, `.tolist()`, boolean-mask indexing), each draining the device queue; `draft_step_ops` ops
    per drafter step after the first that select and expand the candidates (scores × top-k, gather,
    softmax, top-k), run in the drafter's launch mode (inside its graph when captured). 0: not counted
    (the ideal engine, and engines whose round these files do not count).

    A tree's attention-backend metadata (`engines.overheads.attention_metadata_s`), counted from the
    backend the engine picks for a tree (top-k > 1) on a model without MLA (SGLang 0.5.2 picks FlashInfer
    there): `tree_metadata_ops` device ops launched outside every graph per round (KV-index and
    mask-index builds, the copies into the graphs' buffers), `tree_metadata_syncs` device-to-host copies
    that drain the queue, and the backend's host-side `plan()` calls: `tree_metadata_plans` per round plus
    `tree_step_plans` per drafter step after the first; each plan costs the host `attention_plan_us` and
    launches one copy of its plan to the device, and each of the `tree_metadata_plans` (the prefill plans
    of the verification and the draft extend) walks 2B + 1 host elements of a B-sequence batch one at a
    time (`[host] plan_scan_us` each). 0: not counted."""

    shape: Literal["chain", "tree"] = "chain"
    tree_draft_tokens: int = 0
    tree_topk: int = 1  # tree branching: each drafter pass extends this many candidates per sequence
    launch: Literal["target", "graph", "eager", "piecewise"] = "target"
    draft_vocab_size: int = 0
    verify_mode: Literal["multi_token", "batch_expansion"] = "multi_token"
    first_pass: Literal["one_token", "verified", "accepted"] = "one_token"
    draft_tp: Literal["target", "one"] = "target"
    head_tp: Literal["target", "one"] = "target"
    pass_preparation: Literal["device", "host_unless_tp1"] = "device"
    bonus_rows: bool = False
    round_eager_ops: int = 0
    round_syncs: int = 0
    draft_step_ops: int = 0
    tree_metadata_ops: int = 0
    tree_metadata_syncs: int = 0
    tree_metadata_plans: int = 0
    tree_step_plans: int = 0


@dataclass(frozen=True)
class SamplerPasses:
    """Bytes the engine's sampler and acceptance move over full-vocabulary tensors beyond what the step
    plan prices (one fp32 read of the logits per row, `plan.head`), counted from the engine's source; each
    a count of tensor passes × their element size (bytes per row and vocabulary entry), so 0 for an engine
    whose greedy path is one argmax over the logits. `engines.overheads.sampler_bytes` and
    `acceptance_bytes` apply them; they run at the device's elementwise memory bandwidth (`breakdown` row
    `sampler`).

    Greedy (every request's temperature 0), and under sampling too:
    - `bytes_per_logit`: per row and vocabulary entry of every step and drafter pass, the sampler's own
      passes;
    - `sd_bytes_per_logit`: more per row and entry of every verification and drafter pass under SD
      (probabilities it keeps for the acceptance);
    - `draft_pass_bytes_per_logit`: more per row and draft-vocabulary entry of every drafter pass (the
      drafter's own candidate selection, e.g. a softmax and top-k over the draft logits);
    - `draft_bytes_per_logit`: per sequence, draft position and entry of a round: the draft probabilities'
      copies and the rejection sampler over them;
    - `verify_bytes_per_logit`: per sequence, verified position and entry of a round: the target
      probabilities' copies.
    Sampled (temperature > 0), added to the above:
    - `sampled_bytes_per_logit`: per row and entry of a decode step (fp32 copies, the temperature divide,
      softmax, the random draw);
    - `sampled_verify_bytes_per_logit`: per verified position and entry of an SD verification (the target
      probabilities the acceptance test reads);
    - `sampled_draft_pass_bytes_per_logit`: per row and draft-vocabulary entry of every drafter pass (0 when
      the engine drafts greedily whatever the requests' temperature);
    - `sampled_round_bytes_per_logit`: per sequence and entry of a round: resampling the rejected (or bonus)
      position from the target and draft rows;
    - `filter_bytes_per_logit`: per target row and entry when a top-k or top-p filter is set.
    `sources`: where each count was read (file and version), estimates labelled as such."""

    bytes_per_logit: float = 0.0
    sd_bytes_per_logit: float = 0.0
    draft_pass_bytes_per_logit: float = 0.0
    draft_bytes_per_logit: float = 0.0
    verify_bytes_per_logit: float = 0.0
    sampled_bytes_per_logit: float = 0.0
    sampled_verify_bytes_per_logit: float = 0.0
    sampled_draft_pass_bytes_per_logit: float = 0.0
    sampled_round_bytes_per_logit: float = 0.0
    filter_bytes_per_logit: float = 0.0
    sources: tuple[str, ...] = ()

    def bytes_fields(self) -> dict[str, float]:
        """The counts by name (every field but `sources`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}


@dataclass(frozen=True)
class SpeculativeAdmission:
    """How many sequences the engine's scheduler runs at once when SD is on (`[scheduler]`).

    `sd_max_running_requests`: the cap an SD server starts with when its max-running-requests is not
    given; 0 = no cap beyond the run's own batch. SGLang sets 48 for EAGLE / EAGLE-3 / NEXTN (0.5.23
    `srt/arg_groups/speculative_hook.py` `_handle_eagle_family`). Under the cap an SD run of batch B
    serves min(B, cap) sequences while the run without SD serves B: the speculative point's round runs
    min(B, cap) sequences, and `moesim serve`'s SD run admits at most the cap. A measured run that sets
    the limit itself overrides it (`max_running_requests` in `moesim/data/measured_runs.csv`)."""

    sd_max_running_requests: int = 0

    def sd_sequences(self, batch: int) -> int:
        """Sequences an SD round runs when `batch` are asked for."""
        cap = self.sd_max_running_requests
        return min(batch, cap) if cap else batch


@dataclass(frozen=True)
class EngineProvenance:
    """Where the profile's values came from: sources read (file and version), software, assumptions."""

    kind: Literal["ideal", "documented", "fitted"]
    engine: str
    sources: tuple[str, ...] = ()
    software: dict[str, str] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingEngineProfile:
    """What one serving engine adds to each step (see the module docstring)."""

    name: str
    description: str
    host: HostCosts
    graphs: CudaGraphs
    drafter: DrafterStyle
    provenance: EngineProvenance
    fitted: dict[str, float] = field(default_factory=dict)
    fit_quality: dict[str, dict[str, float]] = field(default_factory=dict)
    sampler: SamplerPasses = SamplerPasses()
    scheduler: SpeculativeAdmission = SpeculativeAdmission()

    @functools.cached_property
    def effective_host(self) -> HostCosts:
        """The host costs in force: documented defaults with fitted values applied over them."""
        return replace(self.host, **self.fitted)

    @property
    def is_ideal(self) -> bool:
        """True when the profile adds nothing to the kernel stream (today's simulator exactly)."""
        host = self.effective_host
        no_host = all(getattr(host, n) == 0.0 for n in HOST_PARAMETERS if n not in SCALING_PARAMETERS)
        graphs_as_given = self.graphs.enabled and not self.graphs.sizes and not self.graphs.max_tokens
        drafter_as_given = (
            self.drafter == DrafterStyle()
            and self.sampler == SamplerPasses()
            and self.scheduler == SpeculativeAdmission()
        )
        defaults_as_given = all(getattr(host, n) == getattr(HostCosts, n) for n in SCALING_PARAMETERS)
        return no_host and graphs_as_given and drafter_as_given and defaults_as_given

    def with_fitted(
        self, values: dict[str, float], quality: dict[str, dict[str, float]], **prov: Any
    ) -> ServingEngineProfile:
        """A copy carrying fitted host values and their quality (validated), provenance kind `fitted`."""
        provenance = replace(self.provenance, kind="fitted", **prov)
        out = replace(self, fitted={**self.fitted, **values}, fit_quality=quality, provenance=provenance)
        profile_from_dict(profile_to_dict(out), f"fitted profile {self.name}")
        return out


# --- TOML ---------------------------------------------------------------------------------------------------

_SECTIONS = (
    "name",
    "description",
    "host",
    "graphs",
    "drafter",
    "sampler",
    "scheduler",
    "provenance",
    "fitted",
    "fit_quality",
)


def profile_to_dict(p: ServingEngineProfile) -> dict[str, Any]:
    """The profile as TOML-ready data (the inverse of `profile_from_dict`)."""
    out: dict[str, Any] = {
        "name": p.name,
        "description": p.description,
        "host": {k: float(v) for k, v in asdict(p.host).items()},
        "graphs": {**asdict(p.graphs), "sizes": list(p.graphs.sizes)},
        "drafter": asdict(p.drafter),
        "sampler": {
            **{k: float(v) for k, v in p.sampler.bytes_fields().items()},
            "sources": list(p.sampler.sources),
        },
        "scheduler": asdict(p.scheduler),
        "provenance": {
            "kind": p.provenance.kind,
            "engine": p.provenance.engine,
            "sources": list(p.provenance.sources),
            "software": dict(p.provenance.software),
            "assumptions": list(p.provenance.assumptions),
        },
    }
    if p.fitted:
        out["fitted"] = {k: float(v) for k, v in p.fitted.items()}
    if p.fit_quality:
        out["fit_quality"] = {k: {m: float(v) for m, v in q.items()} for k, q in p.fit_quality.items()}
    return out


def _read_host(source: str, section: str, data: Any, defaults: dict[str, float]) -> dict[str, float]:
    table = ProfileTable(source, section, data, tuple(HOST_PARAMETERS))
    return {
        name: table.number(
            name, defaults.get(name, 0.0), minimum=spec.lower, strict=False, maximum=spec.upper
        )
        for name, spec in HOST_PARAMETERS.items()
        if table.has(name) or name in defaults
    }


def _read_graphs(source: str, data: Any) -> CudaGraphs:
    t = ProfileTable(source, "graphs", data, tuple(f.name for f in fields(CudaGraphs)))
    sizes = t.value("sizes", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes
    ):
        raise t.error(
            "sizes", f"is {sizes!r}, not an array of positive whole numbers", "e.g. sizes = [1, 2, 4, 8]"
        )
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        raise t.error("sizes", f"is {sizes!r}, not strictly increasing", "list the sizes in increasing order")
    return CudaGraphs(
        enabled=t.flag("enabled", True),
        capture_unit=t.choice("capture_unit", CAPTURE_UNITS, "sequences"),
        sizes=tuple(sizes),
        max_tokens=t.integer("max_tokens", 0),
        padding=t.choice("padding", PADDING_RULES, "next_captured"),
        uncaptured=t.choice("uncaptured", UNCAPTURED_MODES, "eager"),
    )


def _round_count(t: ProfileTable, key: str) -> int:
    """One of an SD round's op or sync counts: a whole number in [0, MAX_ROUND_OPS]."""
    value = t.integer(key, 0)
    if value > MAX_ROUND_OPS:
        raise t.error(key, f"is {value!r}, out of range", f"give a whole number <= {MAX_ROUND_OPS}")
    return value


def _read_drafter(source: str, data: Any) -> DrafterStyle:
    t = ProfileTable(source, "drafter", data, tuple(f.name for f in fields(DrafterStyle)))
    style = DrafterStyle(
        shape=t.choice("shape", DRAFT_SHAPES, "chain"),
        tree_draft_tokens=t.integer("tree_draft_tokens", 0),
        tree_topk=t.integer("tree_topk", 1, minimum=1),
        launch=t.choice("launch", DRAFTER_LAUNCHES, "target"),
        draft_vocab_size=t.integer("draft_vocab_size", 0),
        verify_mode=t.choice("verify_mode", VERIFY_MODES, "multi_token"),
        first_pass=t.choice("first_pass", FIRST_PASSES, "one_token"),
        draft_tp=t.choice("draft_tp", DRAFTER_TPS, "target"),
        head_tp=t.choice("head_tp", DRAFTER_TPS, "target"),
        pass_preparation=t.choice("pass_preparation", PASS_PREPARATIONS, "device"),
        bonus_rows=t.flag("bonus_rows", False),
        round_eager_ops=_round_count(t, "round_eager_ops"),
        round_syncs=_round_count(t, "round_syncs"),
        draft_step_ops=_round_count(t, "draft_step_ops"),
        tree_metadata_ops=_round_count(t, "tree_metadata_ops"),
        tree_metadata_syncs=_round_count(t, "tree_metadata_syncs"),
        tree_metadata_plans=_round_count(t, "tree_metadata_plans"),
        tree_step_plans=_round_count(t, "tree_step_plans"),
    )
    if style.shape == "tree" and style.tree_draft_tokens < 2:
        raise t.error(
            "tree_draft_tokens",
            f"is {style.tree_draft_tokens}, but a tree verifies at least 2 tokens per sequence",
            "set it, e.g. 16",
        )
    return style


def _read_sampler(source: str, data: Any) -> SamplerPasses:
    t = ProfileTable(source, "sampler", data, tuple(f.name for f in fields(SamplerPasses)))
    counts = {
        name: t.number(name, 0.0, minimum=0.0, strict=False, maximum=1e4)
        for name in SamplerPasses().bytes_fields()
    }
    return SamplerPasses(**counts, sources=t.strings("sources"))


def _read_scheduler(source: str, data: Any) -> SpeculativeAdmission:
    t = ProfileTable(source, "scheduler", data, tuple(f.name for f in fields(SpeculativeAdmission)))
    return SpeculativeAdmission(sd_max_running_requests=t.integer("sd_max_running_requests", 0))


def _engine_name(t: ProfileTable) -> str:
    engine = t.string("engine", "")
    if not engine.strip():
        raise t.error(
            "engine", "is missing or empty", "name the serving engine: vllm, sglang, trtllm or none"
        )
    return engine


def _read_provenance(source: str, data: Any) -> EngineProvenance:
    t = ProfileTable(source, "provenance", data, tuple(f.name for f in fields(EngineProvenance)))
    return EngineProvenance(
        kind=t.choice("kind", PROFILE_KINDS, "documented"),
        engine=_engine_name(t),
        sources=t.strings("sources"),
        software=t.versions("software"),
        assumptions=t.strings("assumptions"),
    )


def profile_from_dict(d: Any, source: str) -> ServingEngineProfile:
    """Build and validate a profile from TOML data; `source` prefixes every error."""
    d, name = profile_sections(source, d, _SECTIONS, ("provenance",), SUFFIX)
    description = d.get("description", "")
    if not isinstance(description, str):
        raise field_error(
            source, "description", f"is {description!r}, not a string", 'write description = "..."'
        )
    host = HostCosts(**_read_host(source, "host", d.get("host", {}), asdict(HostCosts())))
    fitted = _read_host(source, "fitted", d.get("fitted", {}), {})
    return ServingEngineProfile(
        name=name,
        description=description,
        host=host,
        graphs=_read_graphs(source, d.get("graphs", {})),
        drafter=_read_drafter(source, d.get("drafter", {})),
        sampler=_read_sampler(source, d.get("sampler", {})),
        scheduler=_read_scheduler(source, d.get("scheduler", {})),
        provenance=_read_provenance(source, d["provenance"]),
        fitted=fitted,
        fit_quality=read_fit_quality(source, d.get("fit_quality", {})),
    )


def render_profile(profile: ServingEngineProfile, header: str = "") -> str:
    """The profile as TOML text, validated first so an invalid profile is never written."""
    data = profile_to_dict(profile)
    profile_from_dict(data, f"serving engine {profile.name}")
    return dump_toml(data, header)


def save_profile(profile: ServingEngineProfile, path: str | os.PathLike[str], header: str = "") -> None:
    """Write the profile atomically (a reader never sees half a file)."""
    atomic_write_text(path, render_profile(profile, header))


def _bundled_dir() -> Any:
    return resources.files("moesim").joinpath("hardware_profiles", "engines")


def list_serving_engines() -> list[str]:
    """Names of the bundled serving-engine profiles (`ideal` first)."""
    names = sorted(e.name.removesuffix(SUFFIX) for e in _bundled_dir().iterdir() if e.name.endswith(SUFFIX))
    return sorted(names, key=lambda n: (n != IDEAL, n))


def _read(name_or_path: str) -> ServingEngineProfile:
    known = list_serving_engines()
    data, source = read_profile_file(
        "serving_engine",
        name_or_path,
        "serving-engine profile",
        known,
        _bundled_dir(),
        f"{', '.join(known)} (see `moesim engines`)",
        bundled_dir="engines/",
    )
    return profile_from_dict(data, source)


# A bundled profile is parsed once per process (profiles are frozen; every scenario resolves one).
_bundled = functools.cache(_read)


def load_serving_engine(name_or_path: str | ServingEngineProfile) -> ServingEngineProfile:
    """A bundled profile by name (`ideal`, `vllm`, `sglang`, `trtllm`) or any profile file by path."""
    if isinstance(name_or_path, ServingEngineProfile):
        return name_or_path
    name = name_or_path.strip().lower()
    return _bundled(name) if name in list_serving_engines() else _read(name_or_path)
