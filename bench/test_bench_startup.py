"""Warm start under pytest-benchmark: ``bench.startup.warm_once`` (a fresh interpreter imports kernels and gets
its first rms_norm_grad result on [8, 128] fp32, the Numba cache warm; see ``bench/startup.py``).

Timed, with ``--benchmark-enable``: the whole subprocess as this process sees it, 3 rounds after one untimed
round (it refills the Numba cache if the sources changed), by ``benchmark.pedantic``. The subprocess's own
figures (process start to result, which the < 1.5 s target is about; the part after interpreter start;
the import; the first call) go to ``extra_info`` as medians over the timed rounds, and the summary prints them in
its "startup" section. With benchmarks disabled (the default addopts) the subprocess runs once, as a smoke test.
No bytes are counted. The cold start (``python -m bench.startup --cold``) is not run here: it takes minutes.
"""

from __future__ import annotations

import statistics

import pytest

from bench import startup

GROUP = "startup"  # bench/conftest.py's STARTUP_GROUP
FIGURES = ("to_result_s", "after_start_s", "import_s", "first_call_s", "process_s")


@pytest.mark.benchmark(group=GROUP)
def test_warm_start(benchmark):
    """The warm start in a fresh subprocess; its result must be finite."""
    results = []
    benchmark.pedantic(lambda: results.append(startup.warm_once()), rounds=startup.WARM_RUNS, iterations=1,
                       warmup_rounds=1)
    timed = results[-startup.WARM_RUNS:] if benchmark.enabled else results
    assert all(r["ok"] for r in results), "the child's dx or dgamma is not finite"
    benchmark.extra_info.update(op="warm start", dtype="fp32", shape=[8, 128], kernel="rms_norm_grad",
                                what=startup.WARM_WHAT, timed="the whole subprocess (sys.executable -c ...)",
                                runs=timed, **{k: statistics.median(r[k] for r in timed) for k in FIGURES})
