"""What a serving engine adds to one step, as small pure functions of its profile.

- Graph capture: a step of B sequences × q tokens replays a captured graph when its size (B, or B·q tokens,
  per `capture_unit`) is captured; it is padded up to the next captured size (`padded_sequences`); a step
  that is not captured runs `uncaptured` (eager, or piecewise: graph pieces with attention launched
  eagerly between them, `piecewise_step_s`).
- Host time per step: step_us + per_sequence_us·B + per_token_us·B·q, + tp_broadcast_us on a
  tensor-parallel group (`host_time_s`); with asynchronous
  scheduling a share f of it hides behind the device:
      step = device + host − f·min(host, device)          (`exposed_host_s`: host − f·min(host, device))
  so f = 0 is device + host, f = 1 is max(device, host), and host work never makes a step faster.
- Under SD the overlap is f·sd_overlap_kept (`overlap_fraction`): the scheduler may keep its overlap for SD
  rounds (SGLang spec-v2, vLLM V1 async scheduling) or run them synchronously (SGLang spec v1, vLLM V0);
  an SD round adds host bookkeeping per sequence (`sd_bookkeeping_s`), hidden by the same share: per
  sequence, per batch-expansion row and context token (the scorer's copies of the sequence's tokens),
  per emitted token (output processing an engine runs synchronously under SD); the scheduler's work per
  running sequence counts its sequences, not an SD round's expanded rows (`host_time_s`).
- Speculative rounds: a chain verifies K + 1 tokens per sequence, a tree its draft-token count
  (`verify_tokens`), in one pass or as one-token rows by batch expansion (`verify_shape`); a tree's drafter passes extend `tree_topk` candidates per sequence
  (`draft_sequences`); the first pass may run over the positions just verified (`first_draft_pass`); the
  proposer may re-run the position before each bonus token (`proposer_sequences`); each drafter pass costs
  the host `draft_step_us`, or, when the host prepares it (`host_prepared_passes`), `runner_pass_us` plus
  `runner_per_row_us` per row (`draft_host_s`); the round ends with the acceptance sync (`accept_sync_s`);
  n-gram drafting is host time (`ngram_draft_s`).
- The engine's sampler and acceptance may move full-vocabulary tensors beyond the plan's one read of the
  logits (`sampler_bytes` per decode step, verification or drafter pass, `acceptance_bytes` per round),
  greedy or sampled (`Sampling`: temperature > 0, with or without a top-k / top-p filter): vLLM V0's fp32
  softmax, log-softmax, probability copies and rejection sampler; vLLM V1's fp32 copy and temperature
  divide when sampling; SGLang's softmax, Gumbel draw and target-only tree sampling.
- An SD round's own ops (`round_ops_s`), counted from the engine's source: the ops it launches eagerly
  outside every captured graph and its host-device syncs, plus the drafter steps' candidate-selection
  ops in the drafter's launch mode:
      host   = eager ops × launch_eager + syncs × sync          eager ops = round ops (+ step ops, eager drafter)
      device = every op × kernel fixed latency (+ the graph gap of step ops inside the drafter's graph)
      round ops = max(host, device) − what the SD overlap hides of the host behind the round's device time
  A round that syncs runs these ops with the device idle behind them; an engine whose scheduler keeps its
  overlap under SD (sd_overlap_kept) hides a share f of them, as it hides its other host work.
- A tree's attention-backend metadata (`attention_metadata_s`), for a tree (top-k > 1) on a model
  without MLA, where the engine's backend rebuilds its metadata on the host each round: eager ops, syncs
  and plan() calls (each plan: attention_plan_us on the host and one launch of its copy to the device),
  priced as the round's own ops are; the prefill plans (`tree_metadata_plans`) also walk their batch's
  host query indptr and KV lengths in Python, 2B + 1 elements for the B sequences the graph runs:
      plans  = tree_metadata_plans + tree_step_plans × (K − 1)
      host   = (ops + plans) × launch_eager + syncs × sync + plans × attention_plan_us
               + tree_metadata_plans × (2B + 1) × plan_scan_us
      device = (ops + plans) × kernel fixed latency
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from moesim.errors import MoesimError
from moesim.simulator.engines.profile import CudaGraphs, DrafterStyle, ServingEngineProfile

StepLaunch = Literal["graph", "eager", "piecewise"]
US = 1e-6


def _capture_size(graphs: CudaGraphs, sequences: int, tokens_per_seq: int) -> int:
    return sequences if graphs.capture_unit == "sequences" else sequences * tokens_per_seq


def captured_size(graphs: CudaGraphs, sequences: int, tokens_per_seq: int) -> int | None:
    """The captured size a step of `sequences` × `tokens_per_seq` replays (its own size or the next one
    up), or None when it is not captured."""
    if not graphs.enabled:
        return None
    size = _capture_size(graphs, sequences, tokens_per_seq)
    if not graphs.sizes:
        chosen = size
    else:
        index = bisect.bisect_left(graphs.sizes, size)
        if index == len(graphs.sizes):
            return None
        chosen = graphs.sizes[index]
        if graphs.padding == "none" and chosen != size:
            return None
    tokens = chosen * (tokens_per_seq if graphs.capture_unit == "sequences" else 1)
    if graphs.max_tokens and tokens > graphs.max_tokens:
        return None
    return chosen


def launch_for(
    profile: ServingEngineProfile, sequences: int, tokens_per_seq: int, requested: str = "graph"
) -> StepLaunch:
    """How the step's kernels are launched: `requested = "eager"` runs everything eagerly; otherwise a
    graph when the step is captured, else the profile's `uncaptured` mode."""
    if requested == "eager":
        return "eager"
    if captured_size(profile.graphs, sequences, tokens_per_seq) is not None:
        return "graph"
    return profile.graphs.uncaptured


