"""Checked mode as a sanitizer: for every way a kernel can break the NPU's rules, a fixture kernel broken in that
way (``fixtures_broken``) and a test that the report names the right thing: its kind, the core and SyncAll phase,
the instruction, the buffer or tensor, the byte offset (from the buffer's or tensor's start) and size, a detail
that says what the rule is, and msSanitizer's layout. Then: every report of a run is collected and counted; the
clean controls (double buffering, computing on padding lanes, atomic adds, the same accesses split by a SyncAll,
a reused source written again) report nothing; without checks only the GM bounds check remains; and an op API
writes nothing to the caller's arrays when its checked run fails.

Why expectations are written out by hand rather than taken from a run: a report that names a plausible but wrong
offset, core or phase is exactly what these tests are for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from fixtures_broken import CLEAN, FIXTURES, SPAN, TILE, beta_inputs, run_fixture

import examples.add_tail as add_tail_mod
import tilesim
from tilesim.checks.violations import KIND_NAMES, Violation

N2 = 2 * SPAN  # fp32 elements of src and dst with the default 2 cores
GM_BYTES = 4 * N2
KINDS = set(KIND_NAMES.values()) | {f"race ({k})" for k in ("write-write", "write-read", "atomic-write",
                                                             "atomic-read")}


@dataclasses.dataclass(frozen=True)
class Want:
    """What the first violation of a broken fixture must say."""

    kind: str
    core: int
    phase: int
    instruction: int  # the index, in the core's log, of the instruction that broke the rule
    memory: str
    offset: int
    nbytes: int
    phrases: tuple[str, ...]


def xbuf(offset: int, nbytes: int, kind: str, instruction: int, *phrases: str, core: int = 1) -> Want:
    """A report about the queue buffer xbuf, in phase 0 (most fixtures break it)."""
    return Want(kind, core, 0, instruction, 'UB buffer "xbuf"', offset, nbytes, phrases)


OOB_SRC = f"the access leaves the tensor ({GM_BYTES} B)"
ALIGN = "DataCopy's UB address is not 32 B aligned"
VEC_ALIGN = "misaligned vector operand"

# (fixture, knobs or None for the default, phases or None, what the first report says). Core 1 of 2 misbehaves
# unless the knobs say otherwise; the other core runs clean. The instruction is the core's count of logged
# instructions before the one that broke the rule: copies, vector instructions, and the SetFlag / WaitFlag of the
# queue calls (EnQue, DeQue, FreeTensor, an AllocTensor that waits for a FreeTensor) and of the kernel's own.
CASES = [
    # GM reads and writes outside a tensor: past its end, and before its start
    ("gm_read_oob", (1, 0, N2 - 32, 0), None,
     Want("GM out of bounds", 1, 0, 0, 'GM tensor "src"', 4 * (N2 - 32), 256, (OOB_SRC,))),
    ("gm_read_oob", (1, 0, -8, 0), None, Want("GM out of bounds", 1, 0, 0, 'GM tensor "src"', -32, 256, (OOB_SRC,))),
    # the CopyOut of a whole tile: CopyIn, EnQue, DeQue, Muls, FreeTensor, EnQue, DeQue before it
    ("gm_write_oob", (1, 0, N2 - 32, 0), None,
     Want("GM out of bounds", 1, 0, 7, 'GM tensor "dst"', 4 * (N2 - 32), 256, (OOB_SRC,))),
    ("gm_write_oob", (1, 0, -8, 0), None, Want("GM out of bounds", 1, 0, 7, 'GM tensor "dst"', -32, 256, (OOB_SRC,))),
    # the same read after a SyncAll: phase 1, after the core's nine instructions of phase 0 (a tile)
    ("gm_read_oob", (1, 1, N2 - 32, 0), 2,
     Want("GM out of bounds", 1, 1, 9, 'GM tensor "src"', 4 * (N2 - 32), 256, (OOB_SRC,))),
    # UB: Muls writing 256 B from 64 B into the queue's second buffer (bytes 256..512 of xbuf) runs 64 B past it
    ("ub_oob", None, None, xbuf(320, 256, "UB out of bounds", 3, "leaves the LocalTensor (slot of 256 B)")),
    # a LocalTensor of tile 0 used after its FreeTensor, once AllocTensor gave its buffer to tile 2 (knobs[2] 0)
    # and before (1)
    ("use_after_free", None, None,
     xbuf(0, 256, "use after free", 11, "a LocalTensor of tile 0 used after its queue slot was allocated to tile 2")),
    ("use_after_free", (1, 0, 1, 0), None,
     xbuf(0, 256, "use after free", 7, "a LocalTensor of allocation 0 used after its FreeTensor")),
    # DataCopy of 28 B; a UB address 16 B into xbuf for DataCopy, DataCopyPad, DataCopy out, DataCopyPad out
    ("datacopy_len", None, None,
     xbuf(0, 28, "misaligned DataCopy length", 0, "DataCopy of 28 B: not a whole number of 32 B blocks")),
    ("datacopy_ub_offset", (1, 0, 0, 0), None, xbuf(16, 32, "misaligned DataCopy address", 0, ALIGN)),
    ("datacopy_ub_offset", (1, 0, 1, 0), None, xbuf(16, 32, "misaligned DataCopy address", 0, ALIGN)),
    ("datacopy_ub_offset", (1, 0, 2, 0), None, xbuf(16, 32, "misaligned DataCopy address", 3, ALIGN)),
    ("datacopy_ub_offset", (1, 0, 3, 0), None, xbuf(16, 32, "misaligned DataCopy address", 3, ALIGN)),
    # a vector instruction on a LocalTensor 12 B into a 32 B block
    ("vec_misaligned", None, None, xbuf(12, 32, VEC_ALIGN, 3, "12 B past a 32 B boundary (it must be aligned)")),
    # UB never written, reported where it is used: copied out, read by GetValue, reduced; after a vector
    # instruction, at the destination it was carried to (zbuf), with the first unwritten byte and the count
    ("uninit_copy_out", None, None,
     xbuf(0, 80, "uninitialised read", 6, "read of 16 B of UB never written, the first 64 B into the access")),
    ("uninit_get_value", None, None,
     xbuf(80, 4, "uninitialised read", 4, "read of 4 B of UB never written, the first 0 B into the access")),
    ("uninit_reduce", None, None,
     xbuf(0, 80, "uninitialised read", 5, "read of 16 B of UB never written, the first 64 B into the access")),
    # DataCopyPad's dummy bytes (isPad false, no padding: the row's first element) count as never written
    ("uninit_dummy", None, None,
     xbuf(0, 256, "uninitialised read", 4, "read of 16 B of UB never written, the first 240 B into the access")),
    ("uninit_through_vector", None, None,
     Want("uninitialised read", 1, 0, 9, 'UB buffer "zbuf"', 0, 256,
          ("read of 128 B of UB never written, the first 128 B into the access",))),
    # races in one phase. Write-write: side a is the write that starts first in GM (core 0 writes dst[224:288],
    # core 1 dst[256:320]; with knobs swapped, the other way round). Write-read: side a is the writer. Each side's
    # access follows its CopyIn of its own tile and the SetFlag / WaitFlag MTE2_MTE3 (a phase before adds the
    # FreeTensor of that tile: 4 instructions).
    ("race_write_write", (0, 0, 1, 0), None,
     Want("race (write-write)", 0, 0, 3, 'GM tensor "dst"', 4 * SPAN, 128,
          ("core 0 writes them", "core 1 writes them", "phase 0", "no SyncAll between"))),
    ("race_write_write", (1, 0, 0, 0), None,
     Want("race (write-write)", 1, 0, 3, 'GM tensor "dst"', 4 * SPAN, 128, ("core 1 writes them", "core 0 writes"))),
    ("race_write_write", (0, 1, 1, 1), 2,
     Want("race (write-write)", 0, 1, 7, 'GM tensor "dst"', 4 * SPAN, 128, ("race in phase 1",))),
    ("race_write_read", (0, 0, 1, 0), None,
     Want("race (write-read)", 0, 0, 3, 'GM tensor "dst"', 4 * (SPAN + 32), 128,
          ("core 0 writes them", "core 1 reads them (log row 3, MTE2)"))),
    ("race_write_read", (1, 0, 0, 0), None,
     Want("race (write-read)", 1, 0, 3, 'GM tensor "dst"', 4 * (SPAN + 32), 128,
          ("core 1 writes them", "core 0 reads them"))),
    # an atomic add (a copy under SetAtomicAdd) and another core's plain write of the same bytes: the atomic side
    # first
    ("race_atomic_write", None, None,
     Want("race (atomic-write)", 1, 0, 3, 'GM tensor "acc"', 0, 256, ("core 1 atomic-adds to them",
                                                                       "core 0 writes them"))),
    # LayerNormGradBeta: the sharedTmpBuffer below the API's minimum (128 B for 256 B); the framework's stack
    # buffer (1024 B left free) below what the tiling was made for (2048 B); instruction 4: the two DataCopys
    # and the SetFlag / WaitFlag MTE2_V before the API
    ("tmp_too_small", None, None,
     Want("temporary buffer too small", 0, 0, 4, 'UB buffer "tmp"', 0, 128,
          ("the sharedTmpBuffer holds 128 B, less than the 256 B the API's tiling (stackBufferSize) uses",))),
    ("framework_tmp_too_big", None, None,
     Want("temporary buffer too small", 0, 0, 4, 'UB buffer "stack"', 0, 1024,
          ("the framework's temporary needs 2048 B, more than the 1024 B of UB the plan leaves free",))),
]


def _id(case: tuple) -> str:
    name, knobs, phases, _ = case
    return name + ("" if knobs is None else "-" + ",".join(map(str, knobs))) + ("" if phases is None else f"-p{phases}")


def first_violation(name: str, **kw: Any) -> tuple[Violation, tilesim.CheckError]:
    """Run a fixture that must fail; its first violation and the error (which holds the rest)."""
    with pytest.raises(tilesim.CheckError) as ei:
        run_fixture(name, **kw)
    return ei.value.violations[0], ei.value


def assert_names(v: Violation, e: tilesim.CheckError, name: str, want: Want) -> None:
    """Every field of the report, the exception's message and status, and the msSanitizer layout."""
    got = (v.kind, v.kernel, v.core, v.phase, v.instruction, v.memory, v.offset, v.nbytes)
    assert got == (want.kind, name, want.core, want.phase, want.instruction, want.memory, want.offset,
                   want.nbytes), str(v)
    assert v.kind in KINDS
    for p in want.phrases:
        assert p in v.detail, v.detail
    # the exception: an aclnn runtime error whose message is the first report
    assert e.status == tilesim.ACLNN_ERR_RUNTIME_ERROR and e.message.startswith(str(v)) and e.reports[0] == str(v)
    # msSanitizer's layout, with every field
    lines = v.mssanitizer().split("\n")
    assert lines[0] == f"====== ERROR: {want.kind}: {v.detail}"
    assert lines[1] == f"======    at offset {want.offset} of {want.memory}, {want.nbytes} B"
    assert lines[2] == (f"======    in kernel {name}, block {want.core} (core {want.core}), phase {want.phase} "
                        f"(instruction {want.instruction} of the core)")


