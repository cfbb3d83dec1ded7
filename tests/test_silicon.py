"""Silicon profiles: the reader of aiconfigurator-core's tables, the fits with held-out shapes, the CLI, and
the bundled profiles against 200 random rows of the real H200 and B200 tables.

The reader and the fits run on a fixture cut from the real tables (tests/data/silicon, made by
tests/data/generate_silicon_fixture.py from aiconfigurator-core 0.12.0, Apache-2.0), so they need only
pyarrow; the tests on the full database skip, saying why, when aiconfigurator-core is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("pyarrow", reason="the silicon reader needs pyarrow (pip install 'moesim[silicon]')")

from moesim.calibrate.fits.silicon import tables
from moesim.calibrate.fits.silicon.build import calibrate_from_silicon
from moesim.calibrate.fits.silicon.holdout import HELD_OUT_EVERY, held_out_mask
from moesim.calibrate.fits.silicon.moe_fit import balanced_rank_work, row_components
from moesim.cli import cli
from moesim.errors import MoesimError
from moesim.simulator.hardware.profile import list_profiles, load_profile
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.simulate import simulate_expert_block

FIXTURE = Path(__file__).parent / "data" / "silicon"
HAVE_DATABASE = importlib.util.find_spec(tables.PACKAGE) is not None
needs_database = pytest.mark.skipif(
    not HAVE_DATABASE, reason="aiconfigurator-core is not installed (pip install 'moesim[silicon]')"
)


def test_the_reader_lists_the_fixture_with_its_row_counts() -> None:
    collections = tables.scan(FIXTURE)
    by_label = {c.label: c.rows for c in collections}
    assert by_label["h200_sxm/sglang/0.5.14/moe_perf"] == 810
    assert by_label["h200_sxm/nccl/2.29.2/nccl_perf"] == 504
    text = tables.listing(collections, FIXTURE)
    assert "h200_sxm" in text and "sglang/0.5.14:" in text and "moe_perf* 810" in text


def test_selection_takes_the_newest_version_or_the_newest_at_or_below_the_one_asked() -> None:
    collections = tables.scan(FIXTURE)
    newest = tables.select(collections, "h200_sxm/sglang")
    assert newest.tables["moe_perf"].version == "0.5.14"
    assert newest.tables["nccl_perf"].framework == "nccl"  # the shared collective tables come along
    older = tables.select(collections, "h200_sxm/sglang/0.5.10")
    assert older.tables["moe_perf"].version == "0.5.10"
    assert "gemm_perf" not in older.tables  # only 0.5.14 measured GEMMs in the fixture


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("h200_sxm", "SYSTEM/FRAMEWORK"),
        ("h999/sglang", "unknown system"),
        ("h200_sxm/tgi", "no framework"),
        ("h200_sxm/sglang/9.9", "no version"),
    ],
)
def test_bad_selections_name_the_flag_and_the_choices(text: str, words: str) -> None:
    with pytest.raises(MoesimError, match=words) as info:
        tables.select(tables.scan(FIXTURE), text)
    assert info.value.field == "--from-silicon"


def test_the_schema_check_names_the_file_and_the_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = FIXTURE / "h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet"
    broken = tmp_path / "h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet"
    broken.parent.mkdir(parents=True)
    table = pq.read_table(source)
    pq.write_table(table.drop_columns(["k"]), broken)
    (collection,) = tables.scan(tmp_path)
    with pytest.raises(MoesimError, match=r"gemm_perf: k.*column is missing"):
        tables.read_columns(collection)
    negative = table.set_column(
        table.schema.get_field_index("latency"), "latency", pa.array([-1.0] * table.num_rows)
    )
    pq.write_table(negative, broken)
    (collection,) = tables.scan(tmp_path)
    with pytest.raises(MoesimError, match="latency"):
        tables.read_columns(collection)


def test_balanced_routing_hits_every_expert_once_tokens_times_top_k_reach_them() -> None:
    assert balanced_rank_work(1, 128, 8, 1) == (8.0, 8.0)
    assert balanced_rank_work(16, 128, 8, 1) == (128.0, 128.0)
    assert balanced_rank_work(64, 128, 8, 1) == (128.0, 512.0)
    assert balanced_rank_work(4, 256, 8, 8) == (4.0, 4.0)  # 32 assignments over 8 ranks
    assert balanced_rank_work(1, 256, 8, 16) == (1.0, 1.0)  # a rank that gets one


def test_held_out_shapes_are_never_fitted() -> None:
    n = np.repeat(np.arange(12), 5)
    held = held_out_mask(n)
    assert held.sum() == 15  # 3 of 12 shapes, all their rows
    for shape in range(12):
        assert len(set(held[n == shape])) == 1
    one_shape = held_out_mask(np.zeros(8))  # too few shapes to hold one out: every fourth row instead
    assert one_shape.sum() == 8 // HELD_OUT_EVERY


def test_fused_moe_components_are_the_plan_priced_by_the_cost_model() -> None:
    """With the profile's own terms the components price the row as moesim's MoE block, less its router."""
    hw = load_profile("h200")
    one = np.array([1])
    comp = row_components(hw, one * 2048, one * 768, one * 128, one * 8, one, one, np.array([256]), "bf16")
    predicted = comp.predict_s(hw.empirical.expert_gemm["bf16"])[0]  # type: ignore[index]
    plan_s = simulate_expert_block(load_model("qwen3-30b-a3b"), hw, 256, 128)  # the router and top-k too
    assert 250e-6 < predicted < plan_s  # sglang measured 327 us for this row (h200_sxm, bf16, 256 tokens)


def test_a_fixture_calibration_writes_a_silicon_profile_with_provenance_on_every_fitted_field(
    tmp_path: Path,
) -> None:
    result = calibrate_from_silicon("h200_sxm/sglang", str(FIXTURE))
    profile = result.profile
    assert profile.provenance.kind == "silicon"
    assert profile.name == "h200_sxm-sglang"
    # a fitted field's documented-default note gives way to its fit's
    assert not any(
        a.startswith("empirical.expert_gemm: documented default") for a in profile.provenance.assumptions
    )
    assert set(result.quality) >= {"expert_gemm.bf16", "expert_gemm.fp8", "node.scale_up"}
    # the bf16 GEMM curve is fitted and reported; it is stored only where it beats the datasheet's held out
    assert any(term.startswith("gemm_efficiency") for term in result.quality)
    for term, quality in result.quality.items():
        assert quality.rows_fit > 0 and quality.rows_held_out > 0, term
        assert any(term in a and quality.table in a for a in profile.provenance.assumptions), term
        assert profile.fit_quality[term.split(" ")[0]]["rows_fit"] == quality.rows_fit
    # the fitted MoE terms reproduce the rows they were fitted to at least as well as the documented defaults
    # (the fit minimises a robust relative loss, not the MAPE itself: 2% slack)
    for dtype in ("bf16", "fp8"):
        key = f"expert_gemm.{dtype}"
        assert result.quality[key].mape_fit_percent <= 1.02 * result.baseline[key].mape_fit_percent
    out = tmp_path / "h200.toml"
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "calibrate",
            "--from-silicon",
            "h200_sxm/sglang",
            "--silicon-data",
            str(FIXTURE),
            "--output",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    fits = json.loads(res.output)["fits"]
    assert {f["term"] for f in fits} == set(result.quality)
    assert load_profile(str(out)).provenance.kind == "silicon"


def test_cli_list_and_errors() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["calibrate", "--from-silicon", "list", "--silicon-data", str(FIXTURE)])
    assert res.exit_code == 0 and "h200_sxm" in res.output
    res = runner.invoke(
        cli, ["calibrate", "--from-silicon", "h200_sxm/sglang", "--silicon-data", str(FIXTURE)]
    )
    assert res.exit_code != 0 and "--output" in res.output and "Traceback" not in res.output
    res = runner.invoke(
        cli, ["calibrate", "--from-silicon", "list", "--device", "cpu", "--silicon-data", str(FIXTURE)]
    )
    assert res.exit_code != 0 and "--device" in res.output


def test_every_bundled_silicon_profile_says_where_it_comes_from() -> None:
    silicon = [n for n in list_profiles() if n.startswith("silicon/")]
    assert {"silicon/h200_sxm-sglang", "silicon/b200_sxm-trtllm", "silicon/h100_sxm-vllm"} <= set(silicon)
    for name in silicon:
        profile = load_profile(name)
        assert profile.provenance.kind == "silicon"
        assert (
            "aiconfigurator-core" in profile.provenance.source and "Apache-2.0" in profile.provenance.source
        )
        assert profile.fit_quality, name


# 200 random rows of the real H200 and B200 MoE tables that moesim's plans express (balanced routing, bf16 or
# block fp8, widths and experts that divide by moe_tp / moe_ep, not faster than their weights at peak
# bandwidth). Tolerance: mean absolute error 35%. The fitted MoE terms' held-out MAPE on these tables is
# 19-26% (h200_sxm/sglang) and the rows mix every shape and tensor/expert split of the tables, so 35% is
# 1.35-1.8x the held-out error; the documented datasheet defaults score about 30-40% on the same rows, so a
# profile that lost its fit would fail on at least one of the two systems.
ROW_TOLERANCE_MAPE = 35.0


@needs_database
@pytest.mark.parametrize("system", ["h200_sxm", "b200_sxm"])
def test_the_silicon_profile_predicts_200_random_rows_of_the_real_table(system: str) -> None:
    from moesim.calibrate.fits.silicon.moe_fit import MOE_DTYPES, _pick

    selection = tables.select(tables.scan(tables.database_root()), f"{system}/sglang")
    moe = selection.tables["moe_perf"]
    columns = tables.read_columns(moe)
    hw = load_profile(f"silicon/{system}-sglang")
    rng = np.random.default_rng(200)
    errors = []
    for moe_dtype, (fmt, dtype) in MOE_DTYPES.items():
        rows, _ = _pick(columns, moe_dtype)
        index = rng.choice(np.nonzero(rows)[0], 100, replace=False)
        c = {k: v[index] for k, v in columns.items()}
        comp = row_components(
            hw,
            c["hidden_size"],
            c["inter_size"],
            c["num_experts"],
            c["topk"],
            c["moe_tp_size"],
            c["moe_ep_size"],
            c["num_tokens"],
            fmt,
        )
        measured = c["latency"] * 1e-3
        possible = measured >= comp.weight_floor_s
        predicted = comp.predict_s(hw.empirical.expert_gemm[dtype])  # type: ignore[index]
        errors += list(np.abs(predicted[possible] - measured[possible]) / measured[possible] * 100)
    assert len(errors) >= 190
    assert float(np.mean(errors)) < ROW_TOLERANCE_MAPE


def test_memory_bound_gemm_rows_do_not_move_the_fitted_efficiency() -> None:
    """e(M) is identified by the rows that can be compute-bound (intensity at or above the ridge): making
    every memory-bound row slower leaves the fitted curve as it was, so a slow weight stream is never
    charged as arithmetic (which grouped expert GEMMs at a few rows per expert would then pay)."""
    from moesim.calibrate.fits.silicon.gemm_fit import fit_gemm

    gemm = tables.select(tables.scan(FIXTURE), "h200_sxm/sglang").tables["gemm_perf"]
    columns = tables.read_columns(gemm)
    hw = load_profile("h200")
    slow = dict(columns)
    slow["latency"] = np.where(columns["m"] < 64, columns["latency"] * 1.5, columns["latency"])
    before = {g.dtype: g.efficiency for g in fit_gemm(columns, hw, gemm.label)}
    after = {g.dtype: g.efficiency for g in fit_gemm(slow, hw, gemm.label)}
    assert before and before == after
    for curve in before.values():  # compute time M / e(M) never falls with more rows
        m, e = np.array(curve.m_tokens), np.array(curve.efficiency)
        assert np.all(np.diff(m / e) >= -1e-9 * m[1:] / e[1:])


def test_the_fixture_fits_attention_terms_that_beat_the_roofline_held_out() -> None:
    result = calibrate_from_silicon("h200_sxm/sglang", str(FIXTURE))
    attention = result.profile.empirical.attention
    assert attention is not None and set(attention) == {"gqa", "mla", "gqa_prefill", "mla_prefill"}
    for kind in ("gqa", "mla", "gqa_prefill", "mla_prefill"):
        fitted, roofline = result.quality[f"attention.{kind}"], result.baseline[f"attention.{kind}"]
        assert fitted.rows_fit > 0 and fitted.rows_held_out > 0
        assert fitted.mape_held_out_percent < roofline.mape_held_out_percent / 2
        assert attention[kind].fixed_us > 0  # decode attention has a floor beyond an empty launch


# 200 random rows each of the real H200 and B200 attention tables (grouped-query and MLA decode, grouped-query
# and MLA prefill; bf16 queries and KV cache, full attention, the framework's default kernel). Tolerance: mean
# absolute error 25%. The fitted terms' held-out MAPE on these tables is 12-24% (h200_sxm: 13-15%,
# b200_sxm/sglang: 16-24%), so 25% is 1.05-2x that; the roofline alone (a datasheet profile) scores 55-68%
# on the same rows, so a profile that lost its fit fails. MLA prefill: 35%. Its fitted terms miss by 20-26%
# (these 200 rows: h200_sxm 26%, b200_sxm 20%; held out 23% on h200_sxm/sglang, whose op runs at a sixth of
# the bf16 peak and leaves the largest residual), so 35% is 1.3-1.8x that; the roofline alone scores 71-84%.
ATTENTION_ROW_TOLERANCE_MAPE = {"gqa": 25.0, "mla": 25.0, "gqa_prefill": 25.0, "mla_prefill": 35.0}


@needs_database
@pytest.mark.parametrize("system", ["h200_sxm", "b200_sxm"])
def test_the_silicon_profile_predicts_200_random_attention_rows_of_the_real_tables(system: str) -> None:
    from moesim.calibrate.fits.silicon.attention_fit import _pick, row_kernels

    selection = tables.select(tables.scan(tables.database_root()), f"{system}/sglang")
    hw = load_profile(f"silicon/{system}-sglang")
    assert hw.empirical.attention is not None
    rng = np.random.default_rng(200)
    for table, kind in (
        ("generation_attention_perf", "gqa"),
        ("generation_mla_perf", "mla"),
        ("context_attention_perf", "gqa_prefill"),
        ("context_mla_perf", "mla_prefill"),
    ):
        columns = tables.read_columns(selection.tables[table])
        rows, _ = _pick(columns, kind)
        index = rng.choice(np.nonzero(rows)[0], 200, replace=False)
        c = {k: v[index] for k, v in columns.items()}
        ones = np.ones(200, dtype=np.int64)
        kv_heads = ones if kind.startswith("mla") else c["num_key_value_heads"]
        head_dim = ones if kind.startswith("mla") else c["head_dim"]
        cached = c["isl"] + c["step"] if "step" in c else c["isl"]
        priced = row_kernels(hw, kind, c["num_heads"], kv_heads, head_dim, c["batch_size"], cached)
        predicted = priced.predict_s(hw.empirical.attention[kind])
        measured = c["latency"] * 1e-3
        error = float(np.mean(np.abs(predicted - measured) / measured) * 100)
        assert error < ATTENTION_ROW_TOLERANCE_MAPE[kind], (kind, error)


def test_each_gemm_dtype_gets_its_own_curve_stored_only_where_it_beats_the_datasheet_held_out() -> None:
    """bf16's fitted curve becomes the shared one and fp8's fp8's own, each kept only when it predicts its
    dtype's held-out shapes better than the datasheet curve; either way its quality is reported."""
    result = calibrate_from_silicon("h200_sxm/sglang", str(FIXTURE))
    em = result.profile.empirical
    own = em.gemm_efficiency_by_dtype or {}
    for dtype, key in (("bf16", "gemm_efficiency"), ("fp8", "gemm_efficiency_by_dtype.fp8")):
        (term,) = [t for t in result.quality if t.split(" ")[0] == key]
        stored = "(reported" not in term
        fitted, datasheet = result.quality[term], result.baseline[term]
        assert stored == (fitted.mape_held_out_percent < datasheet.mape_held_out_percent), term
        assert result.profile.fit_quality[key]["stored"] == float(stored)
        if dtype == "fp8":
            assert (dtype in own) == stored
        else:
            assert (em.gemm_efficiency != load_profile("h200").empirical.gemm_efficiency) == stored
    assert set(own) <= {"fp8"}


