"""The launch: ``@kernel``, the generated core loops, the host threads and SyncAll coroutines, Ctrl-C, the run
report."""
