"""The speculative point: decode, draft, verify → the SD speedup of one (batch, draft length), written once,
under the scenario's serving engine (`simulator/engines`).

    point = speculative_point(resolved, timer, draft_len)
    decode  = device(B', 1) + exposed host          B' = B padded up to the engine's next captured size
    verify  = device(B', q) + exposed host          q = K + 1 (chain) or a tree's draft tokens;
                                                    batch expansion: B·q rows of one token; host includes
                                                    the round's SD bookkeeping, hidden by the SD overlap
    draft   = K drafter passes in the drafter's launch mode + their host work: K·draft_step_us, or per pass
              the host prepares runner_pass_us + runner_per_row_us·rows (n-gram: host time); the first
              pass may run over the q verified positions per sequence (`speculative.drafters`); the
              drafter at the target's TP or at TP 1 (`draft_tp`, `head_tp`); with `bonus_rows` every pass
              also runs the position before each bonus token of the last round (B·α^K more rows)
    point.speedup == tokens_per_step × decode ÷ (draft + verify + acceptance sync) × S ÷ B
                                                    S = min(B, the engine's SD cap on running requests):
                                                    the round runs S sequences, the decode step B

Each step's launch is the engine's for its size: a graph when captured, else eager or piecewise. The
exposed host time is host − f·min(host, device) (`engines.overheads`). With the `ideal` serving engine
every added term is exactly 0 and B' = B, so the point is the kernel stream's own.

`simulate` runs it on the event timer, `sweep` on the fast path; both go through this module, so a point
means the same in both. A step on a multi-GPU layout is the slowest rank's, collectives included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from moesim.simulator.engines import overheads as ov
from moesim.simulator.engines.overheads import LaunchCosts
from moesim.simulator.engines.profile import DrafterStyle, ServingEngineProfile
from moesim.simulator.execution.launch import LaunchParams
from moesim.simulator.execution.timer import StepCall, StepTimer, TimedStep, parallel_call
from moesim.simulator.plan.layout import ParallelLayout
from moesim.simulator.plan.parallel import ParallelStep, build_parallel_plan, prepare_parallel_plans
from moesim.simulator.plan.step import StepPlan
from moesim.simulator.plan.styles import build_plan
from moesim.simulator.scenario import ResolvedScenario
from moesim.simulator.speculative.acceptance import all_accepted_share, expected_tokens
from moesim.simulator.speculative.drafters import (
    Drafter,
    DraftPassMemo,
    draft_pass_s,
    draft_time_s,
    drafter_tp,
    handoff_s,
)


@dataclass(frozen=True)
class TimedPlan:
    """One step: its plan (the slowest rank's on a multi-GPU layout), its timing, and the parallel step."""

    plan: StepPlan
    timing: TimedStep
    parallel: ParallelStep | None = None

    @property
    def step_s(self) -> float:
        return self.timing.step_s


StepTimes = Callable[[int, int, str], TimedPlan]  # (rows, tokens per row, "graph"|"eager") -> the step


class DraftCost(NamedTuple):
    """A round's drafting on the device: its seconds, of them the first pass over the verified positions,
    and the tensor parallelism the drafter ran at."""

    total_s: float
    first_pass_s: float
    tp: int = 1


DraftTimes = Callable[[DrafterStyle, int, int, str], DraftCost]  # (style, sequences, K, launch) -> drafting


@dataclass(frozen=True)
class EngineStep:
    """One forward step as the serving engine runs it: the kernel stream at the batch as run, plus host."""

    timed: TimedPlan  # the kernel stream at `rows_run` rows, with its launch and sync
    rows: int  # the rows asked for (sequences, or B·q under batch expansion)
    rows_run: int  # the rows run: padded up to the captured size
    tokens_per_row: int
    launch: str  # graph | eager | piecewise
    device_s: float  # the kernel stream's time (piecewise: its issue-bound time)
    padding_s: float  # of device_s, what the dummy rows up to the captured size add
    host_s: float  # the engine's host work for the step
    engine_host_s: float  # the part of it the device does not hide
    sd_host_s: float = 0.0  # of host_s, an SD round's bookkeeping (`ov.sd_bookkeeping_s`)
    sd_expansion_s: float = 0.0  # of sd_host_s, batch expansion's copies of the sequences' tokens
    sd_output_s: float = 0.0  # of sd_host_s, the synchronous output processing of the emitted tokens
    sampler_s: float = 0.0  # the engine's sampler (and a verification's acceptance) passes beyond the plan
    round_ops_s: float = 0.0  # an SD round's own ops outside its graphs and its syncs (`ov.round_ops_s`)
    metadata_s: float = 0.0  # a tree's attention metadata outside its graphs (`ov.attention_metadata_s`)

    @property
    def step_s(self) -> float:
        return self.device_s + self.sampler_s + self.engine_host_s + self.round_ops_s + self.metadata_s

    @property
    def plan(self) -> StepPlan:
        return self.timed.plan

    @property
    def parallel(self) -> ParallelStep | None:
        return self.timed.parallel

    def breakdown_s(self) -> dict[str, float]:
        """Where the step's time went: the kernel categories (scaled to the unpadded share of the device
        time when the engine pads or runs piecewise), `padding`, `engine_host`, `sd_bookkeeping`,
        `sampler`, `sd_round_ops` and `attention_metadata`; sums to `step_s`."""
        out = dict(self.timed.timing.breakdown_s)
        if self.padding_s > 0.0 or self.device_s != self.timed.step_s:
            total = sum(out.values())
            scale = (self.device_s - self.padding_s) / total if total > 0 else 0.0
            out = {name: seconds * scale for name, seconds in out.items()}
        out["padding"] = self.padding_s
        sd_share = self.sd_host_s / self.host_s if self.host_s > 0.0 else 0.0
        out["engine_host"] = self.engine_host_s * (1.0 - sd_share)
        out["sd_bookkeeping"] = self.engine_host_s * sd_share
        out["sampler"] = self.sampler_s
        out["sd_round_ops"] = self.round_ops_s
        out["attention_metadata"] = self.metadata_s
        return out

    def engine_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "rows_run": self.rows_run,
            "tokens_per_row": self.tokens_per_row,
            "launch": self.launch,
            "device_s": self.device_s,
            "padding_s": self.padding_s,
            "host_s": self.host_s,
            "engine_host_s": self.engine_host_s,
            "sd_host_s": self.sd_host_s,
            "sd_expansion_s": self.sd_expansion_s,
            "sd_output_s": self.sd_output_s,
            "sampler_s": self.sampler_s,
            "round_ops_s": self.round_ops_s,
            "metadata_s": self.metadata_s,
            "step_s": self.step_s,
        }


