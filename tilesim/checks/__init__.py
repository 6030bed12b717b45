"""Checked mode's host side: the races between cores found in a recorded launch, and the findings as reports.

The device side (the UB shadow, pipe hazards, API rules) runs inside the kernel: :mod:`tilesim.core.records` and
:mod:`tilesim.machine.hazard`."""