def padded_sequences(
    profile: ServingEngineProfile, sequences: int, tokens_per_seq: int, requested: str = "graph"
) -> int:
    """Sequences the step really runs (dummy rows added up to the captured size; unchanged when eager or
    not captured)."""
    if requested == "eager":
        return sequences
    chosen = captured_size(profile.graphs, sequences, tokens_per_seq)
    if chosen is None:
        return sequences
    if profile.graphs.capture_unit == "sequences":
        return chosen
    return math.ceil(chosen / tokens_per_seq)


def host_time_s(
    profile: ServingEngineProfile,
    sequences: int,
    tokens: int,
    tp: int = 1,
    scheduled: int | None = None,
) -> float:
    """Host seconds the engine spends on one step of `sequences` rows and `tokens` tokens, on a
    tensor-parallel group of `tp` ranks (above 1, the scheduler's broadcast to its ranks,
    `tp_broadcast_us`), of which the scheduler handles `scheduled` running sequences (default: one per
    row; an SD round's batch-expansion rows are rows, its sequences are scheduled)."""
    host = profile.effective_host
    broadcast_us = host.tp_broadcast_us if tp > 1 else 0.0
    running = sequences if scheduled is None else scheduled
    return (
        host.step_us
        + host.per_sequence_us * sequences
        + host.per_token_us * tokens
        + broadcast_us
        + host.scheduler_per_sequence_us * running
    ) * US


def overlap_fraction(profile: ServingEngineProfile, speculative: bool = False) -> float:
    """The share f of min(host, device) the engine hides: `overlap_fraction`, times `sd_overlap_kept`
    in an SD round (what the engine's scheduler keeps of its overlap while SD runs)."""
    host = profile.effective_host
    return host.overlap_fraction * (host.sd_overlap_kept if speculative else 1.0)


def exposed_host_s(
    profile: ServingEngineProfile, host_s: float, device_s: float, speculative: bool = False
) -> float:
    """The part of `host_s` the device does not hide: host − f·min(host, device) ≥ 0 (f of an SD round
    when `speculative`)."""
    if host_s < 0.0 or device_s < 0.0:
        raise MoesimError("host_s", f"times must be non-negative, got host {host_s}, device {device_s}")
    return host_s - overlap_fraction(profile, speculative) * min(host_s, device_s)


