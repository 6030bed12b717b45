"""NsaCompressGrad, host side: the float64 forward and gradients against torch autograd of the forward written with
``unfold``, the official tiling's fields against ``nsa_compress_grad_tiling.cpp`` and the kernel's derived split,
and the op's checks. (The kernel is not emulated yet.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tilesim.tiling as tiling
import torch
from tilesim.kernels import reference as ref
from tilesim.tiling.nsa_compress_grad import seq_lengths, windows

from tilesim import AclnnError

F16, BF16 = np.float16, ml_dtypes.bfloat16


def z(shape, dtype=F16):
    """A zero-stride stand-in: the tiling reads only shape and dtype."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def torch_forward(x, w, cum, bs, stride):
    """The forward with torch ops: per batch, unfold the tokens into windows and weight them."""
    outs, start = [], 0
    for end in cum:
        if end - start >= bs:
            u = x[start:end].unfold(0, bs, stride)  # [windows, N, D, bs]
            outs.append(torch.einsum("jn,indj->ind", w, u))
        start = end
    return torch.cat(outs) if outs else x.new_zeros((0,) + tuple(x.shape[1:]))


# (cum, N, D, blockSize, stride): the two examples of the documents, bs = 4·stride, one long sequence, many short
# ones with empty batches and batches shorter than a window
CASES = [
    ([0, 120, 140, 272], 8, 32, 32, 16),
    ([0, 128, 272], 4, 16, 32, 16),
    ([100, 300], 3, 16, 64, 16),
    ([2048], 2, 16, 32, 16),
    ([0, 5, 40, 40, 90, 100, 180], 2, 32, 32, 16),
]


@pytest.mark.parametrize("cum,n,d,bs,stride", CASES)
def test_reference_against_torch_autograd(rng, cum, n, d, bs, stride):
    x = rng.standard_normal((cum[-1], n, d))
    w = rng.standard_normal((bs, n))
    out = ref.nsa_compress(x, w, cum, bs, stride)
    assert out.shape[0] == sum(windows(seq_lengths(cum), bs, stride))
    g = rng.standard_normal(out.shape)
    dx, dw = ref.nsa_compress_grad(g, x, w, cum, bs, stride)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    o = torch_forward(xt, wt, cum, bs, stride)
    np.testing.assert_allclose(o.detach().numpy(), out, rtol=1e-12, atol=1e-12)
    o.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-12, atol=1e-10)


def test_uncovered_tokens_get_zero(rng):
    """Tokens after a batch's last window, and every token of a batch shorter than a window, have no gradient."""
    cum, bs, stride = [40, 50], 32, 16  # batch 0: one window over [0, 32); batch 1 (10 tokens): none
    x = rng.standard_normal((50, 2, 16))
    g = rng.standard_normal((1, 2, 16))
    dx, _ = ref.nsa_compress_grad(g, x, rng.standard_normal((bs, 2)), cum, bs, stride)
    assert np.all(dx[32:] == 0) and np.all(dx[:32] != 0)


def test_document_block_counts():
    assert sum(windows(seq_lengths([0, 120, 140, 272]), 32, 16)) == 13  # 0 + 6 + 0 + 7
    assert sum(windows(seq_lengths([0, 128, 272]), 32, 16)) == 15  # 7 + 8


def make(cum, n, d, bs, stride, dtype=F16, soc="Ascend910B1", **kw):
    t = cum[-1]
    blocks = sum(windows(seq_lengths(cum), bs, stride))
    return tiling.nsa_compress_grad(z((blocks, n, d), dtype), z((t, n, d), dtype), z((bs, n), dtype), cum, bs,
                                    stride, soc=soc, **kw)


