"""Checkpoints: their settings, the coordinator, restoring from them, restart strategies and
failure injection."""
