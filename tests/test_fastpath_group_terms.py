"""The fast path prices a group of plans whose kernels share their dtypes with one call per term over
(plans × kernels) arrays (`fastpath._group_terms`); plans whose dtypes differ go plan by plan
(`_member_terms`). Both must give the same floats, and so must a template's numbers read from flat lists
(`_template_parts`) and kernel by kernel: the sweep and screen figures cannot move."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from moesim.simulator.execution import fastpath
from moesim.simulator.execution.cost import CostParams
from moesim.simulator.hardware.profile import HardwareProfile, load_profile
from moesim.simulator.models.catalogue import load_model
from moesim.simulator.models.overrides import apply_overrides
from moesim.simulator.plan.kernels import Kernel
from moesim.simulator.plan.styles import build_plan

# Plans of one structure each: decode steps, verification steps.
SHAPE_GROUPS = [[(1, 1), (8, 1), (64, 1)], [(4, 3), (16, 5), (64, 2)]]
# h200: datasheet terms; the silicon profile: grouped expert GEMM and attention terms, per-dtype curves;
# with element rates as a CPU calibration measures them, transcendental terms too.
PROFILES = ["h200", "silicon/h200_sxm-sglang", "silicon+rates"]
MODELS = ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b"]


def _profile(name: str) -> HardwareProfile:
    if name != "silicon+rates":
        return load_profile(name)
    hw = load_profile("silicon/h200_sxm-sglang")
    rates = {"silu": 1e11, "exp": 2e11, "rsqrt": 3e11}
    return replace(hw, empirical=replace(hw.empirical, transcendental_elements_per_s=rates))


def _arrays(name: str, profile: str, shapes: list[tuple[int, int]]) -> list[fastpath.KernelArrays]:
    hw = _profile(profile)
    spec = apply_overrides(load_model(name), {"layers": 5})  # deepseek-v3's first three are dense
    return [fastpath.plan_arrays(build_plan(spec, b, t, 1024, "fused", None, hw)) for b, t in shapes]


def _assert_same(one: object, other: object) -> None:
    if one is None or other is None:
        assert one is None and other is None
    elif isinstance(one, np.ndarray):
        assert isinstance(other, np.ndarray)
        assert one.shape == other.shape and one.tobytes() == other.tobytes()
    else:  # GroupedTerms
        for field in ("is_grouped", "extra_s", "pair_flops_per_s"):
            _assert_same(getattr(one, field), getattr(other, field))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("shapes", SHAPE_GROUPS)
def test_group_terms_are_the_plan_by_plan_terms(
    name: str, profile: str, shapes: list[tuple[int, int]]
) -> None:
    members = _arrays(name, profile, shapes)
    params = CostParams.from_hardware(_profile(profile))
    assert fastpath._share_dtypes(members)
    grouped = fastpath._group_terms(members, params)
    one_by_one = fastpath._member_terms(members, params)
    for one, other in zip(grouped, one_by_one, strict=True):
        _assert_same(np.array(one) if isinstance(one, np.ndarray) else one, other)


def test_plans_with_other_dtypes_are_not_priced_as_a_group() -> None:
    bf16 = _arrays("qwen3-30b-a3b", "h200", [(1, 1)])[0]
    fp8 = fastpath.plan_arrays(
        build_plan(
            apply_overrides(load_model("qwen3-30b-a3b"), {"layers": 3, "weight_format": "fp8"}),
            1,
            1,
            1024,
            "fused",
            None,
            load_profile("h200"),
        )
    )
    assert not fastpath._share_dtypes([bf16, fp8])


def _template_parts_by_rows(kernels: tuple[Kernel, ...]) -> tuple[np.ndarray, np.ndarray, object]:
    """What `fastpath._template_parts` gives, written kernel by kernel: one row of numbers per kernel."""
    zeros = [0.0] * (fastpath._K_VALUES - 3)
    rows, accesses, kstruct, astruct = [], [], [], []
    for index, kernel in enumerate(kernels):
        row = [kernel.flops, kernel.m_tokens, kernel.experts, *zeros]
        if kernel.attention_kind in fastpath._KIND_COLUMN:
            row[fastpath._KIND_COLUMN[kernel.attention_kind]] = kernel.attention_units
        if kernel.transcendental_op in fastpath._OP_COLUMN:
            row[fastpath._OP_COLUMN[kernel.transcendental_op]] = kernel.transcendental_elements
        rows.append(row)
        kstruct.append((fastpath.CATEGORY_INDEX[kernel.category], kernel.stream, kernel.join, kernel.dtype))
        for read in kernel.reads:
            accesses.append((read.size_bytes, read.reads, read.working_set_bytes))
            astruct.append((index, read.tensor, False))
        if kernel.write_bytes > 0 or kernel.write_tensor:
            accesses.append((kernel.write_bytes, 1.0, 0.0))
            astruct.append((index, kernel.write_tensor, True))
    return (
        np.array(rows, dtype=float).reshape(-1, fastpath._K_VALUES),
        np.array(accesses, dtype=float).reshape(-1, 3),
        (tuple(kstruct), tuple(astruct)),
    )


def _sample_templates() -> list[tuple[Kernel, ...]]:
    hw = load_profile("h200")
    templates = []
    for name in MODELS:
        spec = apply_overrides(load_model(name), {"layers": 5})
        plan = build_plan(spec, 4, 3, 1024, "fused", None, hw)
        templates += [segment.kernels for segment in plan.segments]
    bf16 = apply_overrides(load_model("qwen3-30b-a3b"), {"layers": 2, "weight_format": "bf16"})
    reference = build_plan(bf16, 2, 2, 256, "torch-reference", None, hw)  # has transcendental kernels
    templates += [segment.kernels for segment in reference.segments]
    templates.append(())
    return templates


def test_template_parts_are_the_kernel_by_kernel_rows() -> None:
    templates = _sample_templates()
    kernels = [k for template in templates for k in template]
    assert any(k.attention_units > 0 for k in kernels)
    assert any(k.transcendental_elements > 0 for k in kernels)
    for template in templates:
        parts = fastpath._template_parts(template)
        values, accesses, signature = _template_parts_by_rows(template)
        assert parts.kernel_values.shape == values.shape
        assert parts.kernel_values.tobytes() == values.tobytes()
        assert parts.access_values.shape == accesses.shape
        assert parts.access_values.tobytes() == accesses.tobytes()
        assert parts.signature == signature
