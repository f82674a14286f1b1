"""image."""
