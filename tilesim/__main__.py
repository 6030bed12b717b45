"""``python -m tilesim``: the ``tilesim`` command (:mod:`tilesim.tools.cli`)."""

from tilesim.tools.cli import main

if __name__ == "__main__":  # a spawned explore worker imports this module again: it must not run the command
    raise SystemExit(main())