@pytest.mark.parametrize("soc,cores", [("Ascend910B1", 48), ("Ascend910B3", 40), ("Ascend910_9391", 48)])
@pytest.mark.parametrize("cum,n,d,bs,stride", CASES + [([8192 // 4 * (i + 1) for i in range(4)], 32, 128, 32, 16)])
def test_tiling_fields(soc, cores, cum, n, d, bs, stride):
    t = make(cum, n, d, bs, stride, soc=soc)
    total_t = cum[-1]
    blocks = sum(windows(seq_lengths(cum), bs, stride))
    assert (t.batch_size, t.num_of_block, t.num_of_head, t.dim_of_head) == (len(cum), blocks, n, d)
    assert (t.block_size, t.block_stride, t.seq_len_type, t.tiling_key, t.block_dim) == (bs, stride, 0, 0, cores)
    assert (t.head_to_process, t.head_remainder) == (total_t * n // cores, total_t * n % cores)
    assert t.ub_max_size == 196608
    assert t.workspace_size == 16 * 2 ** 20 + bs * n * 4 * cores + total_t * n * d * 4 + 2 ** 20
    # the kernel's split: three fp32 buffers of maxHead·D in (UB − 24 KiB)
    mh = (196608 - 24 * 1024) // d // 4 // 3 // 16 * 16
    assert t.max_head_num_in_ub == mh
    assert t.n_rows_once == (min(mh // n, bs) if mh >= n else 1)
    assert t.is_overlap == (bs > stride)
    spans = [t.blocks_of_core(c) for c in range(cores)]
    assert sum(c for _, c in spans) == blocks and all(spans[i][0] + spans[i][1] == spans[i + 1][0]
                                                      for i in range(cores - 1))
    assert max(c for _, c in spans) - min(c for _, c in spans) <= 1 and spans[0][1] >= spans[-1][1]
    rows = [t.heads_of_core(c) for c in range(cores)]
    assert sum(c for _, c in rows) == total_t * n and rows[-1][0] + rows[-1][1] == total_t * n


def test_n_head_once_splits_heads_evenly():
    t = make([64], 128, 256, 32, 16)  # maxHead (172032 / 256 / 12) = 48 rows: 128 heads in 3 passes of 42
    assert t.max_head_num_in_ub == 48 and t.n_head_once == 128 // 3 and t.n_rows_once == 1


def test_core_num_override():
    assert make([0, 128, 272], 4, 16, 32, 16, core_num=7).block_dim == 7
    for bad in (0, 49):
        with pytest.raises(AclnnError) as e:
            make([0, 128, 272], 4, 16, 32, 16, core_num=bad)
        assert e.value.status == 561002 and "core_num" in e.value.message


GOOD = dict(cum=[0, 128, 272], n=4, d=16, bs=32, stride=16)


def call(output_grad=None, input=None, weight=None, cum=None, bs=32, stride=16, dtype=F16, n=4, d=16,  # noqa: A002
         missing=(), **kw):
    cum = GOOD["cum"] if cum is None else cum
    blocks = sum(windows(seq_lengths(cum), bs, stride)) if cum else 0
    args = dict(output_grad=z((blocks, n, d), dtype) if output_grad is None else output_grad,
                input=z((cum[-1] if cum else 0, n, d), dtype) if input is None else input,
                weight=z((bs, n), dtype) if weight is None else weight, act_seq_len=cum)
    for m in missing:
        args[m] = None
    return tiling.nsa_compress_grad(args["output_grad"], args["input"], args["weight"], args["act_seq_len"], bs,
                                    stride, **kw)


BAD = [
    ("outputGrad None", dict(missing=("output_grad",)), 161001, ["outputGrad"]),
    ("input None", dict(missing=("input",)), 161001, ["input"]),
    ("weight None", dict(missing=("weight",)), 161001, ["weight"]),
    ("actSeqLen None", dict(missing=("act_seq_len",)), 161001, ["actSeqLen"]),
    ("blockSize not x16", dict(bs=40), 161002, ["compressBlockSize", "16"]),
    ("stride not x16", dict(stride=24), 161002, ["compressStride", "16"]),
    ("blockSize = stride", dict(bs=32, stride=32), 161002, ["greater than compressStride"]),
    ("blockSize < stride", dict(bs=16, stride=32), 161002, ["greater than compressStride"]),
    ("blockSize > 128", dict(bs=144, cum=[0, 400]), 161002, ["at most 128"]),
    ("D not x16", dict(d=24), 161002, ["D = 24"]),
    ("D > 256", dict(d=272), 161002, ["D = 272"]),
    ("N > 128", dict(n=129), 161002, ["N = 129"]),
    ("float32", dict(dtype=np.float32), 161002, ["float32"]),
    ("dtypes differ", dict(weight=z((32, 4), BF16)), 161002, ["weight", "bfloat16"]),
    ("weight shape", dict(weight=z((16, 4))), 161002, ["weight", "[32, 4]"]),
    ("outputGrad shape", dict(output_grad=z((14, 4, 16))), 161002, ["outputGrad", "[15, 4, 16]"]),
    ("T != last end", dict(input=z((273, 4, 16))), 161002, ["actSeqLen", "272"]),
    ("decreasing", dict(cum=[0, 200, 128, 272]), 161002, ["non-decreasing"]),
    ("empty actSeqLen", dict(cum=[], output_grad=z((0, 4, 16)), input=z((1, 4, 16))), 161002, ["empty"]),
    ("type 1", dict(act_seq_len_type=1), 161002, ["actSeqLenType"]),
    ("layout BSND", dict(layout="BSND"), 161002, ["TND"]),
    ("310P", dict(soc="Ascend310P3"), 161002, ["910B"]),
    ("910A", dict(soc="Ascend910A"), 161002, ["910B"]),
]


@pytest.mark.parametrize("name,kw,status,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input(name, kw, status, words):
    with pytest.raises(AclnnError) as e:
        call(**kw)
    assert e.value.status == status, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
