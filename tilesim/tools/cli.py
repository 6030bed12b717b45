"""The ``tilesim`` command: ``explore`` an op's tilings, ``trace`` one run, list the ``ops``.

Ops are found by module name, in modules that expose ``OPS: dict[str, OpSpec]``: the shipped ones in
``tilesim.kernels.op_specs`` (imported only when a command runs, so the machine never imports the kernels), plus a
user's own with ``--ops mypkg.myops`` (repeatable; the current directory is searched too, as ``python -m`` would).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tilesim.precision import compare
from tilesim.soc import DEFAULT_SOC, get_soc
from tilesim.tools.explore import explore, load_ops, make_inputs, run_recorded
from tilesim.tools.opspec import OpSpec

DEFAULT_OPS = "tilesim.kernels.op_specs"


def parse_shape(text: str) -> tuple[int, ...]:
    """``256,1024`` as (256, 1024)."""
    try:
        shape = tuple(int(p) for p in text.replace(" ", "").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: comma-separated integers, like 256,1024") from None
    if not shape or min(shape) < 0:
        raise argparse.ArgumentTypeError(f"shape {text!r}: comma-separated sizes of 0 or more")
    return shape


def _op_args(p: argparse.ArgumentParser, many_socs: bool) -> None:
    p.add_argument("op", help="the op's name (`tilesim ops` lists them)")
    p.add_argument("--shape", type=parse_shape, help="the op's shape, comma-separated (default: the op's own)")
    p.add_argument("--dtype", help="fp32, bf16 or fp16 (default: the op's first)")
    p.add_argument("--soc", default=DEFAULT_SOC,
                   help="the SoC" + ("s, comma-separated, compared side by side" if many_socs else "")
                        + f" (default {DEFAULT_SOC})")
    p.add_argument("--seed", type=int, default=0, help="the seed of the op's input maker")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--ops", action="append", default=[], metavar="MODULE",
                        help=f"also find ops in this module's OPS dict (repeatable; {DEFAULT_OPS} always)")
    parser = argparse.ArgumentParser(prog="tilesim", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("explore", parents=[common], help="run, judge and rank every legal tiling of an op",
                        description="Enumerate the op's legal tilings, run each in the emulator, judge its outputs "
                                    "against the untiled math (pass, imprecise: fails Ascend's standard within "
                                    "fp32 rounding, WRONG: beyond it), rank them by estimated NPU time; print a "
                                    "table, write CSV, JSON and a PNG. Exit status 1 when a tiling is wrong or "
                                    "failed to run, 2 for a usage error (a shape the op takes no tiling of, an "
                                    "--out that cannot be written: checked before the sweep).")
    _op_args(ex, many_socs=True)
    ex.add_argument("--workers", type=int, default=1, help="local worker processes (default 1: this one)")
    ex.add_argument("--scheduler", metavar="ADDRESS", help="run the sweep on this Dask scheduler (dask.distributed)")
    ex.add_argument("--out", type=Path, help="directory for CSV, JSON and PNG "
                                             "(default ./tilesim-explore/<op>-<shape>-<dtype>)")
    ex.add_argument("--top", type=int,
                    help="print the fastest N rows per SoC (the official one and every one that does not pass always)")
    ex.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    tr = sub.add_parser("trace", parents=[common], help="run one tiling recorded and write its Chrome trace",
                        description="Run one tiling of the op with instruction logs, print the cost model's "
                                    "estimate and write the timeline as Chrome trace JSON (chrome://tracing, "
                                    "Perfetto).")
    _op_args(tr, many_socs=False)
    tr.add_argument("--candidate", type=int, metavar="K",
                    help="the K-th candidate (the `cand` column of explore; default: the official tiling)")
    tr.add_argument("--out", type=Path, help="the trace file (default ./<op>-<shape>-<dtype>-<soc>.trace.json)")

    sub.add_parser("ops", parents=[common], help="list the ops, their dtypes and shapes")
    return parser


def _ops(parser: argparse.ArgumentParser, modules: Sequence[str]) -> dict[str, tuple[str, OpSpec]]:
    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_ops([DEFAULT_OPS, *modules])
    except (ImportError, ValueError) as e:
        parser.error(str(e))


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, OpSpec, tuple[int, ...], str]:
    """The op's module and spec, shape and dtype from the arguments; an unknown op or dtype names the known ones."""
    ops = _ops(parser, args.ops)
    if args.op not in ops:
        parser.error(f"unknown op {args.op!r}; known ops: {', '.join(sorted(ops))}")
    module, spec = ops[args.op]
    dtype = args.dtype or spec.dtypes[0]
    if dtype not in spec.dtypes:
        parser.error(f"{spec.name}: dtype {dtype!r} not supported; its dtypes: {', '.join(spec.dtypes)}")
    return module, spec, args.shape or spec.default_shape, dtype


