"""One core's state as the compiled kernel keeps it: its records (counters, error rows, the instruction log and the
builds that keep them), the pipe table, the UB plan and the places in it, and the live schedule a core keeps for
the cost model."""
