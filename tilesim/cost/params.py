"""The cost model's figures per SoC family, as data, each with its public source and whether it is an estimate.

Where the figures come from. Clocks and memory rates come from CANN's platform files (``platform_config/*.ini``
in the CANN 8.1.RC1 toolkit) and from Huawei's A2 spec table in hicann/ops-nn. Per-core MTE rates and latencies,
vector start-ups and scalar latencies are constants of PyPTO's A2/A3 cost models in
hicann/pypto: the instruction-level ``simulation_ca/A2A3/model`` and the fitted task-level table
``simulation/arch/A2A3/PostSimulatorA2A3.h``. Neither model is a published measurement, and they disagree. The
fitted table puts a binary op at about 2 cycles per 256 B repeat and a GM read at about 1400 cycles. The
instruction-level model gives 1 cycle and 311 cycles. Vector throughputs by instruction and element size are
msKPP's measurements on one 910B1 core (``csrc/prof_data/resource910b.cpp`` in xiaobingling93-pixel/Ascend-mskpp).

How far to trust them. The clocks and chip bandwidths of Ascend910B, Ascend910_93 and Ascend310P are public
figures. The Ascend910B and Ascend910_93 latencies are only as good as PyPTO's models, probably within a
factor of 2; the vector throughputs are measured. Nothing public gives per-instruction figures for Ascend310P or
Ascend910, so they reuse the A2/A3 figures at their own clocks. The only support for that is the vector width
their inis give, ``vec_calc_size=128``, the same as A2/A3. All Ascend910 figures, and the SyncAll and launch
overheads of every family, are our estimates. ``estimates`` lists every field that has no published figure behind
it, ``fitted`` those fitted to kernels measured on an NPU (``python -m bench.calibrate``, which prints how far the
estimates are from those measurements): on A2/A3, the least time of a transfer's row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilesim.errors import ACLNN_ERR_PARAM_INVALID, AclnnError
from tilesim.soc import SocSpec, get_soc


@dataclass(frozen=True)
class CostParams:
    """Timing figures of one SoC family. Times are in cycles of ``clock_ghz`` unless the name says otherwise."""

    family: str  # SocSpec.short_soc
    clock_ghz: float
    gm_bandwidth_gbs: float  # GM (HBM/DDR) bandwidth of the whole chip, shared by the cores that move data
    mte2_core_gbs: float  # the most one core's MTE2 (GM -> UB) moves per second
    mte3_core_gbs: float  # the most one core's MTE3 (UB -> GM) moves per second
    mte2_latency_cycles: float  # GM read latency of one DataCopy / DataCopyPad GM -> UB
    mte3_latency_cycles: float  # GM write latency of one DataCopy / DataCopyPad UB -> GM
    mte_burst_cycles: float  # the least time of one row (burst) of a transfer: many short rows take this each
    l2_read_rate: float  # bytes per cycle per AI core the L2 serves reads at (the chip's: x AI cores x clock)
    vec_startup_cycles: dict[str, float]  # issue to result of one vector instruction beyond its repeats, by class
    vec_repeat_cycles: dict[str, tuple[float, float]]  # cycles per 256 B repeat by kind (VEC_KINDS), on 16-bit
    # elements or narrower and on 32-bit or wider: the pipe's occupancy
    scalar_issue_cycles: float  # the scalar unit issuing one instruction to a pipe's queue
    get_value_cycles: float  # GetValue / SetValue: a UB scalar access, after the pipe sync it needs
    sync_all_us: float  # one SyncAll across the launched cores
    launch_us: float  # kernel launch overhead, once per launch
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # field -> public source
    estimates: frozenset[str] = frozenset()  # fields that are our estimates, not published figures
    fitted: frozenset[str] = frozenset()  # fields fitted to measured kernels (bench/calibrate.py)


# Public sources, cited per field below.
_INI = "leideng/CANN-8.1.RC1 Ascend/ascend-toolkit/8.1.RC1/aarch64-linux/data/platform_config/"
_OPS_NN_GUIDE = "hicann/ops-nn docs/zh/develop/cross_platform_migration_guide.md"
_CA = "hicann/pypto framework/src/cost_model/simulation_ca/A2A3/"  # instruction-level A2/A3 model
_FIT = "hicann/pypto framework/src/cost_model/simulation/arch/A2A3/PostSimulatorA2A3.h"  # fitted {a, b} table
_FAST = "hicann/pypto framework/src/cost_model/simulation/arch/PipeSimulatorFast.cpp"
_SYNCALL_DOC = "hiascend.com Ascend C API SyncAll (atlasascendc_api_07_0204)"
_MSKPP = "xiaobingling93-pixel/Ascend-mskpp csrc/prof_data/resource910b.cpp"

# Per-repeat cycles on A2/A3, measured by msKPP on one 910B1 core: 256 / the bytes a cycle at its largest size
# (b16 figure, b32 figure).
_A2A3_REPEAT = {"VADD": (2.0, 2.0), "VADDS": (1.0, 1.0), "VEXP": (4.0, 2.0), "VDIV": (4.0, 4.0), "VCADD": (7.0, 3.0),
                "VCMAX": (7.0, 7.0), "VCGADD": (7.0, 1.0), "VCPADD": (1.0, 1.0), "VGATHER": (24.0, 12.0)}
# The fixed vector delay 15 plus the op's own (binary: VADD 6 / VMUL 7; scalar: VADDS 6 / VMULS 7; unary: VEXP 12;
# div: VDIV 13; reduce: VCADD fp32 20; cast: VCONV 4; dup: no entry, VCONV's 4 taken).
_A2A3_STARTUP = {"binary": 22.0, "scalar": 22.0, "unary": 27.0, "div": 28.0, "reduce": 35.0, "cast": 19.0,
                 "dup": 19.0}

_A2A3_VECTOR_SOURCES = {
    "vec_startup_cycles": f"{_CA}model/pipe.h vecDelay_=15 plus the op's delay in {_CA}model/def.h VEC_VALU_TAB: "
                          "VADD/VSUB/VADDS 6, VMUL/VMULS 7, VMAX/VMIN/VABS 4, VEXP 12, VSQRT/VDIV 13, VLN 14, "
                          "VCONV 4, VCADD 20 (fp32) / 23 (fp16), VCGADD 12; we give each class 15 + its op's "
                          "delay (binary and scalar 7, unary VEXP's 12, reduce VCADD's 20, dup VCONV's 4). In "
                          f"pipe.cpp CalcVecOp, end = issue + repeats*256/bytes_per_cycle + delay + 15. {_FIT}'s "
                          "b term (x2000 cycles/us) is 28-52 cycles per tile op (ADD 37.6, EXP 51.9)",
    "vec_repeat_cycles": f"{_MSKPP} g_vecTypeMap, single-core measurements on 910B1 ({{elements, bytes/cycle, -, "
                         "repeats, cycles}), at each instruction's largest size, 256 / bytes a cycle (b16, b32): "
                         "VADD/VSUB/VMUL/VMAX/VMIN/VCMPV/VSEL/VAXPY 128 B/cycle = 2 both; VADDS/VMULS/VMAXS/VMINS/"
                         "VCMPVS/VABS/VREC/VRSQRT/VRELU/VECTORDUP/VCOPY/VCONV/VBRCB/VCPADD 255 = 1; VEXP/VLN 65.7 "
                         "and 127.8 = 3.9 and 2, VSQRT 64.0 and 127.8 = 4 and 2; VDIV 62.0 and 64.0 = 4.1 and 4; "
                         "VCADD 36.5 and 85.3 = 7 and 3; VCMAX/VCMIN 36.6 = 7 both; VCGADD/VCGMAX 36.6 and 255 = 7 "
                         "and 1; VGATHER 10.6 and 21.0 = 24 and 12. They agree with "
                         f"{_FAST} (parallelism 128 B/cycle: 2 for a binary op) and {_FIT} (ADD 2.46, EXP 1.79, DIV "
                         f"1.96 cycles per 256 B, fp32), and {_CA}model/def.h's VCMAX/VCMIN read-modify-write of 7 "
                         "cycles a repeat; they differ from its 1 cycle of VADD at peak",
    "scalar_issue_cycles": f"{_CA}model/pipe.cpp GetOpCycle: one instruction enters the pipe per tick; CalcAlu "
                           "aluLatency=2 for a scalar ALU op",
    "get_value_cycles": f"{_CA}model/pipe.cpp CalcLd ldLatency=6 (CalcSt sdLatency=4); the pipe sync before "
                        "it is not included. The Ascend C SetValue/GetValue docs say only that frequent use is slow",
}

_A2A3_MTE_SOURCES = {
    "mte2_latency_cycles": f"{_CA}SimulatorA2A3.cpp sets the GM read latency to 307, plus ddrRdLatencyDiver_=4 "
                           f"in model/pipe.h (default 347). {_FAST} PostSimulate adds rGmLatency=1400 per COPY_IN",
    "mte3_latency_cycles": f"{_CA}SimulatorA2A3.cpp sets the GM write latency to 153, plus 4 (default 203). "
                           f"{_FAST} PostSimulate adds wGmLatency=300 per COPY_OUT",
    "mte_burst_cycles": "fitted: the SwiGlu cases of hicann/cann-bench (bench/calibrate.py) whose rows are short "
                        "(7: rows of 14 B, 10: 2 B, 14: 200 B; 9210, 62628 and 3375 bursts a core, where their "
                        "bytes take a tenth of the measured time), so that the mean log of est/measured over the "
                        "three is 0 (it is at 60.5). Nothing public gives it: "
                        f"{_CA}model/pipe.cpp CalcMovOutUb/CalcMovUbOut(Align) cost a strided transfer "
                        "burstNum*max(ceil(burst/87), ceil(burst/128)) cycles, at least 1 a burst",
}


def _params(family: str, clock: float, gm: float, l2_read_rate: float, sync_all_us: float, sources: dict[str, str],
            estimates: frozenset[str], fitted: frozenset[str]) -> CostParams:
    """A family's record: its clock, GM bandwidth, L2 read rate and SyncAll cost; the A2/A3 per-core and
    per-instruction figures (87 B/cycle per MTE at its own clock)."""
    mte = round(87 * clock, 1)
    return CostParams(
        family=family, clock_ghz=clock, gm_bandwidth_gbs=gm, mte2_core_gbs=mte, mte3_core_gbs=mte,
        mte2_latency_cycles=311.0, mte3_latency_cycles=157.0, mte_burst_cycles=60.0, l2_read_rate=l2_read_rate,
        vec_startup_cycles=dict(_A2A3_STARTUP), vec_repeat_cycles=dict(_A2A3_REPEAT), scalar_issue_cycles=1.0,
        get_value_cycles=6.0, sync_all_us=sync_all_us, launch_us=5.0, sources=sources, estimates=estimates,
        fitted=fitted)


def _a2a3(family: str, clock: float, clock_src: str, gm: float, gm_src: str, estimates: frozenset[str]):
    """An A2/A3 family (DAV_2201): PyPTO's A2A3 models apply to both Ascend910B and Ascend910_93."""
    return _params(
        family, clock, gm, 110.0, 1.0,
        {
            "clock_ghz": clock_src,
            "gm_bandwidth_gbs": gm_src,
            "l2_read_rate": f"{_INI}Ascend910B2.ini (and every 910B and 910_93 ini) l2_read_rate=110 B/cycle/core "
                           "(l2_write_rate=86, ddr_read_rate=32); ai_core_cnt=24 (20 on 910B3/B4): 4.75 TB/s on "
                           "910B2. Writes are not given it: the model sends every write to HBM",
            "mte2_core_gbs": f"{_CA}model/pipe.h ddrRdBandWidth_=87 B/cycle (UB write 128 B/cycle), x clock. "
                             f"{_FIT} COPY_IN a=2.613 (x ratio 2) is 95.7 B/cycle at freqTrans=2000. "
                             f"{_INI}Ascend910B1.ini ddr_read_rate=32 B/cycle/core is the all-cores fair share",
            "mte3_core_gbs": f"{_CA}model/pipe.h ddrWrBandWidth_=87 B/cycle (UB read 128 B/cycle), x clock. "
                             f"{_FIT} COPY_OUT a=3.2883 is 76 B/cycle. {_INI}Ascend910B1.ini ub_to_ddr_rate=64",
            **_A2A3_MTE_SOURCES,
            **_A2A3_VECTOR_SOURCES,
            "sync_all_us": f"estimate: hardware SyncAll exists on A2/A3 ({_SYNCALL_DOC}); no published cost. "
                           "hicann/pypto simulation/config/CoreConfig.toml calendarSetQueueWDelay=140 cycles "
                           "per cross-core counter set; a set, a wait and core skew come to about 1 us",
            "launch_us": "estimate: no public figure for an aclnn kernel's device-side start and end; "
                         "msprof's Task Duration includes them",
        },
        estimates,
        frozenset({"mte_burst_cycles"}),
    )