def expansion_copies_s(
    profile: ServingEngineProfile, sequences: int, draft_len: int, context_len: int
) -> float:
    """Host seconds a batch-expansion scorer spends copying each of `sequences` sequences' `context_len`
    tokens into its K + 1 = q expanded rows (`verify_shape`): expansion_per_token_us · S · q · context
    (0 for a scorer that verifies in one pass, or without a draft length)."""
    if draft_len < 1 or profile.drafter.verify_mode != "batch_expansion":
        return 0.0
    rows = sequences * verify_tokens(profile.drafter, draft_len)
    return profile.effective_host.expansion_per_token_us * rows * context_len * US


def output_processing_s(profile: ServingEngineProfile, sequences: int, tokens_per_step: float) -> float:
    """Host seconds of an SD round's synchronous output processing: output_per_token_us per token the
    round emits (`sequences` × `tokens_per_step`)."""
    return profile.effective_host.output_per_token_us * sequences * tokens_per_step * US


def sd_bookkeeping_s(
    profile: ServingEngineProfile,
    sequences: int,
    draft_len: int = 0,
    context_len: int = 0,
    tokens_per_step: float = 0.0,
) -> float:
    """Host seconds of an SD round's bookkeeping over `sequences` sequences: sd_per_sequence_us per
    sequence (acceptance, draft lists, extra outputs), batch expansion's row copies
    (`expansion_copies_s`) and the output processing of the emitted tokens (`output_processing_s`)."""
    return (
        profile.effective_host.sd_per_sequence_us * sequences * US
        + expansion_copies_s(profile, sequences, draft_len, context_len)
        + output_processing_s(profile, sequences, tokens_per_step)
    )


def piecewise_step_s(
    device_graph_s: float, layers: int, graph_launch_s: float, eager_launch_s: float
) -> float:
    """A step run as piecewise graphs: layers + 1 graph pieces with each layer's attention launched eagerly
    between them. The host issues pieces while the device runs earlier ones, so the step takes the longer
    of the graph-replayed device time and the host's issue time."""
    issue_s = (layers + 1) * graph_launch_s + layers * eager_launch_s
    return max(device_graph_s, issue_s)


def verify_tokens(style: DrafterStyle, draft_len: int) -> int:
    """Tokens per sequence one verification processes: K + 1 for a chain, the draft-token count for a tree."""
    if draft_len < 1:
        raise MoesimError("draft_len", f"must be ≥ 1, got {draft_len}")
    return style.tree_draft_tokens if style.shape == "tree" else draft_len + 1


def verify_shape(style: DrafterStyle, batch: int, draft_len: int) -> tuple[int, int]:
    """(rows, tokens per row) of the verification step: B × q in one pass, or B·q one-token rows when the
    engine scores by batch expansion."""
    q = verify_tokens(style, draft_len)
    return (batch * q, 1) if style.verify_mode == "batch_expansion" else (batch, q)


def draft_sequences(style: DrafterStyle, sequences: int) -> int:
    """Rows one drafter pass runs: each sequence's `tree_topk` candidates for a tree, one for a chain."""
    return sequences * (style.tree_topk if style.shape == "tree" else 1)


def proposer_sequences(style: DrafterStyle, sequences: int, all_accepted_share: float = 0.0) -> int:
    """Sequences every drafter pass of a round runs for: `sequences`, plus, when the engine re-runs the
    position before a bonus token (`bonus_rows`), one more row for each sequence whose previous round
    accepted all K drafts (`all_accepted_share` of them, to the nearest whole row)."""
    if not 0.0 <= all_accepted_share <= 1.0:
        raise MoesimError("all_accepted_share", f"must be a share in [0, 1], got {all_accepted_share}")
    return sequences + (round(sequences * all_accepted_share) if style.bonus_rows else 0)