@dataclass(frozen=True)
class SpeculativePoint:
    """Decode and verification steps, the drafter's time, expected tokens and the speedup they imply."""

    draft_len: int
    decode: EngineStep
    verify: EngineStep
    draft_s: float  # drafter device time (its own launch mode) + its host work
    draft_host_s: float
    accept_sync_s: float
    tokens_per_step: float
    draft_first_pass_s: float = 0.0  # of draft_s: the first pass, over the q verified positions per sequence
    draft_rows: int = (
        0  # rows of each drafter pass (the batch, plus re-run bonus positions under `bonus_rows`)
    )
    draft_tp: int = 1  # tensor parallelism the drafter ran at
    host_prepared_passes: int = 0  # of the K drafter passes, those the host prepared and read back
    batch: int = 0  # sequences of the decode step (0: as many as the round runs)
    sd_sequences: int = 0  # sequences the round runs: the batch, or the engine's SD cap below it

    @property
    def round_s(self) -> float:
        """One SD round (of `sd_sequences`): draft, verify, learn how many tokens were accepted."""
        return self.draft_s + self.verify.step_s + self.accept_sync_s

    @property
    def served_share(self) -> float:
        """Sequences the SD run serves per sequence the run without SD serves (1 below the engine's cap)."""
        return self.sd_sequences / self.batch if self.batch else 1.0

    @property
    def speedup(self) -> float:
        """Tokens per second with SD over tokens per second without, at the same asked-for batch."""
        return self.tokens_per_step * self.decode.step_s / self.round_s * self.served_share

    @property
    def verify_over_decode(self) -> float:
        return self.verify.step_s / self.decode.step_s

    @property
    def step_ratio(self) -> float:
        """Cost of one SD round in decode steps per sequence served (what measured runs call the step
        ratio, tokens per step ÷ speedup)."""
        return self.round_s / self.decode.step_s / self.served_share


