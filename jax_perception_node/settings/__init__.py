"""Settings: the one parameter schema, the validated configuration, checkpoint files."""