@pytest.mark.parametrize("name, knobs, phases, want", CASES, ids=[_id(c) for c in CASES])
def test_report_names_the_right_thing(name, knobs, phases, want):
    v, e = first_violation(name, knobs=knobs, phases=phases)
    assert_names(v, e, name, want)
    if not FIXTURES[name].api:  # the well-behaved core said nothing, and the broken one only this
        assert e.total == len(e.violations) == 1, e.reports


def test_data_copy_pad_fills_dummy_bytes_with_the_first_element():
    """Without checks the NPU's value: the 64-lane sum of uninit_dummy takes element 0 for its 4 dummy lanes."""
    run = run_fixture("uninit_dummy", checks=False)
    first = SPAN  # core 1's src tile: SPAN, SPAN + 1, ...
    assert run.gm["dst"][SPAN:SPAN + 8].tolist() == [sum(range(first, first + 60)) + 4 * first] * 8


def test_a_short_tmp_buffer_skips_the_api_and_the_unwritten_outputs_are_reported_where_copied_out():
    """The API refuses to run on a short buffer (ASCENDC_ASSERT), so pd_gamma and pd_beta stay unwritten: their
    CopyOut reads UB never written, reported after the buffer itself."""
    for name in ("tmp_too_small", "framework_tmp_too_big"):
        _, e = first_violation(name)
        assert e.total == len(e.violations) == 3
        assert [(v.kind, v.memory, v.offset, v.nbytes) for v in e.violations[1:]] == [
            ("uninitialised read", 'UB buffer "pd_gamma"', 0, 128),
            ("uninitialised read", 'UB buffer "pd_beta"', 0, 128)]


