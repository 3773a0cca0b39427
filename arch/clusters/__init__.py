"""Built-in cluster presets (TOML)."""
