"""The node's configuration: typed settings built from the directive table
(directives.py), loaded from config files and `--flags`, and CONFIG GET/SET/REWRITE."""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Callable
from typing import Any

from .directives import (
    DIRECTIVES,
    DISQ_VERSION,
    SPECIAL_DOCS,
    VERSION,
    ConfigApplyError,
    ConfigError,
    config_lines,
    default_lines,
)

__all__ = ["Config", "Settings", "ConfigError", "ConfigApplyError", "DIRECTIVES",
           "DISQ_VERSION", "VERSION", "SPECIAL_DOCS", "default_lines"]


class Settings:
    """Every directive's value, typed: an attribute per directive, its name with
    underscores (tests/unit/test_config.py checks this list against the table)."""

    port: int
    bind: list[str]
    tcp_backlog: int
    tcp_keepalive: int
    timeout: int
    unixsocket: str
    unixsocketperm: int
    maxclients: int
    requirepass: str
    aclfile: str
    dir: str
    daemonize: bool
    pidfile: str
    loglevel: str
    logfile: str
    syslog_enabled: bool
    syslog_ident: str
    syslog_facility: str
    databases: int
    hz: int
    activerehashing: bool
    watchdog_period: int
    maxmemory: int
    maxmemory_policy: str
    maxmemory_samples: int
    client_output_buffer_limit: dict[str, tuple[int, int, int]]
    appendonly: bool
    appendfilename: str
    appendfsync: str
    no_appendfsync_on_rewrite: bool
    auto_aof_rewrite_percentage: int
    auto_aof_rewrite_min_size: int
    aof_rewrite_incremental_fsync: bool
    aof_load_truncated: bool
    aof_enqueue_jobs_once: bool
    aof_checksum: bool
    aof_load_corrupt: str
    aof_encryption_key_file: str
    cluster_config_file: str
    cluster_node_timeout: int
    slowlog_log_slower_than: int
    slowlog_max_len: int
    latency_monitor_threshold: int
    metrics_port: int
    metrics_bind: str
    client_query_buffer_limit: int
    proto_max_bulk_len: int
    proto_max_multibulk_len: int
    job_max_body: int
    cluster_secret: str
    cluster_open_bus: bool
    clock_skew_warn_ms: int
    maxclients_per_ip: int
    client_rate_limit: int
    http_port: int
    http_bind: str
    http_max_body: int
    http_read_timeout: int
    http_allowed_hosts: str
    http_allowed_origins: str
    tls_port: int
    tls_cert_file: str
    tls_key_file: str
    tls_ca_cert_file: str
    tls_ca_cert_dir: str
    tls_auth_clients: str
    tls_cluster: bool
    tls_protocols: str