def test_reading_a_source_after_is_reuse_source_is_reported_at_the_read():
    """LayerNormGradBeta with isReuseSource computes dy·resForGamma in resForGamma's UB; copying resForGamma out
    afterwards reads the API's scratch. The report names the source buffer and the read (the last instruction)."""
    with tilesim.capture() as runs, pytest.raises(tilesim.CheckError) as ei:
        run_fixture("reuse_source")
    log_len = len(runs[-1].log[0])
    assert_names(ei.value.violations[0], ei.value, "reuse_source",
                 Want("read of a reused source", 0, 0, log_len, 'UB buffer "res_for_gamma"', 0, 1024,
                      ("read of 1024 B of a source an API with isReuseSource used as scratch, not written since",
                       "the first 0 B into the access")))
    assert ei.value.total == 1


# --- the slot a queue tensor owns, and phases that only failed (both found by these fixtures) --------------------


@pytest.mark.parametrize("variant, instruction, offset, nbytes", [(0, 6, 192, 64), (1, 3, 256, 256),
                                                                    (2, 6, 256, 256)],
                         ids=["back-into-slot0", "into-unallocated-slot1", "into-slot1-of-tile1"])
def test_an_access_into_another_slot_of_the_queue_is_out_of_bounds(variant, instruction, offset, nbytes):
    """A tile's LocalTensor owns its buffer of the queue only: reaching into the queue's other buffer is outside
    it."""
    v, e = first_violation("ub_oob_other_slot", knobs=(1, 0, variant, 0))
    assert_names(v, e, "ub_oob_other_slot", xbuf(offset, nbytes, "UB out of bounds", instruction,
                                                  "leaves the LocalTensor (slot of 256 B)"))


