"""Users and permissions, in Redis 6's ACL model: each user has a state
(on/off), passwords (kept as SHA-256 hashes, as Redis keeps them), queue patterns (the
keys of Redis: `~pattern`, glob-style) and command rules (`+cmd`, `-cmd`, `+@category`,
`-@category`). The rules of `ACL SETUSER` and of the aclfile are parsed once
(acl_rules.py) into a compact form: the set of the command names the user may run and its patterns, so
that the check a request pays is one flag (`restricted`), and for a restricted user
one set lookup and, for a command naming a queue, one cached pattern match.

No import of disq.server: the command table gives this module each command's
categories (`AclTable(categories)`), and the server wires the rest (connection.py's
dispatch, commands/acl.py, the HTTP layer). Users are replicated by
disq/replication/users.py: each user carries a version (ms, node id), the newest wins.
"""

from __future__ import annotations

import hmac
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from .acl_rules import CATEGORIES, AclError, RuleSet, glob_regex, hash_password, split_rules

# What the server and the HTTP API import from here (the rules' language is acl_rules.py).
__all__ = ["CATEGORIES", "AclError", "AclTable", "User", "Version", "check_user_name",
           "split_rules"]

DEFAULT_USER: Final = "default"
MAX_CACHED_QUEUES: Final = 4096  # queue names whose verdict a user remembers
MAX_NAME_LEN: Final = 1024

Version = tuple[int, str]  # (ms, node ID) of the change; (0, "") = this node's own


class User:
    """One user. `restricted` is False only for a user who may run every command on
    every queue: the connection checks nothing more for it."""

    __slots__ = ("name", "enabled", "nopass", "passwords", "patterns", "all_queues",
                 "command_rules", "allowed", "all_commands", "restricted", "version",
                 "deleted", "_regexes", "_verdicts", "calls", "jobs_added",
                 "jobs_consumed", "jobs_acked", "bytes_in", "bytes_out")

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.passwords: list[str] = []  # SHA-256 hex digests, in the order given
        self.patterns: list[bytes] = []
        self.all_queues = False
        self.command_rules: list[str] = ["-@all"]  # as given, from the last reset
        self.allowed: frozenset[str] = frozenset()
        self.all_commands = False
        self.restricted = True
        self.version: Version = (0, "")
        self.deleted = False  # a tombstone, kept so that the deletion spreads
        self._regexes: list[re.Pattern[bytes]] = []
        self._verdicts: dict[bytes, bool] = {}
        # usage accounting (INFO users, the metrics' user label)
        self.calls = 0
        self.jobs_added = 0
        self.jobs_consumed = 0
        self.jobs_acked = 0
        # what its connections read and wrote (RESP, and HTTP's bodies)
        self.bytes_in = 0
        self.bytes_out = 0

    def usage(self) -> tuple[str, int, int, int, int, int, int]:
        """Its usage on this node: name, commands, jobs added, consumed, acked, bytes
        in, bytes out (INFO users, the metrics, every node's stats)."""
        return (self.name, self.calls, self.jobs_added, self.jobs_consumed,
                self.jobs_acked, self.bytes_in, self.bytes_out)

    # -- checks ------------------------------------------------------------------------
    def check_password(self, password: bytes) -> bool:
        if not self.enabled or self.deleted:
            return False
        if self.nopass:
            return True
        given = hash_password(password)
        return any(hmac.compare_digest(given, known) for known in self.passwords)

    def may_run(self, command: str) -> bool:
        return command in self.allowed

    def may_use(self, queue: bytes) -> bool:
        """May this user name `queue`? (a job's queue decides for a job)"""
        if self.all_queues:
            return True
        verdict = self._verdicts.get(queue)
        if verdict is None:
            verdict = any(regex.match(queue) for regex in self._regexes)
            if len(self._verdicts) >= MAX_CACHED_QUEUES:
                self._verdicts.clear()
            self._verdicts[queue] = verdict
        return verdict

    # -- description -------------------------------------------------------------------
    def rules(self) -> str:
        """The rules that rebuild this user, as ACL LIST and the aclfile show them."""
        words = ["on" if self.enabled else "off"]
        if self.nopass:
            words.append("nopass")
        words += ["#" + h for h in self.passwords]
        if self.all_queues:
            words.append("~*")
        else:
            words += [_quote("~" + p.decode("latin-1")) for p in self.patterns]
        words += self.command_rules
        return " ".join(words)

    def to_wire(self) -> list[object]:
        """[name, version ms, version node, deleted, rules]: what the bus carries."""
        return [self.name, self.version[0], self.version[1], self.deleted,
                "" if self.deleted else self.rules()]

    def copy(self) -> User:
        other = User(self.name)
        for slot in ("enabled", "nopass", "all_queues", "all_commands", "restricted",
                     "version", "deleted", "allowed"):
            setattr(other, slot, getattr(self, slot))
        other.passwords = list(self.passwords)
        other.patterns = list(self.patterns)
        other.command_rules = list(self.command_rules)
        return other

    def take(self, other: User) -> None:
        """Become `other` (its rules and version), keeping this object (the connected
        clients hold it) and its counters."""
        self.enabled, self.nopass = other.enabled, other.nopass
        self.passwords, self.patterns = other.passwords, other.patterns
        self.all_queues, self.command_rules = other.all_queues, other.command_rules
        self.version, self.deleted = other.version, other.deleted
        self._regexes = [glob_regex(p) for p in self.patterns]
        self._verdicts = {}
        self.allowed = other.allowed
        self.all_commands = other.all_commands
        self._update()

    def _update(self) -> None:
        self.restricted = self.deleted or not (self.all_commands and self.all_queues)


