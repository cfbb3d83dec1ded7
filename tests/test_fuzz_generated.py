"""The generated corpus (tests/corpus_generated.py): mutations of every shipped example file and every numeric
flag's extremes, each refused with the field named, no traceback, within the time and memory limits.

The test runs a seeded sample of the corpus's refusals (every bound case, every class) in one fresh interpreter,
one forked child per case, two at a time; `python tests/corpus_generated.py` runs the whole corpus, the values
some fields accept (0, 1e308, a deleted optional key) included, with the same limits.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from tests.corpus_generated import CPU_LIMIT_S, PEAK_LIMIT_MB, Result, corpus

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = 300
"""Refusal cases the test runs (of about 900): enough for every class, about a minute of CPU."""
TESTED_KINDS = ("bound", "flag", "config", "catalogue", "profile", "engine", "runs", "bench", "measured",
                "designs", "trace", "stats")  # fmt: skip
"""Every class: the whole corpus passes (`python tests/corpus_generated.py`: 1,087 cases, none failing); the
test samples its refusals to keep to about a minute of CPU."""


def _corpus() -> list:
    with tempfile.TemporaryDirectory() as d:
        return corpus(d)


def test_the_corpus_is_generated_large_and_covers_every_input() -> None:
    cases = _corpus()
    kinds = Counter(case.kind for case in cases)
    assert len(cases) >= 300
    for kind in TESTED_KINDS:
        assert kinds[kind] >= 8, (kind, kinds)
    extremes = {case.argv[-1] for case in cases if case.kind == "flag"}
    assert {"0", "-1", str(2**63), "1e+308", "inf", "nan"} <= extremes
    assert len({case.id for case in cases}) == len(cases)


@pytest.fixture(scope="module")
def results() -> list[Result]:
    """The sampled refusals run in a fresh interpreter (the children then measure only their own work)."""
    cases = [case for case in _corpus() if case.must_refuse and case.kind in TESTED_KINDS]
    bound = [case.id for case in cases if case.kind == "bound"]
    rest = [case.id for case in cases if case.kind != "bound"]
    chosen = bound + random.Random(0).sample(rest, min(SAMPLE - len(bound), len(rest)))
    with tempfile.TemporaryDirectory() as d:
        ids = Path(d, "ids.txt")
        ids.write_text("\n".join(chosen))
        out = Path(d, "results.json")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tests" / "corpus_generated.py"),
                "--ids",
                str(ids),
                "--json",
                str(out),
            ],
            check=True,
            env=env,
            capture_output=True,
            timeout=1200,
        )
        data = json.loads(out.read_text())
    return [Result(**r) for r in data["results"]]


def test_every_sampled_case_is_refused_with_its_field_and_no_traceback(results: list[Result]) -> None:
    assert len(results) >= 10
    failing = [
        f"{r.id}: {', '.join(r.failures())}: {r.output.strip()[-200:]}" for r in results if r.failures()
    ]
    assert not failing, "\n".join(failing)


def test_every_refusal_stays_under_the_limits(results: list[Result]) -> None:
    """Measured per child with the kernel's own accounting (CPU seconds, peak resident memory); the limits are
    generous for a shared machine. Bound cases (each command's worst-case flags) have 1 s and 200 MB."""
    for r in results:
        assert r.cpu_s <= r.cpu_limit_s <= CPU_LIMIT_S, (r.id, r.cpu_s)
        assert r.peak_mb <= r.peak_limit_mb <= PEAK_LIMIT_MB, (r.id, r.peak_mb)
    assert {r.kind for r in results} == set(TESTED_KINDS)
