"""Triton backend: the stages abstractions and kernels built from them."""
