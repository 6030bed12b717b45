"""aclnnNsaCompressGrad on the emulated AI Core: the tiled kernel against untiled float64 math (chained forward then
backward) and torch autograd of the forward, both dtypes, overlapping and 4-fold overlapping windows, one long
sequence and many short ones, empty batches and batches shorter than a window, both 910B core counts, hand-made
core counts, checked mode, thread counts, the run report and the two-phase form."""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest
import tilesim.tiling as tiling
import torch
from bitwise import assert_bitwise
from tilesim.kernels import aclnn, nsa_compress_grad
from tilesim.kernels import reference as ref

import tilesim
from tilesim import AclnnError
from tilesim.precision import compare

DT = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

# (cum, N, D, blockSize, stride)
CASES = [
    ([0, 120, 140, 272], 128, 192, 32, 16),  # the unit test's shape: 6 + 0 + 0 + 7 windows
    ([0, 128, 272], 64, 128, 32, 16),  # the document's example: 15 windows
    ([100, 300], 3, 16, 64, 16),  # blockSize = 4·stride: four windows over a token
    ([8192], 2, 16, 32, 16),  # one long sequence
    ([0, 5, 40, 40, 90, 100, 180, 181, 230], 4, 32, 32, 16),  # many short ones, empty ones, tails
    ([48, 96], 4, 256, 48, 32),  # D = 256, windows over a token 1 or 2
]


def inputs(rng, cum, n, d, bs, stride, dtype):
    """input and weight ~ N(0, 1) in the dtype, and the forward's output from them; output_grad ~ N(0, 1)."""
    dt = DT[dtype]
    x = rng.standard_normal((cum[-1], n, d)).astype(dt)
    w = rng.standard_normal((bs, n)).astype(dt)
    fwd = ref.nsa_compress(x, w, cum, bs, stride)
    g = rng.standard_normal(fwd.shape).astype(dt)
    return g, x, w


def torch_grads(g, x, w, cum, bs, stride):
    """float64 torch autograd of the forward written with unfold."""
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    wt = torch.tensor(w.astype(np.float64), requires_grad=True)
    outs, start = [], 0
    for end in cum:
        if end - start >= bs:
            outs.append(torch.einsum("jn,indj->ind", wt, xt[start:end].unfold(0, bs, stride)))
        start = end
    torch.cat(outs).backward(torch.tensor(g.astype(np.float64)))
    return xt.grad.numpy(), wt.grad.numpy()


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("cum,n,d,bs,stride", CASES)
def test_against_math_and_torch(rng, dtype, cum, n, d, bs, stride):
    g, x, w = inputs(rng, cum, n, d, bs, stride, dtype)
    dx, dw = nsa_compress_grad(g, x, w, cum, bs, stride)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    gdx, gdw = ref.nsa_compress_grad(g, x, w, cum, bs, stride)
    for name, a, gold in (("input_grad", dx, gdx), ("weight_grad", dw, gdw)):
        p = compare(a, gold, dtype)
        assert p.ok, f"{name}: {p}"
    tdx, tdw = torch_grads(g, x, w, cum, bs, stride)
    assert compare(dx, tdx, dtype).ok and compare(dw, tdw, dtype).ok


def test_uncovered_tokens_are_zero(rng):
    cum, bs, stride = [0, 5, 40, 40, 90], 32, 16
    g, x, w = inputs(rng, cum, 2, 16, bs, stride, "float16")
    dx, _ = nsa_compress_grad(g, x, w, cum, bs, stride)
    # batch 1 (5 tokens) has no window; batch 2 [5, 40): one window [5, 37), tail 37..39; batch 4 [40, 90):
    # windows at 40, 56 covering [40, 88), tail 88..89
    for lo, hi in ((0, 5), (37, 40), (88, 90)):
        assert np.all(dx[lo:hi].astype(np.float32) == 0)


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910B3", "Ascend910_9391"])
def test_core_counts_agree(rng, soc):
    """The deterministic weight grad and the ordered input-grad adds give the same bits on 48 and 40 cores
    whenever no fp32 sum has three addends in a different order (bs = 2·stride: at most two windows per token);
    the weight grad's halving tree differs with the core count, so it is judged by the standard."""
    cum, n, d, bs, stride = [0, 128, 272], 7, 32, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "bfloat16")
    with tilesim.capture() as runs:
        dx, dw = nsa_compress_grad(g, x, w, cum, bs, stride, soc=soc)
    assert runs[0].block_dim == tilesim.get_soc(soc).core_num_aiv
    base = nsa_compress_grad(g, x, w, cum, bs, stride)
    assert_bitwise(dx, base[0], "input_grad")
    assert compare(dw, ref.nsa_compress_grad(g, x, w, cum, bs, stride)[1], "bfloat16").ok


