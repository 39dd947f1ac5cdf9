"""disq: a multi-master in-memory job broker compatible with Disque.

The hot path may be compiled by mypyc (setup.py's NATIVE;
docs/concepts/compiled-hot-path.md): extension modules beside their .py files, which
stay the one source. Python imports an extension module before a .py file of the same
name; here, when the compiled modules are not to be used, every module of disq is
imported from its .py file instead (`_SourceFinder`): with DISQ_PURE_PYTHON set (to
anything but "" or "0"), when the shared library of the build is missing, or when a
compiled module's .py file changed since the build (a checkout edited or moved on
without `make install`). `pure_python` says why ("" when compiled); the node logs it
at start-up and INFO shows it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from importlib.util import spec_from_file_location

_HERE = os.path.dirname(os.path.abspath(__file__))
_SHARED_LIB = "_native__mypyc"
_SLACK_S = 2  # a wheel's files are written in any order, a moment apart


def _why_pure_python() -> str:
    if os.environ.get("DISQ_PURE_PYTHON", "") not in ("", "0"):
        return "DISQ_PURE_PYTHON is set"
    built = None
    for suffix in EXTENSION_SUFFIXES:
        try:
            built = os.stat(os.path.join(_HERE, _SHARED_LIB + suffix)).st_mtime
            break
        except OSError:
            continue
    if built is None:
        return "not compiled"
    for directory, _, files in os.walk(_HERE):
        for name in files:
            if name.startswith("_") or not name.endswith(".so"):
                continue
            source = os.path.join(directory, name.partition(".")[0] + ".py")
            try:
                changed = os.stat(source).st_mtime > built + _SLACK_S
            except OSError:
                continue
            if changed:
                return f"{os.path.relpath(source, os.path.dirname(_HERE))} changed since the build"
    return ""


class _SourceFinder(MetaPathFinder):
    """Finds disq's modules as their .py files, never as their compiled builds."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: object = None) -> ModuleSpec | None:
        if not fullname.startswith("disq.") or path is None:
            return None
        name = fullname.rpartition(".")[2]
        for entry in path:
            source = os.path.join(entry, name + ".py")
            if os.path.isfile(source):
                return spec_from_file_location(fullname, source)
        return None  # a package, or an extension of its own (_gcfree): as usual


pure_python = _why_pure_python()
if pure_python and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceFinder())

from .config import DISQ_VERSION as __version__  # noqa: E402  (after the finder)

__all__ = ["__version__", "pure_python"]
