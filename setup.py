"""The C extension of disq (everything else is in pyproject.toml): one tiny function,
disq/gcfree.py says why. Optional: without a compiler disq falls back to ctypes,
~0.4 us slower per job created."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("disq._gcfree", ["disq/_gcfree.c"], optional=True)])