def test_more_than_255_rows_a_pass_is_reported(rng):
    """ops-transformer's ComputeWtGrad sums a pass's heads x rows with one BlockReduceSum per 64 lanes of D, the rows
    as its repeats: with D = 32 and 8 heads a pass takes 8 x 32 = 256 rows, past the API's 255 repeats (the NPU
    would not compute what the kernel means). Checked mode reports it first and writes nothing; fast mode computes
    every repeat."""
    cum, n, d, bs, stride = [0, 128, 272], 8, 32, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "bfloat16")
    dx, dw = np.full_like(x, 7), np.full_like(w, 7)
    with pytest.raises(tilesim.CheckError) as e:
        nsa_compress_grad(g, x, w, cum, bs, stride, checks=True, out=(dx, dw))
    assert "repeat_times 256 (it must be in [0, 255])" in e.value.violations[0].detail
    assert np.all(dx.astype(np.float32) == 7) and np.all(dw.astype(np.float32) == 7)


@pytest.mark.parametrize("cores", [1, 3, 7, 48])
def test_hand_made_core_counts(rng, cores):
    cum, n, d, bs, stride = [100, 300], 3, 16, 64, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "float16")
    t = tiling.nsa_compress_grad(g, x, w, cum, bs, stride, core_num=cores)
    dx, dw = nsa_compress_grad(g, x, w, cum, bs, stride, tiling=t, checks=True)
    gdx, gdw = ref.nsa_compress_grad(g, x, w, cum, bs, stride)
    assert compare(dx, gdx).ok and compare(dw, gdw).ok
    bad = tiling.replace(t, head_to_process=t.head_to_process + 1)
    with pytest.raises(AclnnError) as e:
        nsa_compress_grad(g, x, w, cum, bs, stride, tiling=bad)
    assert e.value.status == 561002


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_a_core_crosses_sequences_without_windows(rng, cores):
    """A core whose windows run on past sequences shorter than blockSize (20 and 10 tokens here) skips
    them. ops-transformer's Process moves on one sequence per window (``if``, not a loop):
    it would take its next window from the short sequence's first token; ours loops (the module's docstring)."""
    cum, n, d, bs, stride = [0, 120, 140, 272, 282, 350], 2, 16, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "float16")
    t = tiling.nsa_compress_grad(g, x, w, cum, bs, stride, core_num=cores)
    dx, dw = nsa_compress_grad(g, x, w, cum, bs, stride, tiling=t)
    gdx, gdw = ref.nsa_compress_grad(g, x, w, cum, bs, stride)
    assert compare(dx, gdx).ok and compare(dw, gdw).ok
    assert np.all(dx[272:282].astype(np.float32) == 0)


def test_checked_mode_threads_and_out(rng):
    cum, n, d, bs, stride = [0, 120, 140, 272], 16, 64, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "float16")
    copies = [a.copy() for a in (g, x, w)]
    base = nsa_compress_grad(g, x, w, cum, bs, stride)
    checked = nsa_compress_grad(g, x, w, cum, bs, stride, checks=True)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = nsa_compress_grad(g, x, w, cum, bs, stride)
    finally:
        numba.set_num_threads(threads)
    out = (np.empty_like(x), np.empty_like(w))
    res = nsa_compress_grad(g, x, w, cum, bs, stride, out=out)
    assert res[0] is out[0] and res[1] is out[1]
    for other in (checked, one, out):
        assert_bitwise(other[0], base[0], "input_grad")
        assert_bitwise(other[1], base[1], "weight_grad")
    for a, c in zip((g, x, w), copies, strict=True):
        assert_bitwise(a, c, "input unchanged")