def test_the_fixture_fits_all_to_all_terms_per_deepep_mode_that_beat_the_link_held_out() -> None:
    """SGLang's DeepEP rows (tests/data/silicon/h200_sxm/comm/sglang/0.5.12: every low-latency row, normal rows
    at DeepEP's default 20 SMs): a fixed time of about 10 us (low latency) / 27-39 us (normal) and an
    achieved rate well under NVLink 4's 450 GB/s; each mode is stored because it beats the datasheet link on
    the held-out shapes, where the direct all-to-all on the link misses by about two thirds."""
    result = calibrate_from_silicon("h200_sxm/sglang", str(FIXTURE))
    node = result.profile.node
    for mode in ("low_latency", "normal"):
        terms = node.all_to_all_terms(mode)  # type: ignore[arg-type]
        key = f"node.all_to_all.{mode}"
        assert terms is not None and key in result.quality, mode
        assert result.quality[key].mape_held_out_percent < 25.0
        assert result.baseline[key].mape_held_out_percent > 50.0
        for phase in ("dispatch", "combine"):
            assert 5.0 < getattr(terms, f"{phase}_fixed_us") < 60.0
            assert 50.0 < getattr(terms, f"{phase}_bandwidth_gbps") < 450.0
        assert result.profile.fit_quality[key]["stored"] == 1.0
    low, normal = node.all_to_all_terms("low_latency"), node.all_to_all_terms("normal")
    assert low is not None and normal is not None
    assert low.dispatch_fixed_us < normal.dispatch_fixed_us  # what the low-latency mode is for


