"""The calibration run: tiny real suites on CPU, checkpoints and resume, atomic profile write, clear errors."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from moesim.calibrate.fits.drift import (  # noqa: E402
    MIN_DRIFT,
    NOISE_MULTIPLE,
    PARTS,
    ProbeSample,
    suite_drift_in_run,
)
from moesim.calibrate.fits.drift import PROBE_KEY as DRIFT_KEY  # noqa: E402
from moesim.calibrate.suites import runner  # noqa: E402
from moesim.calibrate.suites.plan import Plan  # noqa: E402
from moesim.calibrate.suites.probe import Probe, ProbePlan  # noqa: E402
from moesim.calibrate.suites.runner import calibrate, read_rows, suite_path  # noqa: E402
from moesim.commands.calibrate import calibrate_command  # noqa: E402
from moesim.errors import MoesimError  # noqa: E402
from moesim.simulator.hardware.profile import load_profile  # noqa: E402
from tests.test_calibrate_fit import synthetic_tables  # noqa: E402

KIB, MIB = 2**10, 2**20

TINY = Plan(
    quick=True,
    working_set_bytes=tuple(int(256 * KIB * 2**i) for i in range(9)),
    transfer_bytes=(256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB),
    rounds=2,
    min_timed_s=0.0003,
    launch_counts=(10, 20, 40),
    launch_repeats=3,
    launch_gemm_mkn=(1, 32, 32),
    launch_gemm_counts=(10, 20, 40),
    gemm_m=(1, 4, 16, 64),
    gemm_shapes=((64, 64),),
    gemm_repeats=3,
    moe_m=(1, 2, 4),
    moe_small=(32, 16, 8, 2),
    moe_large=(64, 32, 8, 2),
    moe_repeats=3,
    rotate_bytes=1 * MIB,
    memory_budget_bytes=64 * MIB,
    flush_bytes=8 * MIB,
)


TINY_PROBE = ProbePlan(
    read_bytes=1 * MIB,
    gemm_n=32,
    dtype="fp32",
    read_inner=1,
    gemm_inner=1,
    read_repeats=3,
    gemm_repeats=3,
    dispatch_repeats=3,
    stream_k=32,
    stream_n=32,
    stream_pool_bytes=64 * 1024,
    stream_inner=1,
    stream_repeats=3,
)


class ScriptedProbe:
    """A drift probe whose machine speed (every part) is scripted per (label, occurrence); 1.0 elsewhere. Its
    samples state no noise, so a drift counts from MIN_DRIFT on."""

    plan = TINY_PROBE

    def __init__(
        self,
        speed: dict[tuple[str, int], float],
        noise: float = 0.0,
        parts: tuple[str, ...] = ("memory", "compute", "dispatch"),
    ) -> None:
        self.speed, self.noise, self.parts = speed, noise, parts
        self.seen: dict[str, int] = {}

    def sample(self, label: str) -> ProbeSample:
        self.seen[label] = self.seen.get(label, 0) + 1
        speed = self.speed.get((label, self.seen[label]), 1.0)
        memory, compute, dispatch, stream = (speed if part in self.parts else 1.0 for part in PARTS)
        return ProbeSample(
            label,
            0.0,
            12.0 * memory,
            0.06 * compute,
            dispatch_us=4.0 / dispatch,
            memory_noise=self.noise,
            compute_noise=self.noise,
            dispatch_noise=self.noise,
            stream_gemm_tflops=0.011 * stream,
            stream_gemm_noise=self.noise,
        )

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def steady_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drift probe that sees a steady machine: these tests check the run, not the machine's speed."""
    monkeypatch.setattr(runner, "_start_probe", lambda timer, device: ScriptedProbe({}))


