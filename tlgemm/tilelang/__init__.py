"""TileLang backend: the stages abstractions on the WGMMA emitter."""
