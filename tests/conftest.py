"""Shared pytest configuration for the whole suite."""

import os

# Plots are rendered without a display everywhere.
os.environ.setdefault("MPLBACKEND", "Agg")
