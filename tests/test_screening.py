"""Design screening: spaces, constraints that hold for every design kept, a Pareto front without dominated
designs, the base design reproducing `simulate`, identical tables from every backend, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import moesim
from moesim.commands.screen import screen_command
from moesim.errors import MoesimError
from moesim.simulator.models.weights import param_counts
from moesim.simulator.scenario import Scenario
from moesim.simulator.screening.backends import chunked, run_local, run_ray
from moesim.simulator.screening.constraints import Constraint, apply_constraints
from moesim.simulator.screening.evaluate import DesignItem, ScreenSettings, make_tasks
from moesim.simulator.screening.pareto import pareto_front, ranking
from moesim.simulator.screening.screen import screen
from moesim.simulator.screening.space import Design, grid, parse_values, read_designs, sample
from tests.core_fixtures import h200, model

ROOT = Path(__file__).resolve().parents[1]
BASE = "qwen3-30b-a3b"
BATCHES = (1, 8)
KS = (1, 3)


def quick_settings(**changes: object) -> ScreenSettings:
    scenario = Scenario(BASE, h200(), drafter="fraction:0.1").replace(**changes)
    return ScreenSettings(scenario, batches=BATCHES, draft_lens=KS)


# ---- spaces ----


def test_values_lists_and_ranges() -> None:
    assert parse_values("experts", "64,128") == [64, 128]
    assert parse_values("--expert-width", "256..2048") == [256, 512, 1024, 2048]
    assert parse_values("expert_width", "256..1024:256") == [256, 512, 768, 1024]
    assert parse_values("weight-format", "bf16,fp8") == ["bf16", "fp8"]
    for field, text in [
        ("experts", "64,x"),
        ("experts", "512..64"),
        ("weight-format", "a..b"),
        ("nope", "1"),
    ]:
        with pytest.raises(MoesimError):
            parse_values(field, text)


def test_grid_is_every_combination_and_a_sample_is_a_seeded_subset() -> None:
    axes = {"n_experts": [64, 128, 256], "top_k": [2, 4, 8, 16]}
    designs = grid(axes)
    assert len(designs) == 12
    assert len({d.overrides for d in designs}) == 12
    picked = sample(axes, 5, seed=3)
    assert [d.overrides for d in picked] == [d.overrides for d in sample(axes, 5, seed=3)]
    assert len({d.overrides for d in picked}) == 5
    assert {d.overrides for d in picked} <= {d.overrides for d in designs}
    assert grid({}) == [Design(0, ())]


def test_designs_from_csv(tmp_path: Path) -> None:
    path = tmp_path / "designs.csv"
    path.write_text("experts,top-k,expert_width\n64,4,\n128,8,512\n")
    designs = read_designs(path)
    assert [d.as_dict() for d in designs] == [
        {"n_experts": 64, "top_k": 4},
        {"n_experts": 128, "top_k": 8, "expert_width": 512},
    ]
    (tmp_path / "bad.csv").write_text("colour\nred\n")
    with pytest.raises(MoesimError, match="unknown field"):
        read_designs(tmp_path / "bad.csv")


# ---- constraints ----


@pytest.mark.parametrize("kind", ["active-params", "total-params"])
def test_solved_constraint_holds_for_every_design_kept(kind: str) -> None:
    base = model(BASE)
    designs = grid({"n_experts": [32, 64, 128, 256, 512], "top_k": [1, 2, 4, 8]})
    constraint = Constraint(kind, free_field="expert-width", multiple=16, tolerance=0.02)
    out = apply_constraints(base, designs, [constraint])
    count = (
        (lambda s: param_counts(s).active) if kind == "active-params" else (lambda s: param_counts(s).total)
    )
    target = count(base)
    assert out.kept
    for design, spec, solved in out.kept:
        assert abs(count(spec) - target) <= 0.02 * target
        assert solved["expert_width"] % 16 == 0
        assert spec.expert_width == solved["expert_width"]
        assert all(getattr(spec, f) == v for f, v in design.overrides)
    assert len(out.kept) + len(out.dropped) == len(designs)


def test_filter_constraint_drops_off_target_designs_with_a_reason() -> None:
    base = model(BASE)
    designs = grid({"top_k": [4, 8, 16]})  # only top-8 keeps the base's active parameters
    out = apply_constraints(base, designs, [Constraint("active-params")])
    assert [d.as_dict() for d, _, _ in out.kept] == [{"top_k": 8}]
    assert {entry["label"] for entry in out.dropped} == {"top-k=4", "top-k=16"}
    assert all("active-params" in str(entry["reason"]) for entry in out.dropped)


def test_progress_counts_every_design_dropped_ones_included() -> None:
    moved: list[int] = []
    designs = grid({"top_k": [4, 8, 16]})  # two of three dropped by the constraint
    result = screen(
        model(BASE),
        designs,
        quick_settings(),
        [Constraint("active-params")],
        workers=1,
        progress=moved.append,
    )
    assert len(result.results) == 1 and sum(moved) == len(designs)


def test_workers_constrain_the_designs_as_apply_constraints_does_and_report_chunk_by_chunk() -> None:
    # The screen hands raw designs to its workers, which solve the constraints there: the same kept designs
    # and figures, the same dropped ones with the same reasons, and a progress call per chunk.
    base = model(BASE)
    designs = grid({"top_k": [2, 4, 8, 16], "n_experts": [4, 64, 128]})
    constraints = [Constraint("active-params", "expert-width", multiple=16)]
    moved: list[int] = []
    result = screen(base, designs, quick_settings(), constraints, workers=1, progress=moved.append)
    constrained = apply_constraints(base, designs, constraints)
    assert result.results == run_local(quick_settings(), make_tasks(base, constrained.kept), workers=1)
    assert result.dropped == sorted(constrained.dropped, key=lambda entry: int(entry["design"]))  # type: ignore[call-overload]
    assert (
        result.dropped
        and sum(moved) == len(designs)
        and len(moved) == len(chunked([DesignItem(base, d) for d in designs], 1))
    )


@pytest.mark.parametrize(("n", "workers"), [(7, 1), (300, 2), (3000, 2), (8226, 2), (20000, 2)])
def test_chunks_keep_each_expert_count_and_top_k_together(n: int, workers: int) -> None:
    # A worker samples an (N, k)'s routing banks once per chunk: an (N, k) spans several chunks only when its
    # designs outnumber MAX_KEY_CHUNK, and then in near-equal pieces. Every design is in exactly one chunk.
    from moesim.simulator.screening.backends import MAX_KEY_CHUNK

    base = model(BASE)
    axes = {"n_experts": parse_values("n_experts", "16,32,64,128"), "top_k": parse_values("top_k", "1,2,4,8")}
    axes["layers"] = parse_values("layers", "8..4000:8")
    items = [DesignItem(base, d) for d in sample(axes, n, seed=1)]
    chunks = chunked(items, workers)
    assert sorted(i.design.index for chunk in chunks for i in chunk) == sorted(i.design.index for i in items)
    spans: dict[tuple[int, int], list[int]] = {}
    for chunk in chunks:
        for key in {item.routing_key for item in chunk}:
            spans.setdefault(key, []).append(sum(item.routing_key == key for item in chunk))
    for key, sizes in spans.items():
        assert len(sizes) == -(-sum(sizes) // MAX_KEY_CHUNK), key
        assert max(sizes) - min(sizes) <= 1 or len(sizes) == 1
    assert len(chunks) >= min(n, 2 * workers)


def test_invalid_designs_are_dropped_not_fatal() -> None:
    out = apply_constraints(model(BASE), grid({"n_experts": [4, 64], "top_k": [8]}), [])
    assert [d.as_dict()["n_experts"] for d, _, _ in out.kept] == [64]
    assert "top_k" in str(out.dropped[0]["reason"])


def test_a_free_field_that_is_also_varied_is_refused() -> None:
    with pytest.raises(MoesimError, match="both varied and solved"):
        apply_constraints(
            model(BASE), grid({"expert_width": [256, 512]}), [Constraint("active-params", "expert-width")]
        )


# ---- Pareto front and ranking ----


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30))
def test_pareto_front_has_no_dominated_point_and_dominates_the_rest(points: list[tuple[int, int]]) -> None:
    def dominates(a: tuple[int, int], b: tuple[int, int]) -> bool:
        return a[0] >= b[0] and a[1] >= b[1] and a != b

    front = pareto_front([(float(x), float(y)) for x, y in points])
    assert front == sorted(set(front))
    for i in front:
        assert not any(dominates(p, points[i]) for p in points)
    for i in set(range(len(points))) - set(front):
        assert any(dominates(points[j], points[i]) for j in front)


# ---- evaluation ----


@pytest.fixture(scope="module")
def small_screen():  # type: ignore[no-untyped-def]
    designs = grid({"n_experts": [64, 128, 256], "top_k": [4, 8]})
    return screen(
        model(BASE),
        designs,
        quick_settings(),
        [Constraint("active-params", "expert-width", multiple=16)],
        workers=1,
    )


def test_the_base_design_reproduces_simulate() -> None:
    base = model(BASE)
    settings = quick_settings()
    result = screen(base, grid({}), settings, workers=1)
    (design,) = result.results
    swept = moesim.sweep([base], settings.scenario, batches=BATCHES, draft_lens=KS)
    for b in BATCHES:
        best = max((r for r in swept.rows if r.batch == b), key=lambda r: r.speedup)
        metrics = design.at(b)
        assert metrics is not None
        assert (metrics.speedup, metrics.best_draft_len, metrics.verify_step_s, metrics.draft_s) == (
            best.speedup,
            best.draft_len,
            best.verify_step_s,
            best.draft_s,
        )
        engine = moesim.simulate(settings.scenario, batch=b, draft_len=best.draft_len)
        assert metrics.speedup == pytest.approx(engine.speedup, rel=0.01)
        assert metrics.decode_step_s == pytest.approx(engine.decode.step_s, rel=0.01)
        assert metrics.tokens_per_s == pytest.approx(
            b * engine.tokens_per_step / (engine.draft_s + engine.verify.step_s), rel=0.01
        )


def test_every_design_has_its_figures_ranking_and_front(small_screen) -> None:  # type: ignore[no-untyped-def]
    assert len(small_screen.results) == 6
    for r in small_screen.results:
        assert [m.batch for m in r.batches] == list(BATCHES)
        for m in r.batches:
            assert m.best_draft_len in KS
            assert m.verify_step_s >= m.decode_step_s > 0
            assert m.tokens_per_s == pytest.approx(m.batch * m.speedup / m.decode_step_s)
    assert sorted(small_screen.ranking) == sorted(r.index for r in small_screen.results)
    first, *rest = [small_screen.by_index()[i].at(1).speedup for i in small_screen.ranking]  # type: ignore[union-attr]
    assert all(first >= value for value in rest)
    assert ranking(small_screen.results, "tokens@8")[0] in small_screen.front
    rows = small_screen.rows()
    assert {row["pareto"] for row in rows} == {True, False} or all(row["pareto"] for row in rows)
    assert all("expert_width" in row and "speedup_b8" in row for row in rows)


def test_a_process_pool_gives_the_same_table_as_one_process(small_screen) -> None:  # type: ignore[no-untyped-def]
    base = model(BASE)
    designs = grid({"n_experts": [64, 128, 256], "top_k": [4, 8]})
    constrained = apply_constraints(base, designs, [Constraint("active-params", "expert-width", multiple=16)])
    pooled = run_local(quick_settings(), make_tasks(base, constrained.kept), workers=2)
    assert pooled == small_screen.results


@pytest.fixture
def local_ray():  # type: ignore[no-untyped-def]
    """A local Ray with two CPUs in this process (skips without Ray), shut down after the test."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_results_as_a_process_pool_for_many_chunks(local_ray) -> None:  # type: ignore[no-untyped-def]
    # Many chunks and no progress callback: each chunk must be fetched once (it once looped on a done one).
    base = model(BASE)
    designs = grid(
        {
            "n_experts": [16, 32, 64, 128, 256],
            "top_k": [1, 2, 4, 8],
            "num_kv_heads": [2, 4, 8],
            "n_shared_experts": [0, 1],
        }
    )
    kept = apply_constraints(base, designs, [Constraint("active-params", "expert-width", multiple=16)]).kept
    tasks = make_tasks(base, kept)
    assert len(tasks) >= 100 and len(chunked(tasks, 2)) > 2
    on_ray = run_ray(quick_settings(), tasks, workers=2)
    assert on_ray == run_local(quick_settings(), tasks, workers=2)
    assert [r.index for r in on_ray] == [task.design.index for task in tasks]
    moved: list[int] = []
    run_ray(quick_settings(), tasks[:20], progress=moved.append, workers=2)
    assert sum(moved) == 20
    assert local_ray.is_initialized()  # a Ray it did not start is left running