def time_step(
    resolved: ResolvedScenario,
    timer: StepTimer,
    tokens_per_seq: int,
    *,
    rows: int | None = None,
    launch: str | None = None,
) -> TimedPlan:
    """One kernel-stream step of `rows` (default: the scenario's batch) × `tokens_per_seq` tokens, launched
    `launch` (default: the scenario's)."""
    r = resolved
    key = (r.batch if rows is None else rows, tokens_per_seq, r.launch if launch is None else launch)
    return time_steps(r, timer, [key])[key]


def time_steps(
    resolved: ResolvedScenario, timer: StepTimer, keys: Iterable[tuple[int, int, str]]
) -> dict[tuple[int, int, str], TimedPlan]:
    """`time_step` of every (rows, tokens per row, launch) in `keys`, timed in one `timer.steps` call (the
    fast path costs plans of one structure together)."""
    planned = plan_steps(resolved, timer, keys)
    return timed_steps(planned, timer.steps([step.call for step in planned]))


class PlannedStep(NamedTuple):
    """A step planned but not yet timed: its (rows, tokens per row, launch), its plan (the slowest rank's),
    the parallel step on a multi-GPU layout, and the call that times it."""

    key: tuple[int, int, str]
    plan: StepPlan
    parallel: ParallelStep | None
    call: StepCall


def plan_steps(
    resolved: ResolvedScenario, timer: StepTimer, keys: Iterable[tuple[int, int, str]]
) -> list[PlannedStep]:
    """The plans of `time_steps`' steps, each with its `StepCall`: a sweep times the steps of many models in
    one `timer.steps` call (`timed_steps` pairs the timings back)."""
    r = resolved
    planned = []
    for key in dict.fromkeys(keys):
        rows, tokens_per_seq, launch = key
        if r.layout.is_single:
            plan = build_plan(
                r.model, rows, tokens_per_seq, r.context_len, r.kernel_style, r.routing, r.hardware
            )
            planned.append(PlannedStep(key, plan, None, StepCall(plan, launch)))
        else:
            step = build_parallel_plan(
                r.model, rows, tokens_per_seq, r.layout, r.hardware, r.context_len, r.kernel_style, r.routing
            )
            planned.append(PlannedStep(key, step.plan, step, parallel_call(timer, step, launch)))
    return planned


def timed_steps(
    planned: Sequence[PlannedStep], timings: Sequence[TimedStep]
) -> dict[tuple[int, int, str], TimedPlan]:
    """Planned steps with their timings (in the same order), by (rows, tokens per row, launch)."""
    return {
        step.key: TimedPlan(step.plan, timing, step.parallel)
        for step, timing in zip(planned, timings, strict=True)
    }


