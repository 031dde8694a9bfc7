"""Checkpoints in and out: the hub, the legacy-key weight map, safety checks, loading and saving."""