def test_phases_count_sync_alls_even_when_a_phase_only_failed():
    """Phase 1 (after the first SyncAll)'s only instruction fails (nothing is logged); phase 2 fails the same way,
    then runs a tile."""
    _, e = first_violation("failed_only_phase")
    assert [(v.core, v.phase) for v in e.violations] == [(1, 1), (1, 2)]


# --- every report collected -------------------------------------------------------------------------------------


def test_every_report_of_every_core_is_collected_in_core_order():
    _, e = first_violation("many")  # cores 1..3 make 3 bad DataCopies each, core 0 none
    assert e.total == len(e.violations) == 9
    kinds = ["misaligned DataCopy length", "misaligned DataCopy address", "misaligned DataCopy length"]
    assert [(v.core, v.kind, v.offset) for v in e.violations] == [
        (c, k, 16 if "address" in k else 0) for c in (1, 2, 3) for k in kinds]
    assert str(e) == f"[361001] {e.violations[0]} (and 8 more)"
    assert e.reports == [str(v) for v in e.violations]


def test_reports_past_the_per_core_limit_are_counted():
    """A core keeps its first 32 reports whole and counts the rest: 40 each on 3 cores."""
    _, e = first_violation("many", knobs=(-1, -1, 40, 0))
    assert e.total == 120 and len(e.violations) == 96
    assert [sum(v.core == c for v in e.violations) for c in range(4)] == [0, 32, 32, 32]
    assert e.message.endswith(" (and 119 more)")


