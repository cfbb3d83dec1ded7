"""The engines' measured MoE dispatch / combine → the expert-parallel all-to-all terms of each DeepEP mode.

Tables (aiconfigurator-core 0.12.0; the collector itself is not shipped: `collection_meta.yaml` names it,
`collector.wideep.trtllm.collect_moe_a2a` in the error log beside trtllm's table):

- SGLang: `comm/sglang/<v>/wideep_deepep_ll_perf` (DeepEP low-latency mode) and `wideep_deepep_normal_perf`
  (normal mode); a row is one dispatch and one combine of `num_token` tokens per rank, `num_topk` of
  `num_experts` experts, `hidden_size` values each, on `node_num` nodes; times in µs (`*_avg_t_us`,
  `*_transmit_us`). The low-latency table's own bandwidth column counts `tokens × top-k × hidden × 1.03`
  bytes for dispatch and `× 2` for combine: FP8 values with one fp32 scale per 128 going out (SGLang's
  default, `SGLANG_DEEPEP_BF16_DISPATCH` False in 0.5.23 `environ.py`) and bf16 coming back. The normal
  table carries no bandwidth; its dispatch is read as FP8 too (as bf16 the rows would need 510 GB/s per
  GPU on H200, above NVLink 4's 450 GB/s per direction). Normal rows are those at DeepEP's default 20 SMs
  (`Buffer.num_sms`, which SGLang 0.5.23 `token_dispatcher/deepep.py` keeps when no config is given).
- TensorRT-LLM and vLLM: `comm/<framework>/<v>/moe_a2a_perf`; `comm_backend` `*_deepep_ll` (low latency) or
  `*_deepep_ht` (high throughput: DeepEP's normal mode), `phase` dispatch / combine, `comm_dtype` (bf16 or
  fp8 rows are used: the dtypes moesim's plans dispatch; vLLM's `default` is read as bf16, vLLM 0.33.0
  dispatching FP8 only for FP8-quantised models, `fused_moe/all2all_utils.py`), `ep_size` GPUs,
  `num_tokens` per rank (aiconfigurator's `MoEAllToAll` takes per-rank counts), `latency` in µs.

Every table is of one node (EP 8; GB200 / GB300: EP 4, one tray); SGLang's give no EP size, read as the
GPUs of the system's trtllm / vLLM rows (`ep_size`).

moesim prices a row as its plan would (`plan.layout.moe_traffic` under uniform routing): the busiest rank
sends each of its tokens once to every distinct remote rank its experts live on (the expectation for
top-k of E experts placed E/n per rank, without replacement), `hidden` values of the row's dtype each, and
receives as much. The fit finds per mode and phase the `hardware.sections.AllToAllTerms` (a fixed time and
an achieved rate) that reproduce the rows:

    time = fixed_us + busiest rank's bytes / bandwidth_gbps

on the training shapes (hidden size, top-k, experts, dtype); every fourth shape is held out. The datasheet
price it would replace is the direct all-to-all on the datasheet node's link (`collectives.all_to_all_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import hypergeom

from moesim.calibrate.fits.silicon import tables
from moesim.calibrate.fits.silicon.holdout import FitQuality, held_out_mask
from moesim.simulator.execution.collectives import all_to_all_s, node_link
from moesim.simulator.hardware.profile import ALL_TO_ALL_MAX_FIXED_US, HardwareProfile
from moesim.simulator.hardware.sections import AllToAllMode, AllToAllTerms
from moesim.simulator.plan.blocks import ACT_BYTES
from moesim.simulator.plan.parallel import FP8_DISPATCH_BYTES

# Bytes per hidden value of the dtypes used ('default': vLLM's unquantised dispatch, bf16), as the plan
# counts them (FP8: one fp32 scale per 128 values, DeepEP's FP8 dispatch).
VALUE_BYTES = {"bfloat16": float(ACT_BYTES), "default": float(ACT_BYTES), "fp8": FP8_DISPATCH_BYTES}
SGLANG_DEFAULT_SMS = 20  # DeepEP's Buffer.num_sms
# GPUs of one node in SGLang's tables, where their trtllm / vLLM rows of the same system say (else 8).
SGLANG_EP_PER_NODE = {"gb200": 4, "gb300": 4}
MODE_OF_BACKEND: dict[str, AllToAllMode] = {
    "deepep_ll": "low_latency",
    "trtllm_deepep_ll": "low_latency",
    "deepep_ht": "normal",
    "trtllm_deepep_ht": "normal",
}
PHASES = ("dispatch", "combine")
# The tables a framework's all-to-all terms are fitted to.
A2A_TABLES = ("wideep_deepep_ll_perf", "wideep_deepep_normal_perf", "moe_a2a_perf")


@dataclass(frozen=True)
class AllToAllRows:
    """Measured dispatch / combine rows as moesim prices them (one entry per row)."""

    mode: np.ndarray  # 'low_latency' | 'normal'
    phase: np.ndarray  # 'dispatch' | 'combine'
    ranks: np.ndarray  # GPUs of the expert-parallel group
    bytes: np.ndarray  # the busiest rank's bytes in moesim's count
    measured_s: np.ndarray
    shape: np.ndarray  # 'hidden|top-k|experts|dtype', the hold-out key

    @classmethod
    def concat(cls, parts: list[AllToAllRows]) -> AllToAllRows:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))

    def where(self, keep: np.ndarray) -> AllToAllRows:
        return AllToAllRows(*(getattr(self, f)[keep] for f in self.__dataclass_fields__))


def expected_remote_ranks(experts: np.ndarray, top_k: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Expected distinct other ranks a token's top-k experts (uniform, without replacement, E/n per rank)
    live on: (n − 1) × P(a given rank holds at least one of them)."""
    e, k, n = (np.asarray(x, dtype=np.int64) for x in (experts, top_k, ranks))
    none_on_rank = hypergeom.pmf(0, e, e // n, k)
    return (n - 1) * (1.0 - none_on_rank)


def _rows(
    mode: np.ndarray,
    phase: np.ndarray,
    ranks: np.ndarray,
    tokens: np.ndarray,
    hidden: np.ndarray,
    top_k: np.ndarray,
    experts: np.ndarray,
    dtype: np.ndarray,
    measured_us: np.ndarray,
) -> AllToAllRows:
    value_bytes = np.array([VALUE_BYTES[str(d)] for d in dtype])
    sent = tokens * expected_remote_ranks(experts, top_k, ranks) * hidden * value_bytes
    shape = np.array([f"{h}|{k}|{e}|{d}" for h, k, e, d in zip(hidden, top_k, experts, dtype, strict=True)])
    return AllToAllRows(
        mode.astype(str), phase.astype(str), ranks.astype(np.int64), sent, measured_us * 1e-6, shape
    )


def sglang_rows(table: str, columns: dict[str, np.ndarray], system: str) -> AllToAllRows:
    """The rows of SGLang's `wideep_deepep_ll_perf` / `wideep_deepep_normal_perf` (module docstring)."""
    low_latency = table == "wideep_deepep_ll_perf"
    parts = []
    for phase in PHASES:
        measured = columns[f"{phase}_avg_t_us" if low_latency else f"{phase}_transmit_us"]
        keep = np.isfinite(measured) & (measured > 0) & (columns["num_topk"] <= columns["num_experts"])
        if not low_latency:
            keep &= columns[f"{phase}_sms"] == SGLANG_DEFAULT_SMS
        n = int(keep.sum())
        ranks = columns["node_num"][keep] * SGLANG_EP_PER_NODE.get(system, 8)
        dispatch_dtype = "fp8" if phase == "dispatch" else "bfloat16"
        parts.append(
            _rows(
                np.full(n, "low_latency" if low_latency else "normal"),
                np.full(n, phase),
                ranks,
                columns["num_token"][keep],
                columns["hidden_size"][keep],
                columns["num_topk"][keep],
                columns["num_experts"][keep],
                np.full(n, dispatch_dtype),
                measured[keep],
            )
        )
    return AllToAllRows.concat(parts)


def moe_a2a_rows(columns: dict[str, np.ndarray]) -> AllToAllRows:
    """The rows of TensorRT-LLM's / vLLM's `moe_a2a_perf` in a DeepEP mode and a dtype moesim dispatches."""
    mode = np.array([MODE_OF_BACKEND.get(str(b), "") for b in columns["comm_backend"]])
    keep = (mode != "") & np.isin(columns["comm_dtype"].astype(str), list(VALUE_BYTES))
    keep &= np.isin(columns["phase"].astype(str), PHASES)
    return _rows(
        mode[keep],
        columns["phase"][keep],
        columns["ep_size"][keep],
        columns["num_tokens"][keep],
        columns["hidden_size"][keep],
        columns["topk"][keep],
        columns["num_experts"][keep],
        columns["comm_dtype"][keep],
        columns["latency"][keep],
    )


def read_rows(collection: tables.Collection, system: str) -> AllToAllRows:
    """The rows of one of `A2A_TABLES` (SGLang's two or `moe_a2a_perf`), read and schema-checked."""
    columns = tables.read_columns(collection)
    if collection.table == "moe_a2a_perf":
        return moe_a2a_rows(columns)
    return sglang_rows(collection.table, columns, system)


def price(rows: AllToAllRows, terms: AllToAllTerms) -> np.ndarray:
    """moesim's seconds for each row under `terms` (one node: no scale-out cap)."""
    dispatch = rows.phase == "dispatch"
    fixed_us = np.where(dispatch, terms.dispatch_fixed_us, terms.combine_fixed_us)
    bandwidth_gbps = np.where(dispatch, terms.dispatch_bandwidth_gbps, terms.combine_bandwidth_gbps)
    return np.asarray(fixed_us * 1e-6 + rows.bytes / (bandwidth_gbps * 1e9))


def link_price(rows: AllToAllRows, profile: HardwareProfile) -> np.ndarray:
    """The direct all-to-all on `profile`'s node link, as moesim prices a profile without the term."""
    out = np.zeros(rows.bytes.size)
    for n in np.unique(rows.ranks):
        at = rows.ranks == n
        out[at] = all_to_all_s(rows.bytes[at], int(n), node_link(profile.node, int(n)))
    return out


@dataclass(frozen=True)
class AllToAllFit:
    mode: AllToAllMode
    terms: AllToAllTerms
    quality: FitQuality
    datasheet_quality: FitQuality  # the datasheet node's direct all-to-all on the same rows


def _fit_phase(rows: AllToAllRows) -> tuple[float, float]:
    """(fixed_us, bandwidth_gbps) of one phase, least squares on the log of predicted ÷ measured."""

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log((x[0] * 1e-6 + rows.bytes / (x[1] * 1e9)) / rows.measured_s)

    start = np.array([float(np.min(rows.measured_s)) * 1e6, 100.0])
    solution = least_squares(residual, start, bounds=([0.0, 1.0], [ALL_TO_ALL_MAX_FIXED_US, 1e5]))
    return round(float(solution.x[0]), 3), round(float(solution.x[1]), 2)


def fit_all_to_all(
    rows: AllToAllRows, datasheet: HardwareProfile, labels: dict[str, str]
) -> list[AllToAllFit]:
    """The terms of each mode with rows of both phases, fitted on the training shapes (module docstring);
    `labels` names each mode's table(s) for its provenance."""
    out = []
    for mode in ("low_latency", "normal"):
        of_mode = rows.where(rows.mode == mode)
        held = held_out_mask(of_mode.shape)
        train = of_mode.where(~held)
        if not all(np.unique(train.shape[train.phase == p]).size >= 2 for p in PHASES):
            continue  # a phase needs two training shapes to fix two numbers
        (dispatch_us, dispatch_gbps), (combine_us, combine_gbps) = (
            _fit_phase(train.where(train.phase == p)) for p in PHASES
        )
        terms = AllToAllTerms(dispatch_us, dispatch_gbps, combine_us, combine_gbps)
        n = sorted({int(r) for r in of_mode.ranks})
        note = f"DeepEP {mode.replace('_', '-')} dispatch + combine, EP {'/'.join(map(str, n))}, one node"
        out.append(
            AllToAllFit(
                mode,  # type: ignore[arg-type]
                terms,
                FitQuality.of(labels[mode], price(of_mode, terms), of_mode.measured_s, held, note),
                FitQuality.of(
                    labels[mode],
                    link_price(of_mode, datasheet),
                    of_mode.measured_s,
                    held,
                    "datasheet node link",
                ),
            )
        )
    return out


__all__ = [
    "A2A_TABLES",
    "AllToAllFit",
    "AllToAllRows",
    "expected_remote_ranks",
    "fit_all_to_all",
    "link_price",
    "moe_a2a_rows",
    "price",
    "read_rows",
    "sglang_rows",
]