def scenario_timers(
    resolved: ResolvedScenario,
    timer: StepTimer,
    steps: dict[tuple[int, int, str], TimedPlan] | None = None,
    pass_memo: DraftPassMemo | None = None,
) -> tuple[StepTimes, DraftTimes, LaunchCosts]:
    """The scenario's step and drafter times at any (rows, tokens, launch), memoised: a sweep builds them
    once per (model, batch) and every draft length reuses the decode step and the drafter pass. `steps`
    holds steps timed already (`time_steps` of the point's `point_step_keys`); `pass_memo` shares drafter
    passes with the sweep's other models."""
    r = resolved
    steps = {} if steps is None else steps
    passes: dict[tuple[int, int, str, str], float] = {}
    # an EAGLE head with a reduced vocabulary (EAGLE-3's draft vocabulary) has a smaller LM head
    draft_vocab = r.serving_engine.drafter.draft_vocab_size
    target = r.drafter.pass_target(r.model, draft_vocab)

    def step_times(rows: int, tokens_per_seq: int, launch: str) -> TimedPlan:
        key = (rows, tokens_per_seq, launch)
        if key not in steps:
            steps[key] = time_step(r, timer, tokens_per_seq, rows=rows, launch=launch)
        return steps[key]

    def pass_s(rows: int, tokens_per_seq: int, launch: str, tp_rule: str) -> float:
        key = (rows, tokens_per_seq, launch, tp_rule)
        if key not in passes:
            passes[key] = draft_pass_s(
                r.drafter,
                target,
                r.layout if tp_rule == "target" else ParallelLayout(draft_on=r.layout.draft_on),
                rows,
                r.context_len,
                r.kernel_style,
                r.routing,
                timer,
                launch,
                tokens_per_seq=tokens_per_seq,
                memo=pass_memo,
            )
        return passes[key]

    em = r.hardware.empirical
    draft_model = r.drafter.model(target) if r.drafter.runs_on_device else None
    launch_costs = LaunchCosts(
        r.model.n_layers,
        em.graph_launch_us * 1e-6,
        em.launch_eager_us * 1e-6,
        sync_s=em.sync_us * 1e-6,
        kernel_s=em.kernel_fixed_latency_us * 1e-6,
        graph_gap_s=em.launch_graph_gap_us * 1e-6,
        vocab=r.model.vocab,
        draft_vocab=draft_model.vocab if draft_model is not None else 0,
        elementwise_bytes_per_s=r.hardware.memory_bandwidth_bytes_per_s * em.elementwise_bandwidth_fraction,
        sampling=r.scenario.sampling,
        mla=r.model.attention.is_mla,
        tp=r.layout.tp,
        context_len=r.context_len,
    )
    draft_layers = draft_model.n_layers if draft_model is not None else 0

    def one_pass_s(rows: int, tokens_per_seq: int, launch: str, tp_rule: str) -> float:
        """A drafter pass in `launch`; piecewise: graph pieces with each drafter layer's attention launched
        eagerly between them (`ov.piecewise_step_s`)."""
        if launch != "piecewise":
            return pass_s(rows, tokens_per_seq, launch, tp_rule)
        device_s = pass_s(rows, tokens_per_seq, "graph", tp_rule)
        return ov.piecewise_step_s(
            device_s, draft_layers, launch_costs.graph_launch_s, launch_costs.eager_launch_s
        )

    def draft_times(style: DrafterStyle, sequences: int, draft_len: int, launch: str) -> DraftCost:
        rows = ov.draft_sequences(style, sequences)
        timed = "graph" if launch == "piecewise" else launch
        tp_rule = style.head_tp if r.drafter.reads_hidden_states else style.draft_tp
        first = one_pass_s(*ov.first_draft_pass(style, sequences, draft_len), launch, tp_rule)
        total = draft_time_s(
            r.drafter,
            rows,
            draft_len,
            step_times(rows, 1, timed).step_s if r.drafter.needs_decode_step else 0.0,  # F × decode
            first,
            one_pass_s(rows, 1, launch, tp_rule),
            LaunchParams.from_hardware(r.hardware, timed).overhead_s,
            handoff_s(r.drafter, r.model, timer, r.layout, rows, draft_len),
        )
        tp = drafter_tp(r.drafter, target, r.layout) if tp_rule == "target" else 1
        return DraftCost(total, first, tp)

    return step_times, draft_times, launch_costs


def _engine_launch(
    profile: ServingEngineProfile, rows: int, tokens_per_seq: int, requested_launch: str
) -> tuple[str, int, str]:
    """(launch as run, rows run, launch its kernel stream is timed in) of a step under `profile`."""
    launch = ov.launch_for(profile, rows, tokens_per_seq, requested_launch)
    rows_run = ov.padded_sequences(profile, rows, tokens_per_seq, requested_launch)
    return launch, rows_run, "graph" if launch == "piecewise" else launch