class Config(Settings):
    """The node's configuration. Values are read as attributes with underscores:
    `config.cluster_node_timeout`."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.config_file: str | None = None
        # rename-command, in order: (name, new name or b"" for none), as the command
        # table spells them (lowercase bytes); the server applies them at start-up.
        self.renamed_commands: list[tuple[bytes, bytes]] = []
        # The command names rename-command checks against (the program sets it: the
        # core does not know the server's table), as renamed so far.
        self.command_names: set[bytes] | None = None
        self.listeners: list[Callable[[str, Any], None]] = []
        for name, directive in DIRECTIVES.items():
            self._store(name, _copy(directive.default))

    def _store(self, name: str, value: Any) -> None:
        self.values[name] = value
        setattr(self, name.replace("-", "_"), value)

    @property
    def node_port(self) -> int:
        """The port the node is known by in the cluster (its bus is this + 10000):
        `port`, or `tls-port` when plain TCP is off (`port 0`), as in Redis."""
        return self.port or self.tls_port

    # -- loading -----------------------------------------------------------------
    def apply(self, name: str, args: list[str], *, at_runtime: bool = False) -> None:
        """Set one directive from its textual arguments."""
        name = name.lower()
        if name == "include":
            if len(args) != 1:
                raise ConfigError("wrong number of arguments")
            self.load_file(args[0])
            return
        if name == "rename-command":
            if len(args) != 2:
                raise ConfigError("wrong number of arguments")
            self._rename_command(args[0], args[1])
            return
        directive = DIRECTIVES.get(name)
        if directive is None:
            raise ConfigError(f"Bad directive or wrong number of arguments: '{name}'")
        if at_runtime and not directive.settable:
            raise ConfigError(f"Unsupported CONFIG parameter: {name}")
        if directive.nargs == 1 and len(args) != 1:
            if at_runtime and directive.nargs == 1:
                args = [" ".join(args)]
            else:
                raise ConfigError(f"wrong number of arguments for '{name}'")
        if directive.nargs == -1 and not args:
            raise ConfigError(f"wrong number of arguments for '{name}'")
        value = directive.parse(args)
        self._store(name, value)
        for listener in self.listeners:
            listener(name, value)

    def _rename_command(self, name: str, new_name: str) -> None:
        """Redis's rename-command: the command answers only as `new_name`, or no
        longer exists when it is "". Checked here, against the command table, so a
        typo stops the start instead of leaving the command in place."""
        names = self.command_names
        old, new = name.encode().lower(), new_name.encode().lower()
        if names is None:
            raise ConfigError("rename-command: no command table to check the name against")
        if old not in names:
            raise ConfigError(f"No such command in rename-command: '{name}'")
        names.discard(old)
        if new in names:
            raise ConfigError(f"Target command name already exists: '{new_name}'")
        if new:
            names.add(new)
        self.renamed_commands.append((old, new))

    def load_text(self, text: str, origin: str = "config") -> None:
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, posix=True)
            except ValueError as exc:
                raise ConfigError(f"{origin}:{lineno}: unbalanced quotes ({exc})") from None
            try:
                self.apply(words[0], words[1:])
            except ConfigError as exc:
                raise ConfigError(f"{origin}:{lineno}: '{line}': {exc}") from None

    def load_file(self, path: str) -> None:
        if path == "-":
            import sys

            self.load_text(sys.stdin.read(), "stdin")
            return
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"Fatal error, can't open config file '{path}': {exc}") from None
        self.load_text(text, path)

    def load_argv(self, argv: list[str]) -> None:
        """`[config-file] [--directive value ...]`, as disque-server takes them."""
        args = list(argv)
        if args and not args[0].startswith("--"):
            path = args.pop(0)
            if path != "-":
                self.config_file = os.path.abspath(path)
            self.load_file(path)
        name: str | None = None
        values: list[str] = []
        for arg in args + ["--"]:
            if arg.startswith("--"):
                if name is not None:
                    try:
                        self.apply(name, values)
                    except ConfigError as exc:
                        if f"'{name}'" in str(exc):
                            raise
                        raise ConfigError(f"--{name} {' '.join(values)}: {exc}") from None
                elif values:
                    raise ConfigError(f"unexpected argument '{values[0]}'")
                name, values = (arg[2:] or None), []
            else:
                if name is None:
                    raise ConfigError(f"unexpected argument '{arg}'")
                values.append(arg)

    # -- CONFIG GET / SET / REWRITE -----------------------------------------------
    def get_matching(self, pattern: str) -> list[tuple[str, str]]:
        pattern = pattern.lower()
        return [
            (name, directive.show(self.values[name]))
            for name, directive in DIRECTIVES.items()
            if fnmatch.fnmatchcase(name, pattern)
        ]

    def set_runtime(self, name: str, value: str) -> None:
        name = name.lower()
        directive = DIRECTIVES.get(name)
        if directive is None or not directive.settable:
            raise ConfigError(f"Unsupported CONFIG parameter: {name}")
        args = value.split() if directive.nargs == -1 else [value]
        if directive.nargs == -1 and not args:
            args = [""]
        try:
            self.apply(name, args, at_runtime=True)
        except ConfigApplyError:
            raise
        except ConfigError:
            raise ConfigError(
                f"Invalid argument '{value}' for CONFIG SET '{name}'"
            ) from None

    def rewrite(self) -> None:
        """Rewrite the config file in place, as Redis does: comments and order stay,
        each directive already in the file is rewritten with its current value, and
        directives that differ from their default are appended."""
        if not self.config_file:
            raise ConfigError("The server is running without a config file")
        try:
            with open(self.config_file, encoding="utf-8") as fh:
                old_lines = fh.read().splitlines()
        except FileNotFoundError:
            old_lines = []
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc}") from None
        wanted = {
            name: self._lines_for(name)
            for name in DIRECTIVES
            if self.values[name] != DIRECTIVES[name].default
        }
        out: list[str] = []
        written: set[str] = set()
        for raw in old_lines:
            words = raw.split()
            name = words[0].lower() if words and not raw.lstrip().startswith("#") else ""
            if name in DIRECTIVES:
                if name not in written:
                    out.extend(wanted.get(name) or self._lines_for(name))
                    written.add(name)
                continue  # a repeated directive: its value is already written
            out.append(raw)
        extra = [name for name in wanted if name not in written]
        if extra:
            if "# Generated by CONFIG REWRITE" not in out:  # once, as Redis writes it
                out.append("# Generated by CONFIG REWRITE")
            for name in extra:
                out.extend(wanted[name])
        tmp = self.config_file + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write("\n".join(out) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.config_file)
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc}") from None

    def _lines_for(self, name: str) -> list[str]:
        return config_lines(name, self.values[name])

def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value

