"""The append-only file."""
