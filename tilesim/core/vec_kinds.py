"""The vector instructions' kinds by throughput, and the code a kernel's instruction log gives each.

The cost model times a vector instruction by its kind and element size (``CostParams.vec_repeat_cycles``). The
kinds are named by the instruction msKPP measured for each. This module is compiled into the kernels (each
instruction's code is a constant of its machine code), so, unlike the cost figures, an edit here recompiles them.
"""

from __future__ import annotations

# Vector instruction classes, as the counters name them (tilesim.core.records VEC_*): CostParams' start-up delays.
VEC_CLASSES = ("binary", "scalar", "unary", "div", "reduce", "cast", "dup")

# The kinds, and the kind of each Ascend C instruction tilesim emulates. Transpose (no msKPP row), Broadcast (Brcb
# and Copy steps) and a UB-to-UB DataCopy are given VADDS's one cycle a repeat.
VEC_KINDS = ("VADD", "VADDS", "VEXP", "VDIV", "VCADD", "VCMAX", "VCGADD", "VCPADD", "VGATHER")
KIND_OF = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Max", "Min", "Compare", "Select", "Axpy"), "VADD"),
    **dict.fromkeys(("Adds", "Muls", "Maxs", "Mins", "CompareScalar", "Abs", "Reciprocal", "Rsqrt", "Relu",
                     "Duplicate", "Copy", "Cast", "Brcb", "Broadcast", "Transpose", "DataCopy"), "VADDS"),
    **dict.fromkeys(("Exp", "Ln", "Sqrt"), "VEXP"),
    "Div": "VDIV",
    **dict.fromkeys(("WholeReduceSum", "ReduceSum"), "VCADD"),
    **dict.fromkeys(("WholeReduceMax", "WholeReduceMin", "ReduceMax", "ReduceMin"), "VCMAX"),
    **dict.fromkeys(("BlockReduceSum", "BlockReduceMax", "BlockReduceMin"), "VCGADD"),
    "PairReduceSum": "VCPADD",
    "Gather": "VGATHER",
}


def vec_kind(instruction: str, element_bytes: int) -> int:
    """The instruction log's code for Ascend C vector ``instruction`` on elements of ``element_bytes``: its kind's
    index in VEC_KINDS times 2, plus 1 for 32-bit elements or wider (vec_repeat_cycles' second figure)."""
    return VEC_KINDS.index(KIND_OF[instruction]) * 2 + (element_bytes >= 4)
