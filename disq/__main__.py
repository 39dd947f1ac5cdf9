"""`disq-server [config-file] [--directive value ...]`, also `python -m disq`."""

from __future__ import annotations

import sys

from . import tls
from .aof import frames
from .config import (
    DIRECTIVES,
    DISQ_VERSION,
    SPECIAL_DOCS,
    VERSION,
    Config,
    ConfigError,
    default_lines,
)
from .exposure import check_metrics

USAGE = """Usage: disq-server [/path/to/disque.conf] [options]
       disq-server - (read config from stdin)
       disq-server -v or --version
       disq-server -h or --help

Every config file directive can be given as an option: --directive value
(the options win over the file). disq.conf, at the top of the source tree, is
a sample config file with every directive.

Examples:
       disq-server (run the server with default config, port 7711)
       disq-server /etc/disque/disque.conf
       disq-server --port 7777
       disq-server --port 7777 --dir /var/lib/disq --appendonly yes
       disq-server /etc/mydisque.conf --loglevel verbose
"""


def directives_help() -> str:
    """Every directive of the table, as set to its default, with its one line."""
    lines = ["", "Directives (shown with their default value):", ""]
    for name, directive in DIRECTIVES.items():
        lines += [f"  {line}" for line in default_lines(name)]
        lines.append(f"        {directive.doc}")
    for usage, doc in SPECIAL_DOCS:
        lines += [f"  {usage}", f"        {doc}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-v", "--version"):
        print(f"disq {DISQ_VERSION} (Disque server v={VERSION} compatible)")
        return
    if args and args[0] in ("-h", "--help"):
        print(USAGE + directives_help(), end="")
        return
    if args and args[0] == "--test-memory":
        print("disq: --test-memory is not supported (Python manages its own memory).")
        sys.exit(1)
    from .server.commands import load_commands

    config = Config()
    config.command_names = set(load_commands())  # what rename-command may rename
    try:
        config.load_argv(args)
        tls.prepare(config)
        refusal = check_metrics(config)
        if refusal:
            raise ConfigError(refusal)
        frames.prepare(config)
    except ConfigError as exc:
        sys.stderr.write(
            f"\n*** FATAL CONFIG FILE ERROR ***\n{exc}\n"
            "Run 'disq-server --help' for the list of options.\n")
        sys.exit(1)
    from .server.app import run

    run(config, args)


if __name__ == "__main__":
    main()
