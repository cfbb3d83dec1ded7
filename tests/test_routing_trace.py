"""Trace files: both formats round-trip, and every kind of bad trace gives a clear MoesimError."""

from __future__ import annotations

import json

import numpy as np
import pytest

from moesim.errors import MoesimError
from moesim.simulator.routing import RoutingTrace, load_trace, save_trace

GOOD = np.array([[[0, 1], [2, 3]], [[1, 2], [3, 0]], [[4, 5], [0, 1]]])
IDS = np.array([7, 7, 9])


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
def test_round_trip(tmp_path, suffix: str) -> None:
    trace = RoutingTrace.create(GOOD, IDS, 6)
    path = tmp_path / f"trace{suffix}"
    save_trace(trace, path)
    back = load_trace(path, 6 if suffix == ".jsonl" else None)
    assert np.array_equal(back.experts, GOOD) and np.array_equal(back.sequence_ids, IDS)
    assert back.n_experts == 6 and back.top_k == 2 and back.n_layers == 2
    assert back.sequence_bounds().tolist() == [[0, 2], [2, 3]]


@pytest.mark.parametrize(
    ("experts", "ids", "n", "message"),
    [
        (GOOD[:0], IDS[:0], 6, "empty"),
        (GOOD[:, 0], IDS, 6, "shape"),
        (GOOD, IDS[:2], 6, "sequence_ids"),
        (GOOD, IDS, 5, "out of range"),
        (GOOD * -1 - 1, IDS, 6, "out of range"),
        (np.array([[[1, 1]], [[0, 2]]]), np.array([0, 0]), 6, "twice"),
        (GOOD, np.array([1, 2, 1]), 6, "consecutive"),
        (GOOD, IDS, None, "expert count"),
        (GOOD.astype(float), IDS, 6, "integer"),
    ],
)
def test_bad_traces(experts, ids, n, message: str) -> None:
    with pytest.raises(MoesimError, match=message):
        RoutingTrace.create(experts, ids, n)


def test_bad_files(tmp_path) -> None:
    with pytest.raises(MoesimError, match="does not exist"):
        load_trace(tmp_path / "missing.npz")
    path = tmp_path / "t.npz"
    np.savez(path, experts=GOOD)
    with pytest.raises(MoesimError, match="sequence_ids"):
        load_trace(path, 6)
    np.savez(path, experts=GOOD, sequence_ids=IDS, n_experts=6)
    with pytest.raises(MoesimError, match="--experts says 8"):
        load_trace(path, 8)
    lines = tmp_path / "t.jsonl"
    lines.write_text(json.dumps({"sequence": 0, "experts": [[0, 1]]}) + "\nnot json\n")
    with pytest.raises(MoesimError, match=":2"):
        load_trace(lines, 4)
    lines.write_text(
        json.dumps({"sequence": 0, "experts": [[0, 1]]})
        + "\n"
        + json.dumps({"sequence": 0, "experts": [[0]]})
        + "\n"
    )
    with pytest.raises(MoesimError, match="differ"):
        load_trace(lines, 4)
