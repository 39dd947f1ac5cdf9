"""disq-check-aof [--fix] [--key-file <file>] <file.aof>: check an AOF, and cut it
after its last good record, like redis-check-aof / disque-check-aof (same arguments,
same messages). It checks more than they do: every LOADJOB must hold a job that
decodes, a cut-off tail is told apart from damage in the middle (whose offset it
prints), and a framed file's checksums (frames.py) are checked, its records decrypted
with --key-file."""

from __future__ import annotations

import mmap
import os
import sys

from .fileformat import FormatError, check_record
from .frames import AES, FramedReader, KeyFileError, WrongKey, load_key, reader_for


def analyze(path: str, key: bytes | None = None) -> tuple[int, int, str | None, int]:
    """(size, offset after the last good record, what is wrong there or None,
    number of good records). Raises WrongKey for an encrypted file and another key
    than its own. A framed file's format is printed first; an encrypted
    one without its key has its frames checked (their CRCs), not its records."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return 0, 0, None, 0
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                reader = reader_for(data, key, frames_only=key is None)
            except FormatError as exc:
                return size, exc.offset, f"0x{exc.offset:016x}: {exc.reason}", 0
            if isinstance(reader, FramedReader):
                print(f"AOF format: {reader.header.describe()}")
            records = 0
            try:
                for offset, args in reader:
                    check_record(args, offset)
                    records += 1
            except FormatError as exc:
                return size, reader.pos, f"0x{exc.offset:016x}: {exc.reason}", records
            if isinstance(reader, FramedReader) and reader.header.mode == AES and key is None:
                print(f"{reader.frames} frames checked; the records are encrypted: give "
                      "--key-file to check them too")
                records = -1
            if reader.cut_off is not None:
                return (size, reader.pos, f"0x{reader.pos:016x}: the file ends inside a "
                        f"record ({reader.cut_off})", records)
            return size, reader.pos, None, records


USAGE = """Usage: disq-check-aof [--fix] [--key-file <file>] <file.aof>

Checks an append-only file (appendfilename, disque.aof by default, in the node's dir)
record by record. --fix offers to cut the file after its last good record. An
encrypted file needs --key-file (the node's aof-encryption-key-file) to check its
records; without it, the checksums of its frames are checked.
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    fix = False
    key_file = None
    while len(args) > 1 and args[0] in ("--fix", "--key-file"):
        if args.pop(0) == "--fix":
            fix = True
        else:
            key_file = args.pop(0)
    if not args:
        print(USAGE.splitlines()[0])
        return 1
    if len(args) > 1:
        print(f"Invalid argument: {args[0]}" if len(args) == 2 else "Invalid arguments")
        return 1
    if args[0].startswith("-") and not os.path.exists(args[0]):
        print(f"Invalid argument: {args[0]}")  # an option, not a file to open
        print(USAGE.splitlines()[0])
        return 1
    path = args[0]
    key = None
    if key_file is not None:
        try:
            key = load_key(key_file)
        except KeyFileError as exc:
            print(exc.strerror)
            return 1
    try:
        size, ok_up_to, problem, records = analyze(path, key)
    except OSError as exc:
        print(f"Cannot open file: {path} ({exc.strerror})")
        return 1
    except WrongKey as exc:
        print(f"Cannot check the records: {exc}")
        return 1
    if size == 0:
        print(f"Empty file: {path}")
        return 1
    if problem is not None:
        print(problem)
    diff = size - ok_up_to
    print(f"AOF analyzed: size={size}, ok_up_to={ok_up_to}, diff={diff}")
    if diff == 0:
        print(f"AOF is valid ({records} records)" if records >= 0
              else "AOF is valid (its frames: the records were not checked)")
        return 0
    if not fix:
        print("AOF is not valid. Use the --fix option to try fixing it.")
        return 1
    print(f"This will shrink the AOF from {size} bytes, with {diff} bytes, to {ok_up_to} "
          "bytes")
    print("Continue? [y/N]: ", end="", flush=True)
    answer = sys.stdin.readline()
    if not answer.lower().startswith("y"):
        print("Aborting...")
        return 1
    try:
        os.truncate(path, ok_up_to)
    except OSError as exc:
        print(f"Failed to truncate AOF: {exc.strerror}")
        return 1
    print("Successfully truncated AOF")
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
