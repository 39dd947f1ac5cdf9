"""Argument parsing shared by the command modules: the core's rules (disq/requests.py)."""

from __future__ import annotations

from ...requests import parse_int, timeout_ms, validate_ids

__all__ = ["parse_int", "timeout_ms", "validate_ids"]