def host_prepared_passes(style: DrafterStyle, draft_len: int, drafter_tp: int) -> int:
    """How many of a round's K drafter passes the host prepares and reads back (`pass_preparation`): none
    when the device prepares them; with `host_unless_tp1`, every pass of a drafter split over TP > 1
    GPUs, only the first of an unsplit one (the K − 1 others advance on the GPU)."""
    if style.pass_preparation == "device":
        return 0
    return 1 if drafter_tp == 1 else draft_len


def first_draft_pass(style: DrafterStyle, sequences: int, draft_len: int) -> tuple[int, int]:
    """(rows, tokens per row) of a round's first drafter pass: the K + 1 (chain) or tree positions just
    verified per sequence when the engine's proposer runs over them (`first_pass = "verified"`), the
    accepted tokens padded to K + 1 positions per sequence, tree or chain (`"accepted"`), else one token
    per drafted row like every later pass."""
    if style.first_pass == "verified":
        return sequences, verify_tokens(style, draft_len)
    if style.first_pass == "accepted":
        return sequences, draft_len + 1
    return draft_sequences(style, sequences), 1


def drafter_launch(style: DrafterStyle, target_launch: str) -> str:
    """Launch mode of the drafter's passes: the style's own, or the target step's (piecewise counts as graph)."""
    if style.launch != "target":
        return style.launch
    return "eager" if target_launch == "eager" else "graph"


def draft_host_s(profile: ServingEngineProfile, draft_len: int, rows: int = 0, drafter_tp: int = 1) -> float:
    """Host seconds the proposer spends over the K drafter passes of one round of `rows` rows each on a
    drafter at `drafter_tp`: `runner_pass_us + runner_per_row_us × rows` per host-prepared pass
    (`host_prepared_passes`), `draft_step_us` per other pass."""
    host = profile.effective_host
    prepared = host_prepared_passes(profile.drafter, draft_len, drafter_tp)
    per_prepared_us = host.runner_pass_us + host.runner_per_row_us * rows
    return ((draft_len - prepared) * host.draft_step_us + prepared * per_prepared_us) * US


def accept_sync_s(profile: ServingEngineProfile, device_s: float = 0.0) -> float:
    """Seconds per SD round to learn how many tokens were accepted before the next round, less what the
    SD round's overlap hides behind the round's `device_s` (an overlap scheduler resolves the accepted
    counts while the next round is already queued)."""
    return exposed_host_s(profile, profile.effective_host.accept_sync_us * US, device_s, speculative=True)


@dataclass(frozen=True)
class Sampling:
    """How the requests sample their next token: `temperature` 0 is greedy (an argmax; top-k and top-p are
    then not consulted); above 0 the engine samples, after keeping the `top_k` most likely tokens (0: all)
    and the smallest set whose probability reaches `top_p` (1: all) when either filter is set."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def sampled(self) -> bool:
        """True when the engine samples rather than taking the argmax."""
        return self.temperature > 0.0

    @property
    def filtered(self) -> bool:
        """True when a sampled request also filters its distribution by top-k or top-p."""
        return self.sampled and (self.top_k > 0 or self.top_p < 1.0)

    def describe(self) -> str:
        if not self.sampled:
            return "greedy"
        filters = ([f"top-k {self.top_k}"] if self.top_k > 0 else []) + (
            [f"top-p {self.top_p:g}"] if self.top_p < 1.0 else []
        )
        return f"sampled at temperature {self.temperature:g}" + (f", {', '.join(filters)}" if filters else "")


GREEDY = Sampling()
SamplerRows = Literal["decode", "verify", "draft"]


def sampler_bytes(
    profile: ServingEngineProfile,
    rows: int,
    vocab: int,
    kind: SamplerRows = "decode",
    sampling: Sampling = GREEDY,
) -> float:
    """Bytes the engine's sampler moves beyond the step plan's one read of the logits, for `rows` rows over
    `vocab` entries of a decode step, an SD verification or a drafter pass (`kind`), per
    `profile.SamplerPasses`: `bytes_per_logit` per row and entry, plus `sd_bytes_per_logit` under SD (and
    `draft_pass_bytes_per_logit` in a drafter pass); when `sampling` samples, `sampled_bytes_per_logit` (a
    decode step), `sampled_verify_bytes_per_logit` (a verification) or `sampled_draft_pass_bytes_per_logit`
    (a drafter pass), and on the target's rows `filter_bytes_per_logit` when it filters by top-k / top-p."""
    passes = profile.sampler
    per_logit = passes.bytes_per_logit
    if kind != "decode":
        per_logit += passes.sd_bytes_per_logit
    if kind == "draft":
        per_logit += passes.draft_pass_bytes_per_logit
    if sampling.sampled:
        per_logit += {
            "decode": passes.sampled_bytes_per_logit,
            "verify": passes.sampled_verify_bytes_per_logit,
            "draft": passes.sampled_draft_pass_bytes_per_logit,
        }[kind]
        if sampling.filtered and kind != "draft":
            per_logit += passes.filter_bytes_per_logit
    return rows * vocab * per_logit