def _older(family: str, clock: float, clock_src: str, gm: float, gm_src: str, l2_read_rate: float,
           l2_src: str, estimates: frozenset[str]):
    """A family PyPTO does not model (310P: DAV_2002; 910: DAV_1001): the A2/A3 per-instruction figures at its
    own clock. Every figure except the clock and the GM bandwidth is an estimate."""
    reused = f"estimate: A2/A3 figure reused; nothing public for {family}. Its ini has vec_calc_size=128, as A2/A3"
    return _params(
        family, clock, gm, l2_read_rate, 3.0,
        {
            "clock_ghz": clock_src,
            "gm_bandwidth_gbs": gm_src,
            "l2_read_rate": l2_src,
            "mte2_core_gbs": f"estimate: the A2/A3 single-core rate 87 B/cycle ({_CA}model/pipe.h) x clock",
            "mte3_core_gbs": f"estimate: the A2/A3 single-core rate 87 B/cycle ({_CA}model/pipe.h) x clock",
            **{k: f"{reused}. {v}" for k, v in _A2A3_MTE_SOURCES.items()},
            **{k: f"{reused}. {v}" for k, v in _A2A3_VECTOR_SOURCES.items()},
            "sync_all_us": f"estimate: {_SYNCALL_DOC} lists only the soft (GM-workspace) SyncAll here. Each core "
                           "writes its flag through MTE3 and polls all flags through MTE2, several GM round "
                           "trips at a lower clock",
            "launch_us": "estimate: no public figure for a kernel's device-side start and end",
        },
        estimates,
        frozenset(),
    )