@pytest.mark.slow
def test_tiny_real_calibration_writes_a_loadable_profile_and_csvs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cpu.toml"
    monkeypatch.setattr(runner, "_start_probe", lambda timer, device: Probe(timer, device, TINY_PROBE))
    result = calibrate("cpu", out, plan=TINY, name="tiny-cpu")
    assert result.failures == {}
    profile = load_profile(str(out))
    assert profile.name == "tiny-cpu" and profile.is_cpu and profile.provenance.kind == "measured"
    em = profile.empirical
    assert em.launch_eager_us > 0 and em.cache_bandwidth_gbps > 0 and em.cache_effective_bytes > 0
    assert profile.datasheet.peak_dense_tflops["fp32"] > 0
    assert profile.provenance.software["threads"] == "1"
    for suite in runner.SUITES:
        meta, rows = read_rows(suite_path(out, suite))
        assert meta["suite"] == suite and rows
    assert result.fit_path.is_file()
    probe = profile.fit_quality["drift_probe"]  # the real probe ran before and after every probed suite
    assert probe["n_probes"] >= 6 and probe["memory_gbps"] > 0 and probe["compute_tflops"] > 0
    assert probe["probe_memory_noise"] >= 0 and probe["gemm_threshold"] >= probe["min_drift"]
    moe_rows = read_rows(suite_path(out, "moe"))[1]
    assert {r["size_class"] for r in moe_rows} == {"small", "large"}


def fake_suites(calls: list[str], fail: str | None = None, interrupt: str | None = None) -> Any:
    """Stand-in for the measurements: synthetic rows, recording which suites were run."""
    tables = synthetic_tables()
    moe = [
        {"size_class": c, "distinct": u, "slots": 2 * m, "median_s": 1e-4 + 2e-5 * u, "expert_bytes": 1e5}
        for c in ("small", "large")
        for m, u in ((1, 2), (2, 3), (4, 8))
    ]

    def run(suite: str, *args: Any) -> list[dict[str, Any]]:
        calls.append(suite)
        if suite == fail:
            raise RuntimeError(f"{suite} broke")
        if suite == interrupt:
            raise KeyboardInterrupt
        return {"memory": tables.memory, "launch": tables.launch, "gemm": tables.gemm, "moe": moe}[suite]

    return run


def test_failed_suite_keeps_the_others_and_a_rerun_measures_only_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.toml"
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls, fail="gemm"))
    with pytest.raises(MoesimError, match="gemm suite"):
        calibrate("cpu", out, plan=TINY)  # a CPU has no datasheet to fall back on for the GEMM curve
    assert calls == ["memory", "launch", "gemm", "moe"]  # the failure did not stop the later suite
    assert not out.exists()
    assert {p.name for p in tmp_path.iterdir()} == {
        "p.memory.csv",
        "p.launch.csv",
        "p.moe.csv",
        "p.probe.csv",
    }

    calls.clear()
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    result = calibrate("cpu", out, plan=TINY)
    assert calls == ["gemm"]
    assert result.resumed == ["memory", "launch", "moe"]
    assert load_profile(str(out)).empirical.launch_eager_us == pytest.approx(4.0, rel=1e-3)


def test_interrupt_leaves_completed_suites_and_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.toml"
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls, interrupt="gemm"))
    with pytest.raises(KeyboardInterrupt):
        calibrate("cpu", out, plan=TINY)
    # No temp files; the probes of the completed suites are checkpointed with them.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.launch.csv", "p.memory.csv", "p.probe.csv"]
    calls.clear()
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    calibrate("cpu", out, plan=TINY)
    assert calls == ["gemm", "moe"]


def test_fresh_and_changed_settings_do_not_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p.toml"
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    calibrate("cpu", out, plan=TINY)
    calls.clear()
    calibrate("cpu", out, plan=TINY, fresh=True)
    assert calls == list(runner.SUITES)
    calls.clear()
    calibrate("cpu", out, plan=TINY, threads=2)  # measured with other settings: not reusable
    assert calls == list(runner.SUITES)
    calls.clear()
    suite_path(out, "launch").write_text("not a checkpoint\n")  # a damaged file is measured again
    calibrate("cpu", out, plan=TINY, threads=2)
    assert calls == ["launch"]