def engine_step_keys(
    profile: ServingEngineProfile, rows: int, tokens_per_seq: int, requested_launch: str
) -> list[tuple[int, int, str]]:
    """The (rows, tokens, launch) kernel-stream steps `engine_step` asks for: the step as run, and the
    unpadded one when the engine pads."""
    _, rows_run, timed_launch = _engine_launch(profile, rows, tokens_per_seq, requested_launch)
    return [(rows_run, tokens_per_seq, timed_launch), (rows, tokens_per_seq, timed_launch)][
        : 1 if rows_run == rows else 2
    ]


def point_step_keys(
    profile: ServingEngineProfile, batch: int, draft_lens: Iterable[int], requested_launch: str
) -> list[tuple[int, int, str]]:
    """The kernel-stream steps (rows, tokens, launch) of `engine_point` at `batch` over `draft_lens`
    (decode and verification; the drafter's passes are timed as asked)."""
    keys = engine_step_keys(profile, batch, 1, requested_launch)
    for k in draft_lens:
        rows, tokens_per_row = ov.verify_shape(profile.drafter, batch, k)
        keys += engine_step_keys(profile, rows, tokens_per_row, requested_launch)
    return list(dict.fromkeys(keys))


def engine_step(
    profile: ServingEngineProfile,
    rows: int,
    tokens_per_seq: int,
    requested_launch: str,
    steps: StepTimes,
    launch_costs: LaunchCosts,
    sd_sequences: int = 0,
    round_ops_s: float = 0.0,
    acceptance_bytes: float = 0.0,
    draft_len: int = 0,
    tokens_per_step: float = 0.0,
) -> EngineStep:
    """A step of `rows` × `tokens_per_seq` as the serving engine runs it (see the module docstring); the
    verification of an SD round over `sd_sequences` sequences adds their bookkeeping, runs under the
    engine's SD overlap and carries the round's own ops (`round_ops_s`, from `ov.round_ops_s`); its
    bookkeeping counts the round's `draft_len` and `tokens_per_step` (`ov.sd_bookkeeping_s`); the
    engine's sampler passes (and a verification's `acceptance_bytes`) run after the step's kernels."""
    launch, rows_run, timed_launch = _engine_launch(profile, rows, tokens_per_seq, requested_launch)
    timed = steps(rows_run, tokens_per_seq, timed_launch)
    device_s = timed.step_s
    if launch == "piecewise":
        device_s = ov.piecewise_step_s(
            device_s, launch_costs.layers, launch_costs.graph_launch_s, launch_costs.eager_launch_s
        )
    padding_s = device_s - steps(rows, tokens_per_seq, timed_launch).step_s if rows_run != rows else 0.0
    sd_host_s = ov.sd_bookkeeping_s(
        profile, sd_sequences, draft_len, launch_costs.context_len, tokens_per_step
    )
    scheduled = sd_sequences if sd_sequences > 0 else rows
    host_s = ov.host_time_s(profile, rows, rows * tokens_per_seq, launch_costs.tp, scheduled) + sd_host_s
    speculative = sd_sequences > 0
    return EngineStep(
        timed=timed,
        rows=rows,
        rows_run=rows_run,
        tokens_per_row=tokens_per_seq,
        launch=launch,
        device_s=device_s,
        padding_s=max(0.0, padding_s),
        host_s=host_s,
        engine_host_s=ov.exposed_host_s(profile, host_s, device_s, speculative),
        sd_host_s=sd_host_s,
        sd_expansion_s=ov.expansion_copies_s(profile, sd_sequences, draft_len, launch_costs.context_len),
        sd_output_s=ov.output_processing_s(profile, sd_sequences, tokens_per_step),
        round_ops_s=round_ops_s,
        sampler_s=engine_sampler_s(
            profile, launch_costs, rows * tokens_per_seq, speculative, acceptance_bytes
        ),
    )


