"""Tests of fstate's stream runtime (fstate.runtime)."""
