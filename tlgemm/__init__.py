"""tlgemm: Hopper GEMMs built from WGMMA macro-instructions, in TileLang and Triton."""

__version__ = "0.1.0"
