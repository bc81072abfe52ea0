"""Composition root: settings, profile wiring and the `ragsync` command line."""

__version__ = "0.1.0"
