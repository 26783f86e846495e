"""Shared pytest fixtures and the capability checks that decide skips (one-line reasons)."""