def engine_sampler_s(
    profile: ServingEngineProfile,
    launch_costs: LaunchCosts,
    rows: int,
    speculative: bool,
    acceptance_bytes: float = 0.0,
    prompt_chunks: int = 0,
) -> float:
    """The engine's sampler passes after a step's kernels (`ov.sampler_bytes`): over its `rows` decode rows
    (verified rows when `speculative`), one row per prompt chunk of a step with prefill, and a
    verification's `acceptance_bytes` (`ov.acceptance_bytes`); what `engine_step` and a serving run's
    mixed step both price."""
    mode: ov.SamplerRows = "verify" if speculative else "decode"
    nbytes = ov.sampler_bytes(profile, rows, launch_costs.vocab, mode, launch_costs.sampling)
    if prompt_chunks:
        chunk_bytes = ov.sampler_bytes(
            profile, prompt_chunks, launch_costs.vocab, "decode", launch_costs.sampling
        )
        nbytes = chunk_bytes + nbytes
    return launch_costs.bytes_s(nbytes + acceptance_bytes)


class RoundDrafting(NamedTuple):
    """A round's drafting as the engine runs it: seconds (device + host), the host part, the device cost,
    the rows of each pass and how many passes the host prepared."""

    seconds: float
    host_s: float
    device: DraftCost
    rows: int
    host_prepared_passes: int
    sampler_s: float = 0.0  # of seconds, the engine's sampler passes beyond the drafter's plan


def bonus_row_share(profile: ServingEngineProfile, tokens_per_step: float, draft_len: int) -> float:
    """The share of sequences whose previous round accepted all K drafts, when the engine re-runs the
    position before each bonus token (`bonus_rows`; `all_accepted_share` of the round's tokens per step),
    else 0."""
    return all_accepted_share(tokens_per_step, draft_len) if profile.drafter.bonus_rows else 0.0


def round_drafting(
    profile: ServingEngineProfile,
    drafter: Drafter,
    batch: int,
    draft_len: int,
    verify_launch: str,
    drafts: DraftTimes,
    all_accepted_share: float = 0.0,
    launch_costs: LaunchCosts | None = None,
) -> RoundDrafting:
    """One SD round's drafting for `batch` sequences: an n-gram lookup on the host, or K drafter passes
    (over the bonus positions too, under `bonus_rows`, for a share `all_accepted_share` of sequences) in
    the drafter's launch mode plus the engine's host work per pass (`engines.overheads.draft_host_s`)."""
    if drafter.drafts_on_host:
        return RoundDrafting(ov.ngram_draft_s(profile, batch), 0.0, DraftCost(0.0, 0.0), 0, 0)
    sequences = ov.proposer_sequences(profile.drafter, batch, all_accepted_share)
    launch = ov.drafter_launch(profile.drafter, verify_launch)
    device = drafts(profile.drafter, sequences, draft_len, launch)
    rows = ov.draft_sequences(profile.drafter, sequences)
    host_s = ov.draft_host_s(profile, draft_len, rows, device.tp)
    prepared = ov.host_prepared_passes(profile.drafter, draft_len, device.tp)
    sampler_s = 0.0
    if launch_costs is not None:  # the sampler's own passes over the drafter's vocabulary, every pass
        pass_bytes = ov.sampler_bytes(profile, rows, launch_costs.draft_vocab, "draft", launch_costs.sampling)
        sampler_s = draft_len * launch_costs.bytes_s(pass_bytes)
    return RoundDrafting(device.total_s + sampler_s + host_s, host_s, device, rows, prepared, sampler_s)


class RoundExtras(NamedTuple):
    """What an SD round adds beside its verification's kernel stream, sampler and host time: the drafting
    (`round_drafting`), the round's own ops and a tree's attention metadata (both outside the captured
    graphs) and the acceptance sync, less what the SD overlap hides behind the verification's device time."""

    drafting: RoundDrafting
    round_ops_s: float
    metadata_s: float
    accept_sync_s: float

    @property
    def seconds(self) -> float:
        return self.drafting.seconds + self.round_ops_s + self.metadata_s + self.accept_sync_s