def _quote(word: str) -> str:
    return word if word and not any(c.isspace() or c in "\"'\\" for c in word) else (
        shlex.quote(word))


def check_user_name(name: str) -> None:
    if not name or len(name) > MAX_NAME_LEN or any(c.isspace() or c == "\0" for c in name):
        raise AclError("Usernames can't be empty or contain spaces or null characters")


class AclTable:
    """Every user of the node (tombstones of deleted ones included), the counters of
    refusals, and the aclfile."""

    def __init__(self, categories: Mapping[str, Iterable[str]], requirepass: str = "",
                 aclfile: str = "") -> None:
        self.ruleset = RuleSet(categories)
        self.users: dict[str, User] = {}
        self.aclfile = aclfile
        self.default = self._new_default(requirepass)
        self.users[DEFAULT_USER] = self.default
        self.auth_required = False
        self._update_auth()
        self.denied_auth = 0  # failed AUTH / HELLO AUTH / HTTP credentials
        self.denied_cmd = 0  # commands refused (NOPERM)
        self.denied_key = 0  # queues or jobs refused (NOPERM)
        self.denied_auth_throttled = 0  # AUTHs refused unchecked (too many failures)
        # The server's hooks: a user changed or deleted here (to replicate and to
        # drop its clients).
        self.on_change: Callable[[User], None] = lambda user: None
        self.on_delete: Callable[[User], None] = lambda user: None

    def _new_default(self, requirepass: str) -> User:
        rules = ["on", "~*", "+@all"] + ([">" + requirepass] if requirepass else ["nopass"])
        return self.ruleset.build(User(DEFAULT_USER), rules)

    def _update_auth(self) -> None:
        """As Redis's authRequired: new connections must AUTH unless the default user
        is on and has nopass."""
        default = self.default
        self.auth_required = not (default.enabled and default.nopass and not default.deleted)

    # -- look-ups ----------------------------------------------------------------------
    def get(self, name: str) -> User | None:
        user = self.users.get(name)
        return None if user is None or user.deleted else user

    def live(self) -> list[User]:
        return sorted((u for u in self.users.values() if not u.deleted), key=lambda u: u.name)

    def authenticate(self, name: str, password: bytes) -> User | None:
        user = self.get(name)
        if user is None or not user.check_password(password):
            return None
        return user

    # -- changes -----------------------------------------------------------------------
    def set_user(self, name: str, rules: Iterable[str], version: Version) -> User:
        """ACL SETUSER: all the rules apply, or none (AclError)."""
        check_user_name(name)
        current = self.get(name)
        built = self.ruleset.build(current if current is not None else User(name), rules)
        built.version = version
        return self._install(built)

    def _install(self, built: User) -> User:
        user = self.users.get(built.name)
        if user is None:
            user = self.users[built.name] = User(built.name)
        user.take(built)
        if user is self.default:
            self._update_auth()
        return user

    def delete(self, name: str, version: Version) -> bool:
        if name == DEFAULT_USER:
            raise AclError("The 'default' user cannot be removed")
        user = self.get(name)
        if user is None:
            return False
        self._tombstone(user, version)
        return True

    def _tombstone(self, user: User, version: Version) -> None:
        gone = User(user.name)
        gone.deleted = True
        gone.version = version
        user.take(gone)
        self.on_delete(user)

    def set_requirepass(self, password: str) -> None:
        """requirepass (start-up or CONFIG SET): the default user's password, on this
        node only (its version is unchanged, so it is not replicated)."""
        rules = ["resetpass", ">" + password] if password else ["nopass"]
        built = self.ruleset.build(self.default, rules)
        built.version = self.default.version
        self._install(built)

    # -- replication -------------------------------------------------------------------
    def merge(self, data: object) -> User | None:
        """A user from a peer ([name, ms, node, deleted, rules]): taken if newer than
        ours; the user changed, or None. Anything malformed is ignored."""
        if not (type(data) is list and len(data) == 5):
            return None
        name, ms, node, deleted, rules = data
        if not (type(name) is str and type(ms) is int and type(node) is str
                and type(deleted) is bool and type(rules) is str) or ms <= 0:
            return None
        try:
            check_user_name(name)
        except AclError:
            return None
        version = (ms, node)
        current = self.users.get(name)
        if current is not None and current.version >= version:
            return None
        if deleted:
            if name == DEFAULT_USER:
                return None
            if current is None:
                current = self.users[name] = User(name)
            self._tombstone(current, version)
            return current
        try:
            built = self.ruleset.build(User(name), ["reset", *split_rules(rules)])
        except AclError:
            return None
        built.version = version
        return self._install(built)

    def replicated(self) -> list[User]:
        """The users whose state spreads: every one changed by a command (version > 0)."""
        return [u for u in self.users.values() if u.version[0] > 0]

    # -- the aclfile -------------------------------------------------------------------
    def parse_file(self, text: str, origin: str) -> dict[str, User]:
        """The users of an aclfile (`user <name> <rules...>` lines); AclError naming
        the line of the first error."""
        users: dict[str, User] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                words = split_rules(line)
                if words[0] != "user" or len(words) < 2:
                    raise AclError("line should start with user keyword")
                check_user_name(words[1])
                if words[1] in users:
                    raise AclError(f"Duplicate user '{words[1]}' found")
                users[words[1]] = self.ruleset.build(User(words[1]), words[2:])
            except (AclError, ValueError) as exc:
                raise AclError(f"{origin}:{number}: {exc}") from None
        return users

    def load_file(self, version: Version, at_start: bool = False) -> int:
        """ACL LOAD (and the start): the aclfile's users replace every user; all or
        nothing. Users missing from the file are deleted (tombstones, so that the
        deletion spreads); the default user keeps its state if the file does not
        name it. How many users the file has."""
        path = self.aclfile
        try:
            with open(path, encoding="latin-1") as fh:
                text = fh.read()
        except OSError as exc:
            raise AclError(f"Error loading ACLs, opening file '{path}': "
                           f"{exc.strerror or exc}") from None
        users = self.parse_file(text, path)
        for user in users.values():
            user.version = version
            self._install(user)
            if not at_start:
                self.on_change(self.users[user.name])
        for name, user in list(self.users.items()):
            if name not in users and name != DEFAULT_USER and not user.deleted:
                self._tombstone(user, version)
                self.on_change(user)
        return len(users)

    def save_file(self) -> None:
        """ACL SAVE: every live user, written to a temporary file then renamed."""
        path = self.aclfile
        text = "".join(f"user {u.name} {u.rules()}\n" for u in self.live())
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="latin-1") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise AclError(f"There was an error trying to save the ACLs: "
                           f"{exc.strerror or exc}") from None


