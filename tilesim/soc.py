"""SoC records: the figures a tiling reads from the platform (CANN 8.1 ``platform_config/*.ini``).

``core_num_aiv`` is what ``GetCoreNumAiv()`` returns: the vector-core count on the split (AIC/AIV) 910B and
910_93 parts, the AI Core count on the coupled 310P and 910 parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilesim.errors import ACLNN_ERR_PARAM_INVALID, AclnnError

MIB = 1024 * 1024


@dataclass(frozen=True)
class SocSpec:
    """One SoC's figures, as its ``platform_config`` ini gives them: the core counts, the UB and L2 sizes, the
    32 B block, the 256 B repeat and the largest repeat count (:func:`get_soc` looks one up by name)."""
    name: str
    short_soc: str  # Short_SoC_version of the ini: Ascend910B, Ascend910_93, Ascend310P, Ascend910
    arch: int  # __CCE_AICORE__: 220 (910B/910_93), 200 (310P), 100 (910 training series)
    ai_core_cnt: int
    vector_core_cnt: int
    ub_size: int  # bytes of Unified Buffer per core
    l2_size: int  # bytes of the L2 cache the cores share (the ini's l2_size)
    block_size: int = 32  # ONE_BLK_SIZE
    repeat_size: int = 256  # ONE_REPEAT_BYTE_SIZE
    max_repeat_times: int = 255

    def __hash__(self) -> int:
        # the dataclass's hash rehashes every field, and plans and tilings are looked up by SoC on every op call;
        # equal records have equal names, so the name's (cached) hash agrees with ==
        return hash(self.name)

    @property
    def split_arch(self) -> bool:
        """True where cube and vector cores are separate (cube_vector_combine=split)."""
        return self.arch == 220

    @property
    def core_num_aiv(self) -> int:
        """``GetCoreNumAiv()``: the core count every tiling here uses for blockDim."""
        return self.vector_core_cnt if self.split_arch else self.ai_core_cnt

    @property
    def lib_workspace_size(self) -> int:
        """``GetLibApiWorkSpaceSize()``: 16 MiB on DAV_2201, 2 MiB elsewhere."""
        return 16 * MIB if self.arch == 220 else 2 * MIB

    @property
    def supports_bf16(self) -> bool:
        """True on the parts whose ops take bfloat16 (arch 220: 910B and 910_93), False on 310P and 910."""
        return self.arch == 220


def _family(names: list[str], **kw) -> dict[str, SocSpec]:
    return {n: SocSpec(name=n, **kw) for n in names}


_SOCS: dict[str, SocSpec] = {
    **_family(["Ascend910B1", "Ascend910B2", "Ascend910B2C"], short_soc="Ascend910B", arch=220,
              ai_core_cnt=24, vector_core_cnt=48, ub_size=196608, l2_size=192 * MIB),
    **_family(["Ascend910B3"], short_soc="Ascend910B", arch=220, ai_core_cnt=20, vector_core_cnt=40,
              ub_size=196608, l2_size=192 * MIB),
    **_family(["Ascend910B4"], short_soc="Ascend910B", arch=220, ai_core_cnt=20, vector_core_cnt=40,
              ub_size=196608, l2_size=96 * MIB),
    **_family(["Ascend910B4-1"], short_soc="Ascend910B", arch=220, ai_core_cnt=20, vector_core_cnt=40,
              ub_size=196608, l2_size=168 * MIB),
    **_family(["Ascend910_9381", "Ascend910_9382", "Ascend910_9391", "Ascend910_9392"], short_soc="Ascend910_93",
              arch=220, ai_core_cnt=24, vector_core_cnt=48, ub_size=196608, l2_size=192 * MIB),
    **_family(["Ascend910_9362"], short_soc="Ascend910_93", arch=220, ai_core_cnt=20, vector_core_cnt=40,
              ub_size=196608, l2_size=168 * MIB),
    **_family(["Ascend910_9372"], short_soc="Ascend910_93", arch=220, ai_core_cnt=20, vector_core_cnt=40,
              ub_size=196608, l2_size=192 * MIB),
    **_family(["Ascend310P1"], short_soc="Ascend310P", arch=200, ai_core_cnt=10, vector_core_cnt=8, ub_size=262144,
              l2_size=16 * MIB),
    **_family(["Ascend310P3", "Ascend310P5", "Ascend310P7"], short_soc="Ascend310P", arch=200,
              ai_core_cnt=8, vector_core_cnt=7, ub_size=262144, l2_size=16 * MIB),
    **_family(["Ascend910A", "Ascend910PremiumA", "Ascend910ProA"], short_soc="Ascend910", arch=100,
              ai_core_cnt=32, vector_core_cnt=0, ub_size=262144, l2_size=32 * MIB),
    **_family(["Ascend910ProB"], short_soc="Ascend910", arch=100, ai_core_cnt=30, vector_core_cnt=0, ub_size=262144,
              l2_size=32 * MIB),
}

DEFAULT_SOC = "Ascend910B1"


def get_soc(name: str | SocSpec = DEFAULT_SOC) -> SocSpec:
    """The record of SoC ``name``; an unknown name is an error that lists the known ones."""
    if isinstance(name, SocSpec):
        return name
    try:
        return _SOCS[name]
    except (KeyError, TypeError):
        raise AclnnError(ACLNN_ERR_PARAM_INVALID,
                         f"soc: unknown SoC {name!r}; known: {', '.join(sorted(_SOCS))}") from None


def list_socs() -> list[str]:
    """The names :func:`get_soc` knows, sorted."""
    return sorted(_SOCS)