def test_profile_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p.toml"
    out.write_text("old profile\n")
    monkeypatch.setattr(runner, "_run_suite", fake_suites([]))
    real_replace = os.replace

    def fail_on_profile(source: str, target: str) -> None:
        if Path(target).name == "p.toml":
            raise OSError("disk full")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", fail_on_profile)
    with pytest.raises(OSError):
        calibrate("cpu", out, plan=TINY)
    assert out.read_text() == "old profile\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def cli(args: list[str]) -> Any:
    return CliRunner().invoke(calibrate_command, args)


def test_cli_rejects_fp8_on_cpu_in_one_line(tmp_path: Path) -> None:
    result = cli(["--device", "cpu", "--dtype", "fp8", "--output", str(tmp_path / "x.toml")])
    assert result.exit_code == 2
    assert "fp8" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


def test_cli_rejects_missing_gpu_and_bad_output(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        result = cli(["--device", "cuda", "--output", str(tmp_path / "x.toml")])
        assert result.exit_code == 2 and "no GPU" in result.output
    result = cli(["--device", "cpu", "--output", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and ".toml" in result.output
    result = cli(["--device", "cpu", "--dtype", "int3", "--output", str(tmp_path / "x.toml")])
    assert result.exit_code == 2 and "int3" in result.output


def test_cli_without_torch_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    result = cli(["--device", "cpu", "--quick", "--output", str(tmp_path / "x.toml")])
    assert result.exit_code == 2
    assert "PyTorch" in result.output and "pip install" in result.output


def test_cli_json_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_run_suite", fake_suites([]))
    monkeypatch.setattr(runner, "make_plan", lambda *a, **k: TINY)
    result = cli(["--device", "cpu", "--quick", "--json", "--output", str(tmp_path / "x.toml")])
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output[result.output.index("{") :])
    assert data["profile"]["provenance"]["kind"] == "measured"
    assert set(data["csv"]) == {*runner.SUITES, runner.PROBE_TABLE}


MICRO = Plan(
    **{
        **TINY.__dict__,
        "working_set_bytes": (256 * KIB, 1 * MIB),
        "transfer_bytes": (256 * KIB,),
        "rounds": 1,
    }
)


def test_each_suite_runs_at_tiny_size_on_cpu() -> None:
    from moesim.calibrate.suites import gemm, launch, memory, moe
    from moesim.calibrate.suites.timing import Timer, resolve_device

    device = resolve_device("cpu", 1)
    timer = Timer(device, MICRO.flush_bytes)
    fractions: list[float] = []
    mem_rows = memory.run_memory(timer, device, MICRO, fractions.append)
    kinds = {"working_set", "transfer", "fixed_warm", "fixed_cold", "transcendental"}
    assert {r["kind"] for r in mem_rows} == kinds
    assert all(r["median_s"] > 0 for r in mem_rows)
    evaluated = [r for r in mem_rows if r["kind"] == "transcendental"]
    assert sorted(r["op"] for r in evaluated) == ["exp", "rsqrt", "silu"]
    assert all(r["elements"] == memory.TRANSCENDENTAL_ELEMENTS for r in evaluated)
    assert fractions[-1] == 1.0 and fractions == sorted(fractions)
    launch_rows = launch.run_launch(timer, device, MICRO)
    eager = [r["n_kernels"] for r in launch_rows if r["kind"] == "eager_host"]
    gemms = [r for r in launch_rows if r["kind"] == "eager_gemm_host"]
    assert eager == list(MICRO.launch_counts)
    assert [r["n_kernels"] for r in gemms] == list(MICRO.launch_gemm_counts)
    assert all(
        r["seconds"] > 0
        and r["n"] == MICRO.launch_repeats
        and (r["gemm_m"], r["gemm_k"], r["gemm_n"]) == MICRO.launch_gemm_mkn
        for r in gemms
    )
    # Host time of a batch grows with the GEMMs in it (each call at least dispatches).
    assert gemms[-1]["seconds"] > gemms[0]["seconds"]
    gemm_rows = gemm.run_gemm(timer, device, MICRO, ["fp32"])
    assert len(gemm_rows) == len(MICRO.gemm_m) * len(MICRO.gemm_shapes)
    assert all(r["flops"] == 2 * r["m"] * r["k"] * r["n"] for r in gemm_rows)
    moe_rows = moe.run_moe(timer, device, MICRO, "fp32")
    assert {(r["m"], r["distinct"]) for r in moe_rows if r["size_class"] == "small"} >= {(1, 2), (4, 8)}
    assert all(r["distinct"] <= min(r["n_experts"], r["slots"]) for r in moe_rows)


def test_from_csv_refits_the_suites_present_and_falls_back_for_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured = tmp_path / "run" / "cpu.toml"
    measured.parent.mkdir()
    monkeypatch.setattr(runner, "_run_suite", fake_suites([]))
    original = calibrate("cpu", measured, plan=TINY, name="cpu-run")
    suite_path(measured, "moe").unlink()

    def no_device(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("--from-csv must not measure")

    monkeypatch.setattr(runner, "_run_suite", no_device)
    out = tmp_path / "repo" / "rebuilt.toml"
    out.parent.mkdir()
    result = runner.rebuild_from_csv("cpu", out, source=measured.with_suffix(""), name="cpu-rebuilt")
    assert result.failures.keys() == {"moe"}
    rebuilt = load_profile(str(out))
    assert rebuilt.name == "cpu-rebuilt" and rebuilt.provenance.kind == "measured"
    assert rebuilt.empirical == original.profile.empirical  # same rows, same fit
    assert any("moe suite missing" in a for a in rebuilt.provenance.assumptions)
    # The CSVs now live beside the rebuilt profile, under its stem, byte for byte the same rows.
    for suite in ("memory", "launch", "gemm"):
        assert read_rows(suite_path(out, suite)) == read_rows(suite_path(measured, suite))
    assert not suite_path(out, "moe").exists()
    # Rebuilding again from the copies beside it (the flag without a stem) gives the same profile.
    again = runner.rebuild_from_csv("cpu", out, name="cpu-rebuilt")
    assert again.profile.empirical == rebuilt.empirical


def test_from_csv_builds_a_gpu_profile_without_a_gpu(tmp_path: Path) -> None:
    from tests.test_calibrate_fit import _h200_tables

    tables = _h200_tables(synthetic_tables().memory or [])
    stem = tmp_path / "h200-run"
    for suite in ("memory", "launch"):
        meta = {"suite": suite, "device": "NVIDIA H200", "backend": "cuda", "plan": "x", "quick": False}
        runner.write_rows(suite_path(stem.with_suffix(".toml"), suite), getattr(tables, suite), meta)
    out = tmp_path / "h200.toml"
    result = cli(["--device", "cuda", "--from-csv", str(stem), "--output", str(out), "--name", "h200-m"])
    assert result.exit_code == 0, result.output
    profile = load_profile(str(out))
    assert profile.name == "h200-m" and not profile.is_cpu
    assert profile.empirical.launch_eager_us == pytest.approx(8.0, rel=1e-3)
    assert profile.empirical.gemm_efficiency == load_profile("h200").empirical.gemm_efficiency  # fell back
    notes = profile.provenance.assumptions
    assert any("gemm suite missing" in a for a in notes) and any("moe suite missing" in a for a in notes)
    # Measured elsewhere than cuda: refused in one line.
    wrong = cli(["--device", "cpu", "--from-csv", str(stem), "--output", str(tmp_path / "c.toml")])
    assert wrong.exit_code == 2 and "measured on cuda" in wrong.output


def test_from_csv_errors(tmp_path: Path) -> None:
    out = str(tmp_path / "x.toml")
    nothing = cli(["--device", "cuda", "--from-csv", str(tmp_path / "none"), "--output", out])
    assert nothing.exit_code == 2 and "no suite CSV" in nothing.output
    clash = cli(["--device", "cuda", "--from-csv", "--quick", "--output", out])
    assert clash.exit_code == 2 and "--quick" in clash.output


def test_a_suite_the_machine_drifted_through_is_repeated_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.toml"
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    probe = ScriptedProbe({("after:gemm", 1): 0.7})  # the first gemm run drifts 30%, the repeat not at all
    monkeypatch.setattr(runner, "_start_probe", lambda timer, device: probe)
    result = calibrate("cpu", out, plan=TINY)
    assert calls == ["memory", "launch", "gemm", "gemm", "moe"]
    assert any("drifted 30.0% during the gemm suite" in note for note in result.notes)
    assert any("gemm suite repeated" in note and "kept the repeat" in note for note in result.notes)
    figures = result.profile.fit_quality[DRIFT_KEY]
    assert figures["gemm_drift"] == 0.0 and figures["gemm_threshold"] == MIN_DRIFT  # a noiseless probe's
    # Before and after each suite whose figures follow a part (the kept run's); the MoE diagnostics unprobed.
    assert len(read_rows(suite_path(out, "probe"))[1]) == 6

    # The probes travel with the suite CSVs: a rebuild from them normalises exactly as the run did.
    again = runner.rebuild_from_csv("cpu", tmp_path / "again.toml", source=tmp_path / "p")
    assert again.profile.fit_quality[DRIFT_KEY] == figures
    assert again.profile.empirical == result.profile.empirical


def test_a_drift_that_persists_keeps_the_calmer_run_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    probe = ScriptedProbe({("after:launch", 1): 0.8, ("after:launch", 2): 0.6})
    monkeypatch.setattr(runner, "_start_probe", lambda timer, device: probe)
    result = calibrate("cpu", tmp_path / "p.toml", plan=TINY)
    assert calls.count("launch") == 2  # repeated once, not until calm
    assert any("kept the first run (still beyond the probe's noise" in note for note in result.notes)
    assert result.profile.fit_quality[DRIFT_KEY]["launch_drift"] == pytest.approx(0.2)


def test_a_suite_is_not_repeated_on_a_change_within_the_scatter_of_the_run_s_earlier_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Noiseless probes whose readings jump 10% from one probe to the next: the first suite has no earlier
    probes and is repeated on its 10% (MIN_DRIFT decides); the later suites' 10% is within the scatter
    between the run's earlier probes and repeats nothing (gated on the probes' own noise, both would repeat)."""
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    jumps = {
        ("after:memory", 1): 0.9,
        ("after:memory", 2): 0.9,
        ("after:launch", 1): 0.9,
        ("after:gemm", 1): 0.9,
    }
    monkeypatch.setattr(runner, "_start_probe", lambda timer, device: ScriptedProbe(jumps))
    out = tmp_path / "p.toml"
    result = calibrate("cpu", out, plan=TINY)
    assert calls == ["memory", "memory", "launch", "gemm", "moe"]
    figures = result.profile.fit_quality[DRIFT_KEY]
    assert figures["gemm_drift"] == pytest.approx(0.1) and figures["launch_drift"] == pytest.approx(0.1)
    # The profile records the threshold the rule used (the earlier probes' step scatter), not the MIN_DRIFT
    # the probes' own zero noise gives.
    probes = runner.read_probes(suite_path(out, "probe"))
    for suite in ("launch", "gemm"):
        at = next(i for i, p in enumerate(probes) if p.label == f"before:{suite}")
        judged = suite_drift_in_run(suite, probes[at], probes[at + 1], probes[:at])
        assert not judged.drifted and judged.threshold > 0.3
        assert figures[f"{suite}_threshold"] == pytest.approx(judged.threshold)
    assert figures["memory_threshold"] == MIN_DRIFT  # no earlier probes: its own (zero) noise and the floor


def test_a_drift_within_the_probes_noise_or_in_a_part_the_suite_does_not_follow_repeats_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(runner, "_run_suite", fake_suites(calls))
    # 10% slower after the gemm suite, measured by probes whose medians carry 4% noise each: the threshold is
    # three standard errors of their difference, 3 × √2 × 4% = 17%.
    monkeypatch.setattr(
        runner, "_start_probe", lambda timer, device: ScriptedProbe({("after:gemm", 1): 0.9}, noise=0.04)
    )
    result = calibrate("cpu", tmp_path / "p.toml", plan=TINY)
    assert calls == ["memory", "launch", "gemm", "moe"]
    figures = result.profile.fit_quality[DRIFT_KEY]
    assert figures["gemm_drift"] == pytest.approx(0.1)
    assert figures["gemm_threshold"] == pytest.approx(NOISE_MULTIPLE * 2**0.5 * 0.04)
    assert not any("repeating" in note for note in result.notes)

    # The launch suite's figures follow the host's dispatch alone: DRAM slowing during it is not its drift.
    calls.clear()
    monkeypatch.setattr(
        runner,
        "_start_probe",
        lambda timer, device: ScriptedProbe({("after:launch", 1): 0.5}, parts=("memory",)),
    )
    result = calibrate("cpu", tmp_path / "q.toml", plan=TINY)
    assert calls == ["memory", "launch", "gemm", "moe"]
    assert result.profile.fit_quality[DRIFT_KEY]["launch_drift"] == 0.0


def test_from_csv_reproduces_the_gemm_suite_brought_to_its_in_suite_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GEMM suite timed while the machine sped up 40%: its CSV keeps each point's rounds and the reference
    read in each, so a rebuild from the files alone brings the points to the suite's median speed as the run
    did, and the profile streams at the rate a machine steady at that speed gives."""
    from moesim.calibrate.fits.build import build_profile
    from tests.test_calibrate_drift import rounds_of

    truth = synthetic_tables()
    ramped = rounds_of(truth.gemm or [], [0.8, 0.86, 0.92, 1.0, 1.05, 1.12, 1.2], noise=0.02)
    others = fake_suites([])
    monkeypatch.setattr(
        runner, "_run_suite", lambda suite, *a: ramped if suite == "gemm" else others(suite, *a)
    )
    out = tmp_path / "p.toml"
    measured = calibrate("cpu", out, plan=TINY).profile
    gemm_csv = read_rows(suite_path(out, "gemm"))[1]
    assert all(len(str(r["reference_tflops"]).split(";")) == 7 for r in gemm_csv)
    again = runner.rebuild_from_csv("cpu", tmp_path / "again.toml", source=tmp_path / "p").profile
    assert again.empirical == measured.empirical and again.datasheet == measured.datasheet
    assert again.fit_quality["gemm_reference"] == measured.fit_quality["gemm_reference"]
    assert measured.fit_quality["gemm_reference"]["reference_rounds_corrected"] >= 5
    steady, _ = build_profile(truth, "steady")
    stream = measured.datasheet.memory_bandwidth_gbps * measured.empirical.memory_bandwidth_fraction
    assert stream == pytest.approx(steady.datasheet.memory_bandwidth_gbps, rel=0.02)


def test_the_cpu_gemm_suite_reads_the_probe_s_streaming_gemm_in_every_round() -> None:
    from moesim.calibrate.suites import gemm
    from moesim.calibrate.suites.timing import Timer, resolve_device

    device = resolve_device("cpu", 1)
    timer = Timer(device, TINY.flush_bytes)
    probe = Probe(timer, device, TINY_PROBE)
    readings: list[float] = []

    def reference() -> float:
        readings.append(probe.stream_reference())
        return readings[-1]

    rows = gemm.run_gemm(timer, device, TINY, ["fp32"], reference=reference)
    probe.close()
    per_round = gemm.REFERENCE_READINGS
    assert len(readings) == per_round * TINY.gemm_repeats and all(r > 0 for r in readings)
    rounds = [statistics.median(readings[i : i + per_round]) for i in range(0, len(readings), per_round)]
    for row in rows:
        assert row["reference_tflops"] == ";".join(repr(r) for r in rounds)
        times = [float(t) for t in row["round_s"].split(";")]
        assert len(times) == TINY.gemm_repeats and sorted(times)[1] == row["median_s"]