# 200 random rows of the real H200 and B200 DeepEP dispatch / combine tables of SGLang (100 low-latency, 100
# normal at DeepEP's default 20 SMs; every shape moesim's plans express: top-k at most the experts), priced
# through moesim's own path (`collectives.collective_time_s` of the plan's dispatch / combine on the bundled
# profile's node). Tolerance: mean absolute error 25%. The fitted terms' held-out MAPE on these tables is
# 9-20% (the small-expert shapes, 8-16 experts, are the worst: DeepEP spreads a rank's receive over its
# experts) and these 200 rows score 11.5% (H200) and 12.8% (B200), so 25% is about twice that; the datasheet
# link scores 65% and 80% on the same rows, so a profile that lost its terms fails.
A2A_ROW_TOLERANCE_MAPE = 25.0


@needs_database
@pytest.mark.parametrize("system", ["h200_sxm", "b200_sxm"])
def test_the_silicon_profile_predicts_200_random_all_to_all_rows_of_the_real_tables(system: str) -> None:
    from moesim.calibrate.fits.silicon.a2a_fit import sglang_rows
    from moesim.simulator.execution.collectives import collective_time_s
    from moesim.simulator.plan.kernels import Collective

    selection = tables.select(tables.scan(tables.database_root()), f"{system}/sglang")
    node = load_profile(f"silicon/{system}-sglang").node
    rng = np.random.default_rng(200)
    errors = []
    for name in ("wideep_deepep_ll_perf", "wideep_deepep_normal_perf"):
        rows = sglang_rows(name, tables.read_columns(selection.tables[name]), system)
        for i in rng.choice(rows.bytes.size, 100, replace=False):
            mode = rows.mode[i]
            collective = Collective(
                "all_to_all", int(rows.ranks[i]), float(rows.bytes[i]), phase=rows.phase[i]
            )
            predicted = collective_time_s(collective, node, mode)
            errors.append(abs(predicted - rows.measured_s[i]) / rows.measured_s[i] * 100)
    assert len(errors) == 200
    assert float(np.mean(errors)) < A2A_ROW_TOLERANCE_MAPE