def acceptance_bytes(
    profile: ServingEngineProfile, sequences: int, draft_len: int, vocab: int, sampling: Sampling = GREEDY
) -> float:
    """Bytes of one round's probability copies and rejection sampling over `sequences` sequences:
    `draft_bytes_per_logit` per draft position and entry, `verify_bytes_per_logit` per verified position
    (`verify_tokens`) and entry, and when `sampling` samples `sampled_round_bytes_per_logit` per sequence
    and entry (the rejected or bonus position's resampling) (`profile.SamplerPasses`)."""
    passes = profile.sampler
    verified = verify_tokens(profile.drafter, draft_len)
    per_sequence = draft_len * passes.draft_bytes_per_logit + verified * passes.verify_bytes_per_logit
    if sampling.sampled:
        per_sequence += passes.sampled_round_bytes_per_logit
    return sequences * vocab * per_sequence


@dataclass(frozen=True)
class LaunchCosts:
    """The hardware's launch costs the engine terms use (seconds): a piecewise-graph step's graph launch
    per piece and eager attention launch per layer, and for an SD round's own ops an eager launch, a
    host-device sync, a tiny kernel's device time and the gap between kernels in graph replay; and what the
    engine's own sampler passes run over (`sampler_bytes`, `acceptance_bytes`): the target's and the
    drafter's vocabularies, at the device's elementwise memory bandwidth (bytes per second), for the
    requests' `sampling`; `mla`: the target's attention is MLA (the engine's attention backend, so its
    metadata, differs); `tp`: the target's tensor-parallel ranks (the scheduler's broadcast to them,
    `host_time_s`); `context_len`: cached tokens per sequence (what the host copies per batch-expansion
    row, `sd_bookkeeping_s`)."""

    layers: int
    graph_launch_s: float
    eager_launch_s: float
    sync_s: float = 0.0
    kernel_s: float = 0.0
    graph_gap_s: float = 0.0
    vocab: int = 0
    draft_vocab: int = 0
    elementwise_bytes_per_s: float = math.inf
    sampling: Sampling = GREEDY
    mla: bool = False
    tp: int = 1
    context_len: int = 0

    def bytes_s(self, nbytes: float) -> float:
        """Seconds of `nbytes` of elementwise memory traffic."""
        return nbytes / self.elementwise_bytes_per_s


def round_ops_s(
    profile: ServingEngineProfile,
    draft_len: int,
    drafter_launch_mode: str,
    costs: LaunchCosts,
    device_s: float = 0.0,
) -> float:
    """Seconds an SD round of K = `draft_len` spends on its own ops (module docstring): `round_eager_ops`
    eager ops and `round_syncs` syncs, and `draft_step_ops` per drafter step after the first in the
    drafter's launch mode (`drafter_launch_mode`: eager, or inside its graph). `device_s`: the round's
    device time, behind which the SD overlap may hide the host part."""
    style = profile.drafter
    step_ops = style.draft_step_ops * max(0, draft_len - 1)
    eager_ops = style.round_eager_ops + (step_ops if drafter_launch_mode == "eager" else 0)
    graph_ops = step_ops if drafter_launch_mode != "eager" else 0
    host_s = eager_ops * costs.eager_launch_s + style.round_syncs * costs.sync_s
    device_ops_s = (eager_ops + graph_ops) * costs.kernel_s + graph_ops * costs.graph_gap_s
    return _ops_s(profile, host_s, device_ops_s, device_s)


