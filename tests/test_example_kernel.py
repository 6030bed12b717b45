"""The documentation's worked example of a kernel of your own (``examples/add_tail.py``): results against float64 math
at lengths with tails, over legal tilings (buffer_num 1 and 2, many cores and one), its refusals, checked mode,
its OpSpec, and the module run as a script."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilesim
from examples.add_tail import OPS, add_tail, reference
from examples.add_tail import add_tail_tiling as tiling
from tilesim import AclnnError, get_soc
from tilesim.precision import compare

ROOT = Path(__file__).resolve().parents[1]
SPEC = get_soc("Ascend910B1")
DT = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
LENGTHS = [1, 7, 1000, 12345]


def inputs(n: int | tuple[int, ...], dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (n,) if isinstance(n, int) else n
    return tuple(rng.uniform(-2, 2, shape).astype(np.float32).astype(DT[dtype]) for _ in range(2))


def check(z: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    p = compare(z, reference(x, y))
    assert p.ok, str(p)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", LENGTHS)
def test_official_tiling_matches_reference(n: int, dtype: str) -> None:
    x, y = inputs(n, dtype)
    out = np.full(x.shape, np.nan, x.dtype)  # an element no core writes stays NaN
    z = add_tail(x, y, out=out)
    assert z is out and z.dtype == x.dtype
    check(z, x, y)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("core_num,tile_len,buffer_num", [(1, 64, 1), (1, 64, 2), (3, 128, 2), (48, 256, 1),
                                                          (7, 1024, 2), (48, None, 1)])
def test_overridden_tilings_match_reference(n: int, dtype: str, core_num: int, tile_len: int | None,
                                            buffer_num: int) -> None:
    x, y = inputs(n, dtype, seed=n)
    t = tiling(x, core_num=core_num, tile_len=tile_len, buffer_num=buffer_num)
    check(add_tail(x, y, tiling=t), x, y)


def test_multidimensional_input_and_alpha() -> None:
    x, y = inputs((37, 41), "bf16")
    z = add_tail(x, y, alpha=-1.75)
    assert z.shape == (37, 41)
    p = compare(z, reference(x, y, alpha=-1.75))
    assert p.ok, str(p)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", [1, 7, 1000, 12345, 999 * 1001])
def test_split_covers_the_length_in_whole_blocks(n: int, dtype: str) -> None:
    """The cores' ranges, as the kernel's CopyIns read them: whole 32 B blocks, one block more on some cores than
    on others at most, back to back from 0 to n (the last ending with the data)."""
    x = np.zeros(n, DT[dtype])
    t = tiling(x, soc=SPEC)
    assert t.block_dim == min(SPEC.core_num_aiv, -(-n * x.itemsize // 32)) and t.tile_len % (32 // x.itemsize) == 0
    with tilesim.capture() as runs:
        add_tail(x, x, tiling=t)
    read = runs[0].counter("mte2_bytes") // 2  # x and y alike
    pad = runs[0].counter("mte2_pad_bytes") // 2
    blocks = (read + pad) // 32
    assert ((read + pad) % 32 == 0).all() and blocks.max() - blocks.min() <= 1 and pad[:-1].sum() == 0
    assert read.sum() == n * x.itemsize


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("buffer_num", [1, 2])
def test_largest_tile_fills_the_ub(dtype: str, buffer_num: int) -> None:
    x = np.empty(10**6, DT[dtype])
    top = tiling(x, core_num=1, buffer_num=buffer_num).tile_len  # the official tile: the largest that fits
    with tilesim.capture() as runs:  # the kernel's InitBuffer calls place the buffers
        add_tail(x, x, tiling=tiling(x, tile_len=top, buffer_num=buffer_num))
    plan = runs[0].ub_plan
    per_elem = 3 * buffer_num * x.itemsize + (0 if x.itemsize == 4 else 8)
    assert SPEC.ub_size - per_elem * (32 // x.itemsize) < plan.used <= SPEC.ub_size
    assert [b.name for b in plan.buffers] == ["in_x", "in_y", "out_z", "x32", "y32"]
    m = 32 // x.itemsize
    with pytest.raises(AclnnError, match="tile_len") as e:
        tiling(x, tile_len=top + m, buffer_num=buffer_num)
    assert e.value.status == 561002


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_checked_mode_runs_clean_and_agrees(n: int, dtype: str) -> None:
    x, y = inputs(n, dtype)
    for t in (None, tiling(x, core_num=5, tile_len=64, buffer_num=1)):
        fast = add_tail(x, y, tiling=t)
        np.testing.assert_array_equal(add_tail(x, y, tiling=t, checks=True).view(np.uint8), fast.view(np.uint8))


@pytest.mark.parametrize("kw,param", [({"core_num": 0}, "core_num"), ({"core_num": 49}, "core_num"),
                                      ({"buffer_num": 3}, "buffer_num"), ({"tile_len": 0}, "tile_len"),
                                      ({"tile_len": 12}, "tile_len"), ({"tile_len": 1 << 20}, "tile_len")])
def test_illegal_overrides_are_tiling_errors(kw: dict, param: str) -> None:
    with pytest.raises(AclnnError, match=param) as e:
        tiling(np.empty(1000, np.float32), **kw)
    assert e.value.status == 561002


def test_bad_inputs_are_refused_and_nothing_is_written() -> None:
    x, y = inputs(100, "fp32")
    out = np.full_like(x, 3.0)
    cases = [((None, y), 161001, "x"), ((x, None), 161001, "y"), ((x.astype(np.int32), y), 161002, "x"),
             ((x, y.astype(np.float16)), 161002, "y"), ((x, y[:99]), 161002, "y"),
             ((x[:0], y[:0]), 161002, "x")]
    for (a, b), status, param in cases:
        with pytest.raises(AclnnError, match=param) as e:
            add_tail(a, b, out=out)  # every input is checked before out is
        assert e.value.status == status
    with pytest.raises(AclnnError, match="out") as e:
        add_tail(x, y, out=np.empty(100, np.float16))
    assert e.value.status == 161002
    with pytest.raises(AclnnError, match="x") as e:
        add_tail(*inputs(100, "bf16"), soc="Ascend310P3")  # no bf16 on 310P
    assert e.value.status == 161002
    np.testing.assert_array_equal(out, 3.0)


def test_hand_made_tiling_is_checked() -> None:
    x, y = inputs(1000, "bf16")
    t = tiling(x, core_num=4)
    out = np.zeros_like(x)
    for field, value, words in [("total_length", 999, "tiling.total_length"), ("block_dim", 0, "core_num"),
                                ("tile_len", 24, "tile_len"), ("buffer_num", 3, "buffer_num"),
                                ("alpha", 0.25, "tiling.alpha")]:
        with pytest.raises(AclnnError, match=words) as e:
            add_tail(x, y, tiling=dataclasses.replace(t, **{field: value}), out=out)
        assert e.value.status == 561002
    assert not out.view(np.uint16).any()


def test_opspec_candidates_run_and_match() -> None:
    spec = OPS["add_tail"]
    ins = spec.make_inputs((12345,), "bf16", 0)
    cands = spec.candidates(ins, SPEC)
    assert cands[0].official and sum(c.official for c in cands) == 1
    assert {c.params["buffer_num"] for c in cands} == {1, 2}
    assert len({c.tiling for c in cands}) == len(cands)
    assert len({c.params["block_dim"] for c in cands}) >= 3 and len({c.params["tile"] for c in cands}) >= 3
    assert all(set(c.params) == set(cands[0].params) for c in cands)
    (golden,) = spec.reference(ins)
    for c in cands:
        (z,) = spec.run(ins, c.tiling, SPEC)
        p = compare(z, golden)
        assert p.ok, f"{c.params}: {p}"


@pytest.mark.no_launch_here  # a subprocess
def test_module_runs_as_a_script() -> None:
    r = subprocess.run([sys.executable, "-m", "examples.add_tail"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)  # -m puts the working directory, the repo root, on sys.path
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("pass (") == 2 and r.stdout.count("estimated") == 2 and "AddTailTiling(" in r.stdout


def test_cli_explores_and_traces_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The walk-through's two commands, in this process: every candidate passes, the report files are written, the
    trace has an event per stage and names the kernel's GM tensors."""
    from tilesim.tools.cli import main

    args = ["--ops", "examples.add_tail", "--shape", "12345", "--dtype", "bf16"]
    assert main(["explore", "add_tail", *args, "--out", str(tmp_path / "ex"), "--quiet"]) == 0
    rows = json.loads((tmp_path / "ex" / "explore.json").read_text())["rows"]
    assert f"add_tail [12345] bf16 on Ascend910B1: {len(rows)} tilings: {len(rows)} pass" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "ex").iterdir()} >= {"explore.csv", "explore.json", "explore.png"}
    assert sum(r["official"] for r in rows) == 1 and {r["buffer_num"] for r in rows} == {1, 2}
    assert main(["trace", "add_tail", *args, "--out", str(tmp_path / "t.json")]) == 0
    assert "z: pass" in capsys.readouterr().out
    names = {e["name"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"}
    assert {"CopyIn x, y", "Compute", "CopyOut z"} <= names


def test_launch_refuses_what_it_cannot_run_before_it_writes(tmp_path: Path) -> None:
    from examples.add_tail import add_tail_kernel
    from tilesim.runtime.launcher import launch

    x, y = inputs(1000, "fp32")
    t = tiling(x)
    z = np.full_like(x, 7.0)

    def refused(*gm: object, match: str, **kw: object) -> None:
        with pytest.raises(ValueError, match=match):
            launch(add_tail_kernel, t, *gm, **{"block_dim": t.block_dim, **kw})

    for block_dim in (0, -1, 2.0, True, None):
        refused(x, y, z, block_dim=block_dim, match="block_dim must be a positive integer")
    refused(x, y, z, outputs=4, match="outputs must be an integer from 0 to the 3 GM arrays")
    refused(x, list(y), z, match="y must be a numpy array, got list")
    refused(x, y, np.zeros(2000, np.float32)[::2], match="z must be C-contiguous")
    frozen = z.copy()
    frozen.flags.writeable = False
    refused(x, y, frozen, match="z is an output and must be writeable")
    z.tofile(tmp_path / "z.bin")
    mapped = np.memmap(tmp_path / "z.bin", np.float32, mode="r", shape=z.shape)  # writing it would be a SIGSEGV
    refused(x, y, mapped, match="z is an output and must be writeable")
    assert (z == 7.0).all() and (mapped == 7.0).all()
    launch(add_tail_kernel, t, x, y, z, block_dim=t.block_dim)  # and the next launch is right
    check(z, x, y)


def _documented() -> set[str]:
    """The identifiers the site's pages document (their ``::: identifier`` lines), under their import names
    (the pages name the repository's kernels/ and tiling/ as griffe reads them: ``kernels.``, ``tiling.``)."""
    names = set()
    for page in (ROOT / "docs").rglob("*.md"):
        for line in page.read_text().splitlines():
            if line.startswith(":::"):
                ident = line[3:].strip()
                names.add("tilesim." + ident if ident.split(".")[0] in ("kernels", "tiling") else ident)
    return names


def test_example_uses_only_documented_names() -> None:
    """What the example imports from tilesim is on the site: a name of a documented module, or the module
    itself, so that a user who copies it finds every helper it calls described."""
    documented = _documented()
    tree = ast.parse((ROOT / "examples" / "add_tail.py").read_text())
    imported = [f"{node.module}.{a.name}" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tilesim"
                for a in node.names]
    assert len(imported) > 10
    undocumented = [n for n in imported if n not in documented and not any(d.startswith(n + ".") for d in documented)
                    and "tilesim." + n.rsplit(".", 1)[1] not in documented]
    assert not undocumented, f"examples/add_tail.py imports names no page documents: {undocumented}"