_EST_OLDER = frozenset({"mte2_core_gbs", "mte3_core_gbs", "mte2_latency_cycles", "mte3_latency_cycles",
                        "mte_burst_cycles",
                        "vec_startup_cycles", "vec_repeat_cycles", "scalar_issue_cycles", "get_value_cycles",
                        "sync_all_us", "launch_us"})

_PARAMS: dict[str, CostParams] = {
    p.family: p
    for p in (
        _a2a3("Ascend910B", 1.8,
              f"{_OPS_NN_GUIDE}: Atlas A2 AICore 频率 1.8 (GHz); {_INI}Ascend910B3.ini cube_freq=1800 "
              "(910B1 1850, 910B4 1500)",
              1600.0,
              f"{_OPS_NN_GUIDE}: Atlas A2 Memory 64 GB, 带宽 1.6TB/s. {_INI}Ascend910B1.ini ddr_rate=32 "
              "B/cycle/core x 24 cores x 1.85 GHz = 1.42 TB/s. 910B4 (32 GB) is lower; no public figure",
              frozenset({"sync_all_us", "launch_us"})),
        _a2a3("Ascend910_93", 1.85,
              f"{_INI}Ascend910_9391.ini cube_freq=1850 (Ascend910_9362.ini: 1500)",
              1600.0,
              f"estimate: one Ascend910_93xx device is one die with the 910B1's memory rates ({_INI}"
              "Ascend910_9391.ini ddr_rate=32, l2_rate=110, 64 GB), so we give the A2 1.6 TB/s "
              f"({_OPS_NN_GUIDE})",
              frozenset({"gm_bandwidth_gbs", "sync_all_us", "launch_us"})),
        _older("Ascend310P", 1.06,
               f"{_INI}Ascend310P3.ini and Ascend310P1.ini [AICoreSpec] cube_freq=1060 (Vector Core vec_freq=1000)",
               204.8,
               "https://avalanchenoticias.com.br/servidores-clusters-supercomputadores-computadores-industriais-"
               "e-multiprocessadores/o-acelerador-huawei-atlas-300i-duo-e-equipado-com-um-par-de-chips-ascend-310-"
               "ai : Atlas 300I Duo (two 310P chips) LPDDR4X up to 408 GB/s. "
               f"{_INI}Ascend310P3.ini: 8 AI cores x ddr_rate 17 B/cycle x 1.06 GHz + 7 vector cores x 9 x "
               "1.0 GHz = 207 GB/s",
               114.0, f"{_INI}Ascend310P3.ini [AICoreMemoryRates] l2_read_rate=114 B/cycle/core (the vector "
                      "cores' [VectorCoreMemoryRates]: 57)",
               _EST_OLDER),
        _older("Ascend910", 1.0,
               "estimate: 256 TFLOPS FP16 / (32 cores x 8192 FLOP/cycle) = 0.98 GHz (linleygroup.com newsletter "
               f"6076, anandtech.com/show/14756); {_INI}Ascend910B.ini (legacy 910ProB, Short_SoC_version="
               "Ascend910, 30 cores) cube_freq=900",
               1200.0,
               "estimate: four HBM2 stacks (linleygroup.com/newsletters/newsletter_detail.php?num=6076), the "
               f"commonly quoted 1.2 TB/s; {_INI}Ascend910B.ini ddr_rate=32 x 30 cores x 0.9 GHz = 864 GB/s",
               110.0, f"{_INI}Ascend910B.ini (legacy 910ProB) and Ascend910A.ini l2_read_rate=110 B/cycle/core",
               _EST_OLDER | {"clock_ghz", "gm_bandwidth_gbs"}),
    )
}


def cost_params(soc: str | SocSpec) -> CostParams:
    """The cost figures of ``soc``'s family."""
    spec = get_soc(soc)
    try:
        return _PARAMS[spec.short_soc]
    except KeyError:
        raise AclnnError(ACLNN_ERR_PARAM_INVALID, f"soc: no cost figures for {spec.name} ({spec.short_soc}); "
                                                  f"known families: {', '.join(sorted(_PARAMS))}") from None