def _ops_s(profile: ServingEngineProfile, host_s: float, device_ops_s: float, device_s: float) -> float:
    """Ops whose host issue takes `host_s` and whose device run takes `device_ops_s`: the longer of the
    two, less what the SD overlap hides of the host behind the round's `device_s`."""
    if host_s <= device_ops_s:
        return device_ops_s
    return device_ops_s + exposed_host_s(profile, host_s - device_ops_s, device_s, speculative=True)


def metadata_counts(style: DrafterStyle, draft_len: int, mla: bool = False) -> tuple[int, int, int]:
    """(eager ops, syncs, plan calls) of one round's attention-backend metadata for a tree of top-k > 1 on
    a model without MLA (module docstring); (0, 0, 0) for a chain, a top-1 tree or an MLA model."""
    if style.shape != "tree" or style.tree_topk < 2 or mla:
        return 0, 0, 0
    plans = style.tree_metadata_plans + style.tree_step_plans * max(0, draft_len - 1)
    return style.tree_metadata_ops, style.tree_metadata_syncs, plans


def plan_scan_elements(style: DrafterStyle, sequences: int) -> int:
    """Host-tensor elements one round's prefill plans walk one at a time for a batch of `sequences` (as the
    graph runs it, padded): 2B + 1 per plan (flashinfer 0.3.1 prefill.py `plan`: `max(qo_indptr_host)`
    over B + 1 entries, `max(kv_lens_arr_host)` over B), times `tree_metadata_plans`."""
    if sequences < 0:
        raise MoesimError("sequences", f"must be ≥ 0, got {sequences}")
    return style.tree_metadata_plans * (2 * sequences + 1) if sequences else 0


def attention_metadata_s(
    profile: ServingEngineProfile,
    draft_len: int,
    costs: LaunchCosts,
    device_s: float = 0.0,
    sequences: int = 0,
) -> float:
    """Seconds an SD round of K = `draft_len` over `sequences` sequences (as the graphs run them, padded;
    0: the per-sequence scan not counted) spends rebuilding a tree's attention-backend metadata outside
    its graphs (`metadata_counts`, `plan_scan_elements`; module docstring), less what the SD overlap hides
    behind `device_s`."""
    ops, syncs, plans = metadata_counts(profile.drafter, draft_len, costs.mla)
    launched = ops + plans
    host = profile.effective_host
    scanned = plan_scan_elements(profile.drafter, sequences) if plans else 0
    host_s = (
        launched * costs.eager_launch_s
        + syncs * costs.sync_s
        + plans * host.attention_plan_us * US
        + scanned * host.plan_scan_us * US
    )
    return _ops_s(profile, host_s, launched * costs.kernel_s, device_s)


def ngram_draft_s(profile: ServingEngineProfile, sequences: int) -> float:
    """Seconds of n-gram (prompt lookup) drafting on the host per round."""
    host = profile.effective_host
    return (host.ngram_base_us + host.ngram_per_sequence_us * sequences) * US


__all__ = [
    "GREEDY",
    "LaunchCosts",
    "SamplerRows",
    "Sampling",
    "StepLaunch",
    "accept_sync_s",
    "acceptance_bytes",
    "attention_metadata_s",
    "captured_size",
    "draft_host_s",
    "draft_sequences",
    "drafter_launch",
    "expansion_copies_s",
    "exposed_host_s",
    "first_draft_pass",
    "host_prepared_passes",
    "host_time_s",
    "launch_for",
    "metadata_counts",
    "ngram_draft_s",
    "output_processing_s",
    "overlap_fraction",
    "padded_sequences",
    "piecewise_step_s",
    "plan_scan_elements",
    "proposer_sequences",
    "round_ops_s",
    "sampler_bytes",
    "sd_bookkeeping_s",
    "verify_shape",
    "verify_tokens",
]