def round_extras(
    profile: ServingEngineProfile,
    drafter: Drafter,
    batch: int,
    draft_len: int,
    tokens_per_step: float,
    launch: str,
    padding_launch: str,
    device_s: float,
    drafts: DraftTimes,
    launch_costs: LaunchCosts,
) -> RoundExtras:
    """The terms an SD round of (batch, K) adds to a verification run in `launch` over `device_s` seconds
    of kernels (its plans padded as `ov.padded_sequences` pads at `padding_launch`): what `engine_round`
    and a serving run's mixed step both add, written once."""
    ops_s = metadata_s = 0.0
    if not drafter.drafts_on_host:
        drafter_launch = ov.drafter_launch(profile.drafter, launch)
        ops_s = ov.round_ops_s(profile, draft_len, drafter_launch, launch_costs, device_s)
        q = ov.verify_tokens(profile.drafter, draft_len)
        planned = ov.padded_sequences(profile, batch, q, padding_launch)  # the batch the plans see
        metadata_s = ov.attention_metadata_s(profile, draft_len, launch_costs, device_s, planned)
    share = bonus_row_share(profile, tokens_per_step, draft_len)
    drafting = round_drafting(profile, drafter, batch, draft_len, launch, drafts, share, launch_costs)
    return RoundExtras(drafting, ops_s, metadata_s, ov.accept_sync_s(profile, device_s))


@dataclass(frozen=True)
class EngineRound:
    """An SD round under a serving engine without the decode step it is compared with (what a serving
    run's verification step costs): the verification, the drafter's time and the acceptance sync."""

    verify: EngineStep
    draft_s: float
    draft_host_s: float
    draft_first_pass_s: float
    draft_rows: int
    draft_tp: int
    host_prepared_passes: int
    accept_sync_s: float

    @property
    def round_s(self) -> float:
        """Draft, verify, learn how many tokens were accepted (as `SpeculativePoint.round_s`)."""
        return self.draft_s + self.verify.step_s + self.accept_sync_s


def engine_round(
    profile: ServingEngineProfile,
    drafter: Drafter,
    batch: int,
    draft_len: int,
    tokens_per_step: float,
    requested_launch: str,
    steps: StepTimes,
    drafts: DraftTimes,
    launch_costs: LaunchCosts,
) -> EngineRound:
    """The SD round of (batch, K) under `profile` from step and drafter times (module docstring)."""
    rows, tokens_per_row = ov.verify_shape(profile.drafter, batch, draft_len)
    acceptance = ov.acceptance_bytes(profile, batch, draft_len, launch_costs.vocab, launch_costs.sampling)
    verify = engine_step(
        profile,
        rows,
        tokens_per_row,
        requested_launch,
        steps,
        launch_costs,
        batch,
        acceptance_bytes=acceptance,
        draft_len=draft_len,
        tokens_per_step=tokens_per_step,
    )
    extras = round_extras(
        profile,
        drafter,
        batch,
        draft_len,
        tokens_per_step,
        verify.launch,
        requested_launch,
        verify.device_s,
        drafts,
        launch_costs,
    )
    if not drafter.drafts_on_host:
        verify = replace(verify, round_ops_s=extras.round_ops_s, metadata_s=extras.metadata_s)
    drafting = extras.drafting
    first_pass_s = drafting.device.first_pass_s if profile.drafter.first_pass != "one_token" else 0.0
    return EngineRound(
        verify=verify,
        draft_s=drafting.seconds,
        draft_host_s=drafting.host_s,
        draft_first_pass_s=first_pass_s,
        draft_rows=drafting.rows,
        draft_tp=drafting.device.tp,
        host_prepared_passes=drafting.host_prepared_passes,
        accept_sync_s=extras.accept_sync_s,
    )


