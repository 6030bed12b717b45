"""One core's state as the compiled kernel keeps it: its records (counters, error rows, the instruction log and the
builds that keep them), the pipe table, the UB plan and the places in it, the live schedule a core keeps for the
cost model; and the memo by identity with which the host derives things from a frozen plan or tiling once."""