# --- the clean controls -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CLEAN)
def test_clean_controls_report_nothing(name):
    run = run_fixture(name)
    assert run.report.checks and run.report.log is not None


def test_clean_results_are_right():
    """The clean controls also compute what they should (a report-free run that computes garbage would hide a
    lost write)."""
    src = np.arange(4 * SPAN, dtype=np.float32)
    assert np.array_equal(run_fixture("clean").gm["dst"], 2 * src)
    acc = run_fixture("clean_atomic").gm["acc"]  # the 4 cores' first tiles, added
    assert np.array_equal(acc, sum(src[c * SPAN:c * SPAN + TILE] for c in range(4)))
    dst = run_fixture("clean_padding").gm["dst"].reshape(3, SPAN)
    for c in range(3):
        ten = 2 * src[c * SPAN:c * SPAN + 10]
        assert np.array_equal(dst[c, :10], ten)
        assert np.allclose(dst[c, 16:24], ten.sum())  # the 16-lane sum (zero fill included) + element 12 (0)
        assert (dst[c, 10:16] == -1).all() and (dst[c, 24:] == -1).all()
    res, dy = beta_inputs()
    for name in ("clean_no_reuse", "clean_reuse_rewritten", "clean_framework_tmp"):
        gm = run_fixture(name).gm
        assert np.allclose(gm["pd_gamma"], (res * dy).sum(axis=(0, 1)), atol=1e-5)
        assert np.allclose(gm["pd_beta"], dy.sum(axis=(0, 1)), atol=1e-5)
        if name != "clean_framework_tmp":
            assert np.array_equal(gm["res_after"], res.reshape(-1))


def test_the_races_split_by_a_sync_all_are_clean_and_the_same_phase_is_not():
    for name in ("race_write_write", "race_write_read"):
        run_fixture(name, knobs=(0, 0, 1, 1), phases=2)
        run_fixture(name, knobs=(0, 1, 1, 0), phases=2)
        for p in (0, 1):
            v, _ = first_violation(name, knobs=(0, p, 1, p), phases=2)
            assert v.phase == p


# --- without checks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, f in FIXTURES.items() if not f.clean and n != "failed_only_phase"])
def test_unchecked_only_the_gm_bounds_remain(name):
    """Fast mode checks GM bounds (two comparisons a transfer: a bad offset must not read the host's memory) and
    nothing else."""
    if name.startswith("gm_"):
        v, _ = first_violation(name, checks=False)
        assert v.kind == "GM out of bounds" and v.instruction == -1  # no log to point into
    else:
        run_fixture(name, checks=False)


# --- an op API writes nothing when its checked run fails --------------------------------------------------------


def test_op_api_leaves_the_callers_array_alone_when_the_checked_run_fails(monkeypatch):
    """No shipped op can be broken from outside: each validates a hand-made tiling (add_tail insists on exactly
    what its free choices give). So the validator is bypassed here, and the cores given 64 elements more than x
    holds: the last core's CopyIn leaves x. The checked run raises and ``out`` keeps what it held."""
    x = np.arange(1000, dtype=np.float32)
    y = np.ones_like(x)
    t = add_tail_mod.add_tail_tiling(x, core_num=2)
    broken = dataclasses.replace(t, total_length=t.total_length + 64)
    with pytest.raises(tilesim.AclnnError):
        add_tail_mod.add_tail(x, y, tiling=broken, checks=True)  # the validator refuses it
    monkeypatch.setattr(add_tail_mod, "match_tiling", lambda t, *args, **choices: t)
    out = np.full_like(x, 123.0)
    with pytest.raises(tilesim.CheckError) as ei:
        add_tail_mod.add_tail(x, y, tiling=broken, checks=True, out=out)
    v = ei.value.violations[0]
    assert (v.kind, v.kernel, v.core, v.memory, v.offset) == ("GM out of bounds", "add_tail", 1, 'GM tensor "x"',
                                                              4 * (1064 // 8 // 2 * 8))  # core 1's first tile
    assert (out == 123.0).all()