# SGLang 0.5.6.post2's low-latency rows on 2-8 H200 nodes (EP 16-64; 156 rows no fit saw: the profile is
# fitted to 0.5.12's one-node rows) check the across-node rule: the bytes bound off the node take the
# datasheet's scale-out link (50 GB/s per GPU, 80% achieved), the rest the fitted rate. Measured 11-17.5% per
# EP size and phase (the datasheet link alone: 22-40%); tolerance 25%, the same as one node's.
@needs_database
def test_the_low_latency_terms_price_dispatch_and_combine_across_nodes_they_were_not_fitted_to() -> None:
    from moesim.calibrate.fits.silicon.a2a_fit import sglang_rows
    from moesim.simulator.execution.collectives import collective_time_s
    from moesim.simulator.plan.kernels import Collective

    older = tables.select(tables.scan(tables.database_root()), "h200_sxm/sglang/0.5.6.post2")
    rows = sglang_rows(
        "wideep_deepep_ll_perf", tables.read_columns(older.tables["wideep_deepep_ll_perf"]), "h200_sxm"
    )
    rows = rows.where(rows.ranks > 8)
    node = load_profile("silicon/h200_sxm-sglang").node
    predicted = np.array(
        [
            collective_time_s(Collective("all_to_all", int(n), float(b), phase=p), node, "low_latency")
            for n, b, p in zip(rows.ranks, rows.bytes, rows.phase, strict=True)
        ]
    )
    assert rows.bytes.size >= 150 and set(rows.ranks) == {16, 32, 64}
    assert (
        float(np.mean(np.abs(predicted - rows.measured_s) / rows.measured_s)) * 100 < A2A_ROW_TOLERANCE_MAPE
    )