def test_ray_gives_the_same_table_as_the_local_backend(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    args = [
        "--model", BASE, "--experts", "64,128,256", "--top-k", "4,8", "--batch", "1,8", "--draft-len", "1,3",
        "--constraint", "active-params", "--free", "expert-width", "--free-multiple", "16",
        "--draft", "fraction:0.1", "--workers", "2", "--json",
    ]  # fmt: skip
    local = CliRunner().invoke(screen_command, args)
    assert local.exit_code == 0, local.output
    # The CLI in its own process, as a user runs it: it starts a local Ray with two CPUs and shuts it down.
    ray_run = subprocess.run(
        [sys.executable, "-c", "from moesim.cli import main; main()", "screen", *args, "--backend", "ray"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        },
    )
    assert ray_run.returncode == 0, ray_run.stderr[-2000:]
    assert json.loads(ray_run.stdout) == json.loads(local.output)


def test_fits_drops_designs_that_do_not_fit_one_gpu() -> None:
    from moesim.simulator.plan.layout import LayoutRequest

    result = screen(
        model(BASE),
        grid({"expert_width": [768, 6144]}),
        quick_settings(layout=LayoutRequest(gpus=1)),
        [Constraint("fits")],
        workers=1,
    )
    assert [r.overrides for r in result.results] == [{"expert_width": 768}]
    assert result.dropped[0]["label"] == "expert-width=6144"
    assert "fits" in result.dropped[0]["reason"]


# ---- CLI ----


def test_cli_json_csv_and_plot(tmp_path: Path) -> None:
    args = [
        "--model", BASE, "--experts", "64,128", "--top-k", "8", "--batch", "1,8", "--draft-len", "1,3",
        "--constraint", "active-params", "--free", "expert-width", "--free-multiple", "16",
        "--draft", "fraction:0.1", "--workers", "1",
        "--csv", str(tmp_path / "s.csv"), "--plot", str(tmp_path / "front.png"), "--json",
    ]  # fmt: skip
    out = CliRunner().invoke(screen_command, args)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert len(data["designs"]) == 2
    assert data["pareto_front"] and set(data["pareto_front"]) <= {0, 1}
    assert "solving expert_width" in data["constraints"][0]
    assert (tmp_path / "front.png").stat().st_size > 0
    assert (tmp_path / "s.csv").read_text().startswith("design,label,")


def test_cli_serving_engine_and_step_flags_reach_the_screen() -> None:
    """Every step and SD flag shared with sweep is the screen's too (--serving-engine was once ignored)."""
    common = ["--model", BASE, "--experts", "64", "--batch", "1", "--draft-len", "1,3", "--workers", "1"]

    def first(*extra: str) -> dict:
        out = CliRunner().invoke(screen_command, [*common, *extra, "--json"])
        assert out.exit_code == 0, out.output
        data = json.loads(out.output)
        return {**data["assumptions"], **data["designs"][0]["batches"][0]}

    ideal, vllm = first(), first("--serving-engine", "vllm")
    assert (ideal["serving_engine"], vllm["serving_engine"]) == ("ideal", "vllm")
    assert vllm["speedup"] != ideal["speedup"]
    assert first("--context-len", "8192")["decode_step_s"] > ideal["decode_step_s"]
    out = CliRunner().invoke(screen_command, [*common, "--max-memory-gb", "0.0001"])
    assert out.exit_code == 2 and "max-memory-gb" in out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--experts", "64", "--free", "expert-width"], "--free"),
        (["--experts", "sixty"], "n_experts"),
        (["--objective", "speedup@3"], "not screened"),
        (["--address", "x:1"], "--address"),
        (["--plot", "front.bmp"], "--plot"),
        (["--experts", "64", "--workers", "0"], "--workers"),
        (["--designs", str(Path(__file__).parent.parent / "docs" / "screen-front-h200.png")], "PNG image"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str) -> None:
    out = CliRunner().invoke(
        screen_command, ["--model", BASE, "--workers", "1", "--batch", "1", "--draft-len", "1", *args]
    )
    assert out.exit_code == 2
    assert message in out.output
    assert "Traceback" not in out.output