def _label(spec: OpSpec, shape: tuple[int, ...], dtype: str) -> str:
    return f"{spec.name}-{'x'.join(map(str, shape))}-{dtype}"


def _writable(parser: argparse.ArgumentParser, out: Path, files: Sequence[Path]) -> None:
    """A usage error unless the command can write ``files`` (all in one directory, made when they are written):
    checked before any work, so that an unwritable ``--out`` costs no sweep. The nearest existing directory must
    take a new entry (tried, not judged from permission bits, which root and read-only mounts make misleading),
    and a file that exists must open for writing."""
    d = files[0].parent
    while not d.exists() and d != d.parent:
        d = d.parent
    if not d.is_dir():
        parser.error(f"--out {out}: {d} is not a directory")
    try:
        with tempfile.TemporaryDirectory(dir=d):
            pass
    except OSError as e:
        parser.error(f"--out {out}: cannot write in {d}: {e.strerror or e}")
    for f in files:
        try:
            if f.exists():
                with f.open("ab"):
                    pass
        except OSError as e:
            parser.error(f"--out {out}: cannot write {f}: {e.strerror or e}")


def _explore(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    module, spec, shape, dtype = _resolve(parser, args)
    if args.workers < 1:
        parser.error("--workers: 1 or more")
    socs = [s for s in args.soc.split(",") if s]
    if not socs:
        parser.error("--soc: name one SoC or more, comma-separated")
    if args.scheduler is not None:
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            parser.error('--scheduler: needs dask.distributed, the dask extra (pip install "tilesim[dask]")')
    out = args.out or Path("tilesim-explore") / _label(spec, shape, dtype)
    _writable(parser, out, [out / f"explore.{ext}" for ext in ("csv", "json", "png")])
    result = explore(spec, shape, dtype, socs, workers=args.workers, scheduler=args.scheduler,
                     progress=not args.quiet, seed=args.seed, module=module)
    if len(result.soc_errors) == len(result.socs):  # no SoC takes the inputs: nothing ran, as trace says
        reasons: dict[str, list[str]] = {}
        for soc, why in result.soc_errors.items():
            reasons.setdefault(why, []).append(soc)
        parser.error("; ".join(f"no tilings on {', '.join(on)}: {why}" for why, on in reasons.items()))
    print(result.table(top=args.top))
    paths = result.write(out)
    print(f"{len(result.rows)} tilings in {result.seconds:.1f} s; wrote {', '.join(map(str, paths))}")
    if result.failures:
        print(f"!! {len(result.failures)} tilings are wrong or failed to run", file=sys.stderr)
    for soc, why in result.soc_errors.items():
        print(f"!! no tilings on {soc}: {why}", file=sys.stderr)
    return 0 if result.ok else 1


def _trace(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from tilesim.cost.trace import write_trace

    _, spec, shape, dtype = _resolve(parser, args)
    soc = get_soc(args.soc)
    out = args.out or Path(f"{_label(spec, shape, dtype)}-{soc.name}.trace.json")
    _writable(parser, out, [out])
    inputs = make_inputs(spec, shape, dtype, args.seed)
    cands = list(spec.candidates(inputs, soc))
    if args.candidate is None:
        k = next(i for i, c in enumerate(cands) if c.official)
    elif 0 <= args.candidate < len(cands):
        k = args.candidate
    else:
        parser.error(f"--candidate {args.candidate}: {spec.name} has candidates 0..{len(cands) - 1} here")
    cand = cands[k]
    outputs, estimates = run_recorded(spec, inputs, cand.tiling, soc, stages=True)
    write_trace(out, estimates)
    print(f"{spec.name} {list(shape)} {dtype} on {soc.name}, candidate {k}"
          f"{' (official)' if cand.official else ''}: {cand.params}")
    for e in estimates:
        print(e)
    ok = True
    for name, a, g in zip(spec.output_names, outputs, spec.reference(inputs), strict=True):
        p = compare(a, g)
        ok &= p.ok
        print(f"{name}: {p}")
    print(f"wrote {out}")
    return 0 if ok else 1


def _list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    for name, (module, spec) in sorted(_ops(parser, args.ops).items()):
        print(f"{name}  [{module}]  dtypes {', '.join(spec.dtypes)}  default shape "
              f"{','.join(map(str, spec.default_shape))}\n    shape {spec.shape_help}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; the exit status: 0, 1 when a tiling is wrong or failed to run (explore) or an output fails
    the standard (trace), 2 for a usage error: an unknown op, dtype or SoC, a shape the op takes no tiling of (on
    any SoC asked for), an ``--out`` that cannot be written (checked before any run), each with its message and
    no traceback."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = {"explore": _explore, "trace": _trace, "ops": _list}[args.command]
    try:
        return command(parser, args)
    except ValueError as e:  # AclnnError is one: an input, shape or SoC the op refuses
        parser.error(str(e))
    except OSError as e:  # a file the command cannot write after all (the --out checks come first)
        parser.error(str(e))