def engine_point(
    profile: ServingEngineProfile,
    drafter: Drafter,
    batch: int,
    draft_len: int,
    tokens_per_step: float,
    requested_launch: str,
    steps: StepTimes,
    drafts: DraftTimes,
    launch_costs: LaunchCosts,
) -> SpeculativePoint:
    """The SD point of (batch, K) under `profile` from step and drafter times (module docstring): the
    round runs `profile.scheduler.sd_sequences(batch)` sequences, the decode step `batch`."""
    decode = engine_step(profile, batch, 1, requested_launch, steps, launch_costs)
    sd_batch = profile.scheduler.sd_sequences(batch)
    sd = engine_round(
        profile, drafter, sd_batch, draft_len, tokens_per_step, requested_launch, steps, drafts, launch_costs
    )
    return SpeculativePoint(
        draft_len=draft_len,
        decode=decode,
        verify=sd.verify,
        draft_s=sd.draft_s,
        draft_host_s=sd.draft_host_s,
        draft_first_pass_s=sd.draft_first_pass_s,
        draft_rows=sd.draft_rows,
        draft_tp=sd.draft_tp,
        host_prepared_passes=sd.host_prepared_passes,
        accept_sync_s=sd.accept_sync_s,
        tokens_per_step=tokens_per_step,
        batch=batch,
        sd_sequences=sd_batch,
    )


def step_shapes(
    profile: ServingEngineProfile, batch: int, draft_lens: Iterable[int], requested_launch: str
) -> set[tuple[int, int]]:
    """The (rows, tokens per row) of every kernel-stream step `engine_point` times at `batch` over
    `draft_lens`: the steps asked for and the padded ones the engine runs."""
    sd_batch = profile.scheduler.sd_sequences(batch)
    asked = {(batch, 1)} | {ov.verify_shape(profile.drafter, sd_batch, k) for k in draft_lens}
    return asked | {
        (ov.padded_sequences(profile, rows, tokens, requested_launch), tokens) for rows, tokens in asked
    }


def prepare_points(resolved: Sequence[ResolvedScenario], draft_lens: Sequence[int]) -> None:
    """Before a sweep times the points of these scenarios (a model at several batches) × `draft_lens`: work
    out what their steps share (the per-rank expert work of multi-GPU steps) in one vectorised pass per
    model, routing and layout."""
    groups: dict[tuple[int, int, ParallelLayout], tuple[ResolvedScenario, set[tuple[int, int]]]] = {}
    for r in resolved:
        _, shapes = groups.setdefault((id(r.model), id(r.routing), r.layout), (r, set()))
        shapes.update(step_shapes(r.serving_engine, r.batch, draft_lens, r.launch))
    for r, shapes in groups.values():
        prepare_parallel_plans(r.model, r.layout, r.routing, shapes)


def speculative_point(
    resolved: ResolvedScenario,
    timer: StepTimer,
    draft_len: int | None = None,
    *,
    timers: tuple[StepTimes, DraftTimes, LaunchCosts] | None = None,
) -> SpeculativePoint:
    """The SD point at `draft_len` (default: the scenario's) under the scenario's serving engine. A sweep
    passes the batch's `scenario_timers` so steps shared by its draft lengths are timed once."""
    r = resolved
    k = r.scenario.draft_len if draft_len is None else draft_len
    steps, drafts, launch_costs = timers or scenario_timers(r, timer)
    tokens = expected_tokens(k, r.scenario.acceptance, r.scenario.acceptance_length)
    return engine_point(
        r.serving_engine, r.drafter, r.batch, k, tokens, r.launch, steps, drafts, launch_costs
    )


__all__ = [
    "DraftCost",
    "EngineStep",
    "LaunchCosts",
    "PlannedStep",
    "RoundDrafting",
    "SpeculativePoint",
    "TimedPlan",
    "bonus_row_share",
    "engine_point",
    "engine_step",
    "engine_step_keys",
    "plan_steps",
    "point_step_keys",
    "prepare_points",
    "round_drafting",
    "scenario_timers",
    "speculative_point",
    "step_shapes",
    "time_step",
    "time_steps",
    "timed_steps",
]