def test_the_link_fit_reads_the_custom_all_reduce_in_graph_replay_not_eager() -> None:
    """The fixture's SGLang custom all-reduce is timed eagerly and in graph replay; only the graph rows, the
    kernel as a replayed decode step runs it, enter the link fit (moesim's launch model prices eager
    launches itself): adding the eager rows would not change which rows the fit reports."""
    from moesim.calibrate.fits.silicon.comm_fit import fit_link

    collection = tables.select(tables.scan(FIXTURE), "h200_sxm/sglang").tables["custom_allreduce_perf"]
    columns = tables.read_columns(collection)
    graph = np.array([str(s).endswith("_graph") for s in columns["kernel_source"]])
    assert graph.any() and (~graph).any()
    both = fit_link([("custom", columns)], 8, 450.0, 3.0)
    only_graph = fit_link([("custom", {k: v[graph] for k, v in columns.items()})], 8, 450.0, 3.0)
    assert both is not None and only_graph is not None
    assert both.quality.rows_fit + both.quality.rows_held_out == int(graph.sum())
    assert (both.bandwidth_gbps, both.latency_us) == (only_graph.bandwidth_gbps, only_graph.latency_us)
    assert both.latency_us < 5.0  # the graph-replayed kernel's own latency, not an eager launch's ~28 us
