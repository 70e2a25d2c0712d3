"""Hopper operand math and the WGMMA macro emitter."""
