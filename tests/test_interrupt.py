"""Ctrl-C during a launch (:mod:`tilesim.runtime.interrupt`): the KeyboardInterrupt reaches the caller at once, after
which nothing of the launch writes; a checked launch leaves the outputs as they were; the next call is right. In a
process of its own (``tests/spin_kernel.py``), sent SIGINT half a second into a launch that would run for ever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_launch_here  # its launches run in subprocesses

ROOT = Path(__file__).resolve().parent.parent
CASES = ["1:plain:fast", "24:plain:fast", "24:synced:fast", "1:synced:fast", "24:plain:checked", "4:synced:checked",
         "24:plain:fast:reinstalled", "1:synced:fast:reinstalled"]
CLEAN_STOP = "24:plain:fast:clean-stop"  # SIGINT's handler the program's own, which does not raise


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    env.pop("TILESIM_CHECKS", None)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "spin_kernel.py"), *CASES, CLEAN_STOP], env=env,
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # a launch that is not stopped never ends
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in lines}


@pytest.mark.parametrize("case", CASES)
def test_ctrl_c_stops_a_launch_and_nothing_writes_after(results: dict[str, dict[str, object]], case: str) -> None:
    r = results[case]
    assert r["raised"] == "KeyboardInterrupt"
    assert not r["written_after"], "a core went on writing the output after the KeyboardInterrupt"
    assert r["next_call_right"]
    if ":checked" in case:  # a checked launch computes into temporaries: the caller's arrays are as they were
        assert r["untouched"]


def test_ctrl_c_with_a_handler_of_the_programs_own_lets_the_launch_end(
        results: dict[str, dict[str, object]]) -> None:
    r = results[CLEAN_STOP]
    assert r["handler_ran"] and r["raised"] == "nothing" and r["complete"]
