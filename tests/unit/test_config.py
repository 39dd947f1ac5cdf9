"""Config's typed settings are the directive table's: one attribute per directive,
of its default's type."""

from __future__ import annotations

import typing

from disq.config import Config, Settings
from disq.directives import DIRECTIVES


def test_every_directive_is_a_typed_setting() -> None:
    hints = typing.get_type_hints(Settings)
    assert set(hints) == {name.replace("-", "_") for name in DIRECTIVES}
    config = Config()
    for name, directive in DIRECTIVES.items():
        attr = name.replace("-", "_")
        expected = typing.get_origin(hints[attr]) or hints[attr]
        assert isinstance(directive.default, expected), (name, hints[attr])
        assert getattr(config, attr) == directive.default


def test_a_setting_follows_its_directive() -> None:
    config = Config()
    config.apply("maxmemory", ["2mb"])
    config.apply("bind", ["127.0.0.2", "::1"])
    assert config.maxmemory == 2 * 1024 * 1024 and config.bind == ["127.0.0.2", "::1"]
    assert config.values["maxmemory"] == config.maxmemory
