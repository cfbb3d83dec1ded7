"""Routing traces: which k experts every token used in every MoE layer, grouped into sequences.

Formats
- `.npz`: `experts` int array [tokens, layers, k] of expert ids; `sequence_ids` int array [tokens], the tokens
  of one sequence consecutive and in order; `n_experts` (scalar) — or pass it on the command line.
  Optional `layer_indices` [layers]: each MoE layer's index among all layers (default 0..layers-1).
- JSON lines: one token per line, `{"sequence": s, "experts": [[k ids of layer 0], [k ids of layer 1], ...]}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.atomic import open_output
from moesim.errors import MoesimError
from moesim.reading import read_npz, read_text
from moesim.simulator.bounds import MAX_EXPERTS, check_count


@dataclass(frozen=True)
class RoutingTrace:
    """A validated trace; construct it through `RoutingTrace.create` or `load_trace`."""

    experts: np.ndarray  # [tokens, layers, k]
    sequence_ids: np.ndarray  # [tokens]
    n_experts: int
    layer_indices: tuple[int, ...]

    @classmethod
    def create(
        cls,
        experts: np.ndarray,
        sequence_ids: np.ndarray,
        n_experts: int | None,
        layer_indices: tuple[int, ...] | None = None,
        source: str = "trace",
    ) -> RoutingTrace:
        experts = np.asarray(experts)
        sequence_ids = np.asarray(sequence_ids)
        if experts.size == 0 or (experts.ndim >= 1 and experts.shape[0] == 0):
            raise MoesimError(source, "the trace is empty (no tokens)", "record at least one sequence")
        if experts.ndim != 3:
            raise MoesimError(
                source, f"`experts` must have shape [tokens, layers, k], got {experts.ndim} dimensions"
            )
        if not np.issubdtype(experts.dtype, np.integer):
            raise MoesimError(source, f"`experts` must hold integer ids, got dtype {experts.dtype}")
        tokens, layers, k = experts.shape
        if layers == 0 or k == 0:
            raise MoesimError(
                source, f"`experts` has shape {experts.shape}: no layers or no experts per token"
            )
        if sequence_ids.shape != (tokens,):
            raise MoesimError(
                source, f"`sequence_ids` must have shape [{tokens}] (one per token), got {sequence_ids.shape}"
            )
        if not np.issubdtype(sequence_ids.dtype, np.integer):
            raise MoesimError(source, f"`sequence_ids` must be integers, got dtype {sequence_ids.dtype}")
        if n_experts is None:
            raise MoesimError(
                source, "the expert count is unknown", "store `n_experts` in the file or pass --experts"
            )
        n_experts = check_count(
            n_experts, "n_experts", source, high=MAX_EXPERTS, fix="store the model's expert count"
        )
        if n_experts < k:
            raise MoesimError(source, f"n_experts={n_experts} is smaller than the {k} experts per token")
        if int(sequence_ids.min()) < 0:
            raise MoesimError(
                source, "`sequence_ids` holds a negative sequence id", "number sequences from 0"
            )
        for index in layer_indices or ():
            check_count(
                index, "layer_indices", source, low=0, fix="give each MoE layer's index among all layers"
            )
        low, high = int(experts.min()), int(experts.max())
        if low < 0 or high >= n_experts:
            bad = low if low < 0 else high
            raise MoesimError(
                source, f"expert id {bad} is out of range 0..{n_experts - 1}", "check --experts"
            )
        ordered = np.sort(experts, axis=2)
        repeats = np.nonzero((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2))
        if repeats[0].size:
            raise MoesimError(
                source,
                f"token {repeats[0][0]} lists an expert twice in layer {repeats[1][0]}",
                "each token's k experts must be distinct",
            )
        starts = np.r_[True, sequence_ids[1:] != sequence_ids[:-1]]
        if np.unique(sequence_ids[starts]).size != int(starts.sum()):
            raise MoesimError(
                source, "a sequence's tokens are not consecutive", "sort tokens by sequence, then position"
            )
        if layer_indices is None:
            layer_indices = tuple(range(layers))
        if len(layer_indices) != layers:
            raise MoesimError(source, f"`layer_indices` has {len(layer_indices)} entries for {layers} layers")
        experts = experts.astype(np.int32)
        experts.setflags(write=False)
        return cls(
            experts, sequence_ids.astype(np.int64), int(n_experts), tuple(int(i) for i in layer_indices)
        )

    @property
    def n_tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.experts.shape[2])

    def sequence_bounds(self) -> np.ndarray:
        """[n_sequences, 2] start (inclusive) and end (exclusive) token of each sequence."""
        starts = np.flatnonzero(np.r_[True, self.sequence_ids[1:] != self.sequence_ids[:-1]])
        return np.stack([starts, np.r_[starts[1:], self.n_tokens]], axis=1)

    @property
    def longest_sequence_tokens(self) -> int:
        """Tokens of the trace's longest sequence: a fit of the overlap between a sequence's tokens needs 2."""
        bounds = self.sequence_bounds()
        return int((bounds[:, 1] - bounds[:, 0]).max())

    def select_sequences(self, indices: np.ndarray) -> RoutingTrace:
        """The trace restricted to some sequences (by position in `sequence_bounds`), e.g. a held-out split."""
        bounds = self.sequence_bounds()[np.asarray(indices)]
        rows = np.concatenate([np.arange(a, b) for a, b in bounds])
        return RoutingTrace.create(
            self.experts[rows], self.sequence_ids[rows], self.n_experts, self.layer_indices
        )

    def masks(self, layer: int) -> np.ndarray:
        """[tokens, n_experts] bool: the experts each token used in trace layer `layer`."""
        mask = np.zeros((self.n_tokens, self.n_experts), dtype=bool)
        mask[np.arange(self.n_tokens)[:, None], self.experts[:, layer]] = True
        return mask


def load_trace(path: str | Path, n_experts: int | None = None) -> RoutingTrace:
    """Load and validate a `.npz` or JSON-lines trace; `n_experts` overrides/supplies the expert count."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        data = read_npz("trace", path, "routing trace (.npz)")
        for key in ("experts", "sequence_ids"):
            if key not in data:
                raise MoesimError(
                    "trace", f"{path}: missing array `{key}`", "see the trace format in the README"
                )
        try:
            stored = int(data["n_experts"]) if "n_experts" in data else None
            layer_indices = tuple(int(i) for i in data["layer_indices"]) if "layer_indices" in data else None
        except (TypeError, ValueError, OverflowError) as error:
            raise MoesimError(
                "trace", f"{path}: n_experts must be one integer, layer_indices a list ({error})"
            ) from None
        if n_experts is not None and stored is not None and n_experts != stored:
            raise MoesimError("--experts", f"{path} stores n_experts={stored} but --experts says {n_experts}")
        return RoutingTrace.create(
            data["experts"], data["sequence_ids"], n_experts or stored, layer_indices, source=str(path)
        )
    experts: list[list[list[int]]] = []
    sequences: list[int] = []
    text = read_text("trace", path, "routing trace (.npz or JSON lines)")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            sequences.append(check_count(record["sequence"], "sequence", f"{path}:{number}", low=0))
            experts.append(
                [
                    [check_count(e, "experts", f"{path}:{number}", low=0) for e in layer]
                    for layer in record["experts"]
                ]
            )
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as error:
            raise MoesimError(
                f"{path}:{number}",
                f"not a trace record ({error})",
                'expected {"sequence": s, "experts": [[...]]}',
            ) from None
    shapes = {(len(token), *(len(layer) for layer in token)) for token in experts}
    if len(shapes) > 1:
        raise MoesimError(str(path), "tokens differ in layer count or experts per layer")
    array = np.array(experts, dtype=np.int64) if experts else np.zeros((0, 0, 0), dtype=np.int64)
    return RoutingTrace.create(array, np.array(sequences, dtype=np.int64), n_experts, source=str(path))


TRACE_SUFFIXES = (".npz", ".jsonl", ".json")
"""File types a trace is written as: `.npz`, or JSON lines (`.jsonl`, `.json`; standard output and other special
targets too)."""


def save_trace(trace: RoutingTrace, path: str | Path) -> None:
    """Write a trace as `.npz` (JSON lines otherwise: see `TRACE_SUFFIXES`), atomically."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        with open_output(path, binary=True) as handle:
            np.savez_compressed(
                handle,
                experts=trace.experts,
                sequence_ids=trace.sequence_ids,
                n_experts=np.int64(trace.n_experts),
                layer_indices=np.array(trace.layer_indices, dtype=np.int64),
            )
        return
    with open_output(path) as handle:
        for token in range(trace.n_tokens):
            record = {"sequence": int(trace.sequence_ids[token]), "experts": trace.experts[token].tolist()}
            handle.write(json.dumps(record) + "\n")
