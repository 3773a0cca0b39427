"""Design-space exploration: area/energy studies, compare, sweeps, plots."""
