"""Tools on top of the runtime: the tiling explorer, an op's spec for it, the command line, the pytest plugin."""
