"""Unit tests: disq imported directly, no sockets. (A package, so that module names
may repeat those in tests/integration.)"""