def test_run_report(rng):
    cum, n, d, bs, stride = [0, 128, 272], 4, 16, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "float16")
    with tilesim.capture() as runs:
        nsa_compress_grad(g, x, w, cum, bs, stride)
    rep = runs[0]
    blocks = g.shape[0]
    # per window and row pass: dW partials (rows·heads fp32) and dX (rows·heads·D fp32) atomic-added
    assert rep.total("atomic_bytes") == blocks * bs * n * 4 + blocks * bs * n * d * 4
    # reads: dout once per window, input rows bs per window, weight bs·N per window, then the final phase's
    # workspace rows (weight grad: cores x bs·N fp32; input grad: T·N·D fp32)
    cores = rep.block_dim
    want = blocks * n * d * 2 + blocks * bs * n * d * 2 + blocks * bs * n * 2 + cores * bs * n * 4 \
        + x.size * 4
    assert rep.total("mte2_bytes") == want


def test_aclnn_form(rng):
    cum, n, d, bs, stride = [0, 128, 272], 4, 16, 32, 16
    g, x, w = inputs(rng, cum, n, d, bs, stride, "bfloat16")
    dx, dw = np.full_like(x, 7), np.full_like(w, 7)
    st, size, ex = aclnn.nsa_compress_grad_get_workspace_size(g, x, w, cum, bs, stride, 0, "TND", dx, dw)
    assert st == 0 and size == ex.tiling.workspace_size
    assert aclnn.nsa_compress_grad(np.empty(size, np.uint8), size, ex) == 0
    base = nsa_compress_grad(g, x, w, cum, bs, stride)
    assert_bitwise(dx, base[0])
    assert_bitwise(dw, base[1])
    st, size, ex = aclnn.nsa_compress_grad_get_workspace_size(g, x, w, cum, bs, 32, 0, "TND", dx, dw)
    assert (st, size, ex) == (161002, 0, None) and "compressBlockSize" in aclnn.get_recent_err_msg()
    st, _, _ = aclnn.nsa_compress_grad_get_workspace_size(g, x, w, cum, bs, stride, 0, "TND", None, dw)
    assert st == 161001


@pytest.mark.parametrize("kw,status", [(dict(stride=32), 161002), (dict(layout="BSND"), 161002),
                                       (dict(act_seq_len_type=1), 161002), (dict(soc="Ascend310P3"), 161002)])
def test_errors_write_nothing(rng, kw, status):
    cum, n, d, bs = [0, 128, 272], 4, 16, 32
    g, x, w = inputs(rng, cum, n, d, bs, 16, "float16")
    out = (np.full_like(x, 7), np.full_like(w, 7))
    args = dict(stride=16, layout="TND", act_seq_len_type=0, soc="Ascend910B1") | kw
    with pytest.raises(AclnnError) as e:
        nsa_compress_grad(g, x, w, cum, bs, args["stride"], args["act_seq_len_type"], args["layout"],
                          soc=args["soc"], out=out)
    assert e.value.status == status
    assert np.all(out[0].astype(np.float32) == 7) and np.all(out[1].astype(np.float32) == 7)


def test_block_size_equal_to_stride_kernel_path(rng):
    """The document (and so the op's checks) requires blockSize > stride, but the kernel has a path for
    blockSize = stride: no window overlaps another, dX is cast and written directly into the inputGrad zeroed in
    phase 0. Run that path with the launcher and a tiling for such a problem."""
    from tilesim.kernels.nsa_compress_grad import run
    from tilesim.tiling.nsa_compress_grad import seq_lengths, windows

    cum, n, d, bs = [0, 100, 164, 200], 4, 32, 32
    g, x, w = inputs(rng, cum, n, d, bs, bs, "float16")
    probe = tiling.nsa_compress_grad(np.zeros((sum(windows(seq_lengths(cum), bs, 16)), n, d), np.float16), x, w,
                                     cum, bs, 16)
    t = tiling.replace(probe, block_stride=bs, num_of_block=g.shape[0])
    assert not t.is_overlap
    dx, dw = np.full_like(x, 7), np.full_like(w, 7)
    with tilesim.capture() as runs:
        run(t, tilesim.get_soc("Ascend910B1"), g, x, w, cum, dx, dw, np.empty(t.workspace_size, np.uint8),
                 True)
    gdx, gdw = ref.nsa_compress_grad(g, x, w, cum, bs, bs)
    assert compare(dx, gdx).ok and compare(dw, gdw).ok
    assert runs[0].total("atomic_bytes") == g.shape[0] * bs * n * 4  # only the weight-grad partials
    assert np.all(dx[96:100].astype(np.float32) == 0)  # batch 1's tail after its last window
