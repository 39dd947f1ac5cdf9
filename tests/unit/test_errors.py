"""Error replies hold no state across raises (a shared exception instance would chain
every raise's traceback, and with it the refused request's arguments, for good)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import disq
from disq import errors


def every_disq_module() -> list:
    modules = []
    for info in pkgutil.walk_packages(disq.__path__, "disq."):
        if info.name.endswith("__main__"):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def test_no_module_keeps_an_exception_instance() -> None:
    shared = [f"{module.__name__}.{name}" for module in every_disq_module()
              for name, value in vars(module).items() if isinstance(value, BaseException)]
    assert shared == [], "raise a class (errors.fixed) or a fresh instance instead"


def test_a_fixed_error_is_fresh_at_each_raise() -> None:
    caught = []
    for _ in range(2):
        try:
            raise errors.NOREPL
        except errors.DisqError as exc:
            caught.append(exc)
    first, second = caught
    assert first is not second
    assert second.__traceback__ is not None and second.__traceback__.tb_next is None
    assert errors.NOREPL.__dict__.get("__traceback__") is None


@pytest.mark.parametrize("error", [errors.NOREPL, errors.BADID, errors.SYNTAX, errors.OOM])
def test_a_fixed_error_replies_as_before(error: type[errors.FixedError]) -> None:
    assert error().reply() == errors.DisqError(error.CODE, error.MESSAGE).reply()
    assert error.REPLY.startswith(b"-" + error.CODE.encode() + b" ")
    assert error.REPLY.endswith(b"\r\n")


def test_an_error_quoting_the_request_stays_one_line() -> None:
    assert errors.err("bad\r\nline").reply() == b"-ERR bad  line\r\n"
