"""The NPU cost model (:mod:`tilesim.cost.model`), its figures per SoC (:mod:`tilesim.cost.params`) and the schedule
as a Chrome trace (:mod:`tilesim.cost.trace`). The schedule itself is computed by :mod:`tilesim.core.timeline`,
which the kernels compile in."""
