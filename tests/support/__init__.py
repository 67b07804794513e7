"""Shared test helpers: the in-process daemon, the subprocess daemon, small client helpers."""
