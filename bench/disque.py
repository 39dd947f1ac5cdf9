"""antirez's Disque as a reference: find `disque-server`, or build it once from its
public source, outside this repository (never vendored).

Where the binary comes from, first match wins:

1. `--disque-bin PATH` or `DISQUE_BIN`: that executable, as it is.
2. `--disque-src DIR` or `DISQUE_SRC` (default `~/.cache/disq-bench/disque`): the
   source tree of antirez/disque there. When DIR does not exist it is cloned with git
   from the public repository (REPOSITORY below) and checked out at COMMIT (1.0-rc1,
   the version disq is compatible with). `DIR/src/disque-server` is built with `make`
   the first time and used as it is afterwards (delete it to build again).

A machine that cannot fetch: clone antirez/disque elsewhere and copy it to DIR (or
point DISQUE_SRC at it); the error says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPOSITORY = "https://github.com/antirez/disque.git"
COMMIT = "0192ba7e1cda157024229962b7bee1c6e86d771b"  # master = 1.0-rc1 (2016-04-29)
COMMIT_SHORT = COMMIT[:7]
DEFAULT_SRC = Path.home() / ".cache" / "disq-bench" / "disque"
# Disque (2016) on a newer gcc: gcc 10 made -fno-common the default and gcc 14 made
# implicit declarations, int conversions and incompatible pointers errors. These go
# through DISQUE_CFLAGS, which its Makefile adds for Disque's own files only (the
# dependencies, jemalloc and hiredis, get CFLAGS); its source is never edited.
COMPAT_CFLAGS = ("-fcommon -Wno-error=implicit-function-declaration "
                 "-Wno-error=int-conversion -Wno-error=incompatible-pointer-types")


class DisqueUnavailable(Exception):
    """No disque-server could be found or built; the message says what to do."""


def source_dir(src: str | Path | None = None) -> Path:
    chosen = src or os.environ.get("DISQUE_SRC") or DEFAULT_SRC
    return Path(chosen).expanduser().resolve()


def binary(bin_path: str | Path | None = None, src: str | Path | None = None,
           log: Path | None = None) -> Path:
    """The disque-server to run: the one named, else the one built in the source
    directory (cloning and building it first when needed)."""
    named = bin_path or os.environ.get("DISQUE_BIN")
    if named:
        path = Path(named).expanduser().resolve()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DisqueUnavailable(f"DISQUE_BIN / --disque-bin {path} is not an executable")
        return path
    tree = source_dir(src)
    built = tree / "src" / "disque-server"
    if built.is_file() and os.access(built, os.X_OK):
        return built
    if not (tree / "src" / "Makefile").is_file():
        clone(tree)
    build(tree, log or tree.parent / f"{tree.name}-build.log")
    return built


def found() -> Path | None:
    """The disque-server DISQUE_BIN names or the default source tree holds, if it is
    there already: never cloned nor built (for tests that run Disque only when at hand)."""
    named = os.environ.get("DISQUE_BIN")
    path = Path(named) if named else source_dir() / "src" / "disque-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # fail, never ask for a login
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def clone(tree: Path) -> None:
    where = (f"Put a copy of antirez/disque ({REPOSITORY}, commit {COMMIT_SHORT}) at "
             f"{tree} (or set DISQUE_SRC / --disque-src to one, or DISQUE_BIN / "
             "--disque-bin to a built disque-server) and run again.")
    if tree.exists() and any(tree.iterdir()):
        raise DisqueUnavailable(f"{tree} exists but holds no Disque source tree "
                                f"(no src/Makefile). {where}")
    if shutil.which("git") is None:
        raise DisqueUnavailable(f"git is not installed, so Disque cannot be cloned. {where}")
    tree.parent.mkdir(parents=True, exist_ok=True)
    done = _git("clone", "--quiet", REPOSITORY, str(tree))
    if done.returncode != 0:
        shutil.rmtree(tree, ignore_errors=True)
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise DisqueUnavailable(f"git clone {REPOSITORY} failed ({said}). {where}")
    checkout = _git("checkout", "--quiet", COMMIT, cwd=tree)
    if checkout.returncode != 0:
        raise DisqueUnavailable(f"commit {COMMIT_SHORT} is not in the clone at {tree}: "
                                + checkout.stderr.strip())


def build(tree: Path, log: Path) -> None:
    """`make` in the source tree (both cores), its output in `log`."""
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            raise DisqueUnavailable(f"{tool} is not installed: Disque cannot be built "
                                    "(Debian: apt-get install build-essential)")
    jobs = str(os.cpu_count() or 1)
    with open(log, "w") as out:
        done = subprocess.run(["make", "-C", str(tree), "-j", jobs,
                               f"DISQUE_CFLAGS={COMPAT_CFLAGS}"],
                              stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise DisqueUnavailable(f"building Disque in {tree} failed (make exited "
                                f"{done.returncode}; log: {log}):\n" + "\n".join(tail))


def version(path: Path) -> str:
    """`disque-server --version`'s first line (`Disque server v=1.0-rc1 sha=...`)."""
    done = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                          timeout=30)
    return (done.stdout.strip().splitlines() or ["?"])[0]


def main() -> None:
    """`python -m bench.disque`: find or build disque-server and print its path."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Find or build antirez's disque-server.")
    parser.add_argument("--disque-bin", help="a built disque-server (or DISQUE_BIN)")
    parser.add_argument("--disque-src", help="its source tree (or DISQUE_SRC; default "
                                             f"{DEFAULT_SRC})")
    args = parser.parse_args()
    try:
        path = binary(args.disque_bin, args.disque_src)
    except DisqueUnavailable as exc:
        sys.exit(str(exc))
    print(path)
    print(version(path))


if __name__ == "__main__":
    main()
