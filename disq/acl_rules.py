"""The rules of ACL SETUSER and of the aclfile, parsed once (`RuleSet`): each rule
changes a copy of a user (acl.py's `User`), and the command rules become the set of the
command names the user may run; Redis's error texts for the rules that cannot apply,
and the categories of ACL CAT.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .acl import User

# The categories of ACL CAT (besides `all`): each command of the table names its own.
CATEGORIES: Final = {
    "produce": "commands that add jobs (ADDJOB, ADDJOBS, CRON ADD)",
    "consume": "commands that take and settle jobs (GETJOB, ACKJOB, NACK, WORKING...)",
    "read": "commands that only read jobs and queues (SHOW, QLEN, QPEEK, JSCAN...)",
    "write": "commands that change jobs or queues",
    "admin": "node and cluster administration (CONFIG, DEBUG, CLUSTER, ACL...)",
    "dangerous": "commands that can break the node or read everything",
    "connection": "connection commands (AUTH, PING, HELLO...)",
}
# Redis's error texts of ACL SETUSER, by cause
SYNTAX: Final = "Syntax error"
UNKNOWN: Final = "Unknown command or category name in ACL"
NO_SUCH_PASSWORD: Final = "The password you are trying to remove from the user does not exist"
BAD_HASH: Final = ("The password hash must be exactly 64 characters and contain only lowercase "
            "hexadecimal characters")
AFTER_ALL: Final = ("Adding a pattern after the * pattern (or the 'allqueues' flag) is not valid "
             "and does not have any effect. Try 'resetqueues' to start with an empty list "
             "of patterns")
_HASH: Final = re.compile(r"[0-9a-f]{64}")


class AclError(Exception):
    """A rule or an aclfile line that cannot be applied: nothing was changed."""


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def glob_regex(pattern: bytes) -> re.Pattern[bytes]:
    """Redis's glob (stringmatchlen) as a regex: * ? [abc] [^a-z] [!a] and \\x."""
    out = bytearray()
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i:i + 1]
        if c == b"*":
            out += b".*"
        elif c == b"?":
            out += b"."
        elif c == b"\\" and i + 1 < n:
            i += 1
            out += re.escape(pattern[i:i + 1])
        elif c == b"[":
            end = pattern.find(b"]", i + 2 if pattern[i + 1:i + 2] in (b"^", b"!") else i + 1)
            if end < 0:
                out += b"\\["
            else:
                body = pattern[i + 1:end]
                negate = body[:1] in (b"^", b"!")
                if negate:
                    body = body[1:]
                escaped = body.replace(b"\\", b"\\\\").replace(b"]", b"\\]")
                out += b"[" + (b"^" if negate else b"") + escaped + b"]"
                i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(bytes(out) + b"\\Z", re.DOTALL)


class RuleSet:
    """How rules apply: the command names and their categories."""

    def __init__(self, categories: Mapping[str, Iterable[str]]) -> None:
        self.categories = {name: frozenset(cats) for name, cats in categories.items()}
        self.all = frozenset(self.categories)
        self.by_category: dict[str, frozenset[str]] = {
            cat: frozenset(n for n, cats in self.categories.items() if cat in cats)
            for cat in CATEGORIES}

    def allowed(self, rules: list[str]) -> tuple[frozenset[str], bool]:
        """The commands `rules` allow, and whether that is +@all."""
        allowed: set[str] = set()
        every = False
        for rule in rules:
            add = rule[0] == "+"
            name = rule[1:]
            if name == "@all":
                allowed = set(self.all) if add else set()
                every = add
                continue
            names = self.by_category[name[1:]] if name[0] == "@" else {name}
            if add:
                allowed |= names
            else:
                allowed -= names
                every = False
        return frozenset(allowed), every or allowed >= self.all

    def apply(self, user: User, rule: str) -> None:
        """Apply one rule to `user` (a copy: the caller keeps it only if every rule of
        the command applies); AclError with Redis's text if it cannot."""
        low = rule.lower()
        if low == "on":
            user.enabled = True
        elif low == "off":
            user.enabled = False
        elif low == "nopass":
            user.nopass, user.passwords = True, []
        elif low == "resetpass":
            user.nopass, user.passwords = False, []
        elif rule[:1] == ">":
            self._add_hash(user, hash_password(rule[1:].encode("latin-1", "replace")))
        elif rule[:1] == "#":
            if not _HASH.fullmatch(rule[1:]):
                raise AclError(BAD_HASH)
            self._add_hash(user, rule[1:])
        elif rule[:1] in ("<", "!"):
            digest = rule[1:] if rule[0] == "!" else hash_password(
                rule[1:].encode("latin-1", "replace"))
            if rule[0] == "!" and not _HASH.fullmatch(digest):
                raise AclError(BAD_HASH)
            if digest not in user.passwords:
                raise AclError(NO_SUCH_PASSWORD)
            user.passwords.remove(digest)
        elif rule[:1] == "~":
            pattern = rule[1:].encode("latin-1", "replace")
            if pattern == b"*":
                user.all_queues, user.patterns = True, []
            elif user.all_queues:
                raise AclError(AFTER_ALL)
            elif pattern not in user.patterns:
                user.patterns.append(pattern)
        elif low in ("allqueues", "allkeys"):
            user.all_queues, user.patterns = True, []
        elif low in ("resetqueues", "resetkeys"):
            user.all_queues, user.patterns = False, []
        elif low in ("allcommands", "nocommands"):
            user.command_rules = ["+@all" if low == "allcommands" else "-@all"]
        elif rule[:1] in ("+", "-") and len(rule) > 1:
            name = low[1:]
            if name[0] == "@":
                if name != "@all" and name[1:] not in CATEGORIES:
                    raise AclError(UNKNOWN)
            elif name not in self.categories:
                raise AclError(UNKNOWN)
            if name == "@all":
                user.command_rules = [rule[0] + name]
            else:
                user.command_rules.append(rule[0] + name)
        elif low == "reset":
            user.nopass, user.passwords = False, []
            user.all_queues, user.patterns = False, []
            user.enabled = False
            user.command_rules = ["-@all"]
        else:
            raise AclError(SYNTAX)

    @staticmethod
    def _add_hash(user: User, digest: str) -> None:
        user.nopass = False
        if digest not in user.passwords:
            user.passwords.append(digest)

    def build(self, base: User, rules: Iterable[str]) -> User:
        """`base` changed by `rules`, as a new User (`base` untouched): AclError
        naming the rule that cannot apply."""
        user = base.copy()
        for rule in rules:
            try:
                self.apply(user, rule)
            except AclError as exc:
                raise AclError(f"Error in ACL SETUSER modifier '{_shown(rule)}': {exc}") from None
        user.allowed, user.all_commands = self.allowed(user.command_rules)
        user.deleted = False
        user._regexes = [glob_regex(p) for p in user.patterns]
        user._update()
        return user


def _shown(rule: str) -> str:
    return rule[:128].replace("\r", " ").replace("\n", " ")


def split_rules(text: str) -> list[str]:
    """Words as Redis's sdssplitargs splits them (quotes allowed)."""
    try:
        return shlex.split(text, posix=True)
    except ValueError:
        raise AclError("unbalanced quotes") from None
