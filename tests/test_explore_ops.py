"""kernels.op_specs, the five ops as the explorer sees them: for every op and dtype at a small shape with tails, every
candidate tiling runs through the op API and every output passes Ascend's precision standard against the float64
reference, each element within the op's rounding bound; the official tiling is a candidate, marked, and the only
one marked; no tiling is listed twice; params have the same keys throughout; a sweep varies the core count and,
where the op has a choice, the tile.

Outputs are judged in their own dtype, as tests/test_<op>.py judge them: RmsNormGrad's dgamma is fp32 (an fp32 sum
whatever dy's dtype) and is held to the fp32 threshold; every other output is in the inputs' dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
from tilesim.kernels.op_specs import OPS, default_groups

import tilesim
from tilesim.precision import Expected, compare, judge
from tilesim.tools.opspec import core_counts, tile_sizes

SOC = tilesim.get_soc(tilesim.DEFAULT_SOC)
# Small shapes with tails: rows that no power-of-two core count divides, rows not 32 B aligned in b16 (or fp32).
SHAPES = {
    "rms_norm_grad": (50, 200),
    "group_norm_backward": (3, 64, 36),  # N > 2: the two-stage reduction; HxW not a multiple of 8
    "swiglu_grad": (26, 200),  # colLen 100: DataCopyPad rows
    "swiglu": (26, 200),  # the same split, forward
    "rms_norm": (26, 200),  # D 200: MERGE_N's masked tail Adds and Muls, rows padded to 32 B
    "softmax": (50, 100),  # cols 100: a masked tail past one 64-wide block, rows padded to 32 B
    "layer_norm_grad": (50, 200),
    "nsa_compress_grad": (256, 4, 32),  # 4 sequences of 64 tokens, 3 windows each
}
NO_TILE_CHOICE = {"nsa_compress_grad"}  # its pass follows from N, D and the UB
CASES = [(name, dt) for name, spec in OPS.items() for dt in spec.dtypes]


def ids(case: tuple[str, str]) -> str:
    return "-".join(case)


@pytest.fixture(scope="module", params=CASES, ids=ids)
def sweep(request):
    name, dtype = request.param
    spec = OPS[name]
    inputs = spec.make_inputs(SHAPES[name], dtype, 0)
    return spec, inputs, spec.candidates(inputs, SOC)


def test_every_candidate_runs_and_passes_the_standard_within_its_rounding_bound(sweep):
    """Every output of every candidate meets the standard, and no element lies outside what fp32 rounding can do
    (the op's ErrorBound): a bound that a correct kernel could cross would call it wrong."""
    spec, inputs, cands = sweep
    golden = spec.reference(inputs)
    bounds = spec.bounds(inputs)
    assert len(golden) == len(spec.output_names) == len(bounds)
    for c in cands:
        outs = spec.run(inputs, c.tiling, SOC)
        assert len(outs) == len(spec.output_names)
        for name, out, gold, bound in zip(spec.output_names, outs, golden, bounds, strict=True):
            j = judge(out, Expected.of(gold, np.dtype(out.dtype).name, bound))
            assert j.verdict == "pass" and j.excess < 1, f"{spec.name} {c.params} {name}: {j}"
            assert j.precision.ok == compare(out, gold).ok


def test_official_is_there_once_and_params_are_uniform(sweep):
    spec, inputs, cands = sweep
    official = [c for c in cands if c.official]
    assert len(official) == 1
    assert official[0].tiling == cands[0].tiling  # listed first
    assert len({c.tiling for c in cands}) == len(cands)
    keys = set(cands[0].params)
    assert {"block_dim", "buffer_num", "tile"} <= keys
    assert all(set(c.params) == keys for c in cands)
    assert len({c.params["block_dim"] for c in cands}) >= 2
    if spec.name not in NO_TILE_CHOICE:
        assert len({c.params["tile"] for c in cands}) >= 2


def test_default_shape_sweeps_stay_moderate():
    """The explorer runs every candidate: a default-shape sweep is tens of tilings, with the official one."""
    for name, spec in OPS.items():
        for dtype in spec.dtypes:
            cands = spec.candidates(spec.make_inputs(spec.default_shape, dtype, 0), SOC)
            assert 5 <= len(cands) <= 90, f"{name} {dtype}: {len(cands)} candidates"
            assert sum(c.official for c in cands) == 1


def test_group_norm_decomposition_has_no_candidates():
    """Off DAV_2201 aclnn decomposes GroupNormBackward: no kernel, so the SoC is refused, as the API refuses a
    tiling there (the explorer reports it as a SoC without tilings)."""
    spec = OPS["group_norm_backward"]
    with pytest.raises(tilesim.AclnnError) as e:
        spec.candidates(spec.make_inputs((2, 16, 24), "fp32", 0), tilesim.get_soc("Ascend310P3"))
    assert e.value.status == tilesim.ACLNN_ERR_PARAM_INVALID and "decomposes" in str(e.value)


def test_sweep_helpers():
    assert core_counts(SOC) == [1, 2, 4, 8, 16, 32, 48]
    assert [default_groups(c) for c in (512, 64, 48, 16, 7)] == [32, 32, 24, 16, 7]
    assert tile_sizes(lambda v: v <= 1000, 1, 4096) == [1, 32, 1000]
    assert tile_sizes(lambda v: v <= 1000, 64, 4096, step=16) == [64, 256, 992]
    assert tile_sizes(lambda v: v <= 5, 8, 64) == []
    assert tile_sizes(lambda v: True, 1, 3, count=2) == [1, 3]
