"""Bit-exact numerics that Numba compiles: casts between fp32 and the 16-bit float formats (b16), the Exp."""
