"""The pipes of the AI Core's vector side, in the two numberings the emulator uses.

- ``pipe_t`` (PIPE_S, PIPE_V, ...): Ascend C's enum, as CCE numbers it, the values a kernel passes to
  PipeBarrier<pipe>.
- The lanes (LANE_MTE2, LANE_VECTOR, LANE_MTE3, LANE_SCALAR): the index of a pipe in the emulator's records, the
  instruction log (``tilesim.core.records``), checked mode's pipe-hazard state (``tilesim.machine.hazard``) and the cost
  model's timeline (``tilesim.core.timeline``), in msprof's lane order.

:data:`LANE_OF_PIPE` takes a ``pipe_t`` to its lane.
"""

from __future__ import annotations

# pipe_t, as CCE numbers them; the AIV has S, V, MTE2 and MTE3. One assignment each, so that the API pages
# (griffe, which reads the source) see each value.
PIPE_S = 0
PIPE_V = 1
PIPE_M = 2
PIPE_MTE1 = 3
PIPE_MTE2 = 4
PIPE_MTE3 = 5
PIPE_ALL = 6

LANE_MTE2, LANE_VECTOR, LANE_MTE3, LANE_SCALAR = 0, 1, 2, 3
LANE_NAMES = ("MTE2", "VECTOR", "MTE3", "SCALAR")  # msprof's lane names
LANE_LETTERS = ("MTE2", "V", "MTE3", "S")  # HardEvent's and msSanitizer's names of the lanes
N_LANES = len(LANE_NAMES)
# pipe_t -> lane (-1: not on the AIV; PIPE_ALL apart)
LANE_OF_PIPE = (LANE_SCALAR, LANE_VECTOR, -1, -1, LANE_MTE2, LANE_MTE3, -1)
