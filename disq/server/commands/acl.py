"""Users and permissions: AUTH and ACL (SETUSER DELUSER LIST USERS WHOAMI
CAT GETUSER SAVE LOAD), Redis 6's commands and error texts. The users are
`server.acl` (disq/acl.py); SETUSER, DELUSER and LIST are the admin service's
(admin_service.py), which spreads a change to every node (disq/replication/users.py).

Names, rules and passwords are bytes on the wire and latin-1 text in disq/acl.py (a
one-to-one mapping: any byte string round-trips)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ... import errors
from ...acl import CATEGORIES, DEFAULT_USER, AclError
from ...errors import err, fixed
from .. import reply
from ..admin_service import next_version
from ..later import reply_held
from ..table import ADMIN, command

if TYPE_CHECKING:
    from ...acl import AclTable, User
    from ..connection import Client
    from ..pending import Pending

WRONGPASS = fixed("WRONGPASS", "WRONGPASS",
                  "invalid username-password pair or user is disabled.")
THROTTLED = "too many failed authentications from this address: wait a second"


def _text(arg: bytes) -> str:
    return arg.decode("latin-1")


def authenticate(client: Client, name: str, password: bytes) -> User | None:
    """AUTH and HELLO AUTH: the client becomes `name` if the password is right (None
    if not: counted, the client is no longer authenticated, as in Disque). Failures
    are counted per source address, whatever the connection (auth_throttle.py): after
    too many, the address's AUTHs are refused for a while (-ERR THROTTLED), unchecked."""
    server = client.server
    acl = server.acl
    throttle = server.auth_throttle
    now = time.monotonic()
    if throttle.paused(client.ip, now):
        acl.denied_auth_throttled += 1
        raise err(THROTTLED)
    user = acl.authenticate(name, password)
    if user is None:
        acl.denied_auth += 1
        throttle.failed(client.ip, now)
        client.authenticated = False
        client.user = acl.default
        return None
    client.user = user
    client.authenticated = True
    return user


@command("auth", -2, "rlFa", shown=(2, "rlF"),
         acl=("connection",),
         syntax='AUTH password | AUTH username password',
         summary=("Authenticate the connection: the default user's password (requirepass), or an "
                  "ACL user's."),
         reply='status OK')
def auth(client: Client, args: list[bytes]) -> bytes:
    """AUTH password (the default user, which requirepass sets) | AUTH user password.
    The one-argument form answers Disque's errors; the two-argument one Redis 6's."""
    if len(args) > 3:
        raise errors.SYNTAX
    if len(args) == 2:
        if not client.server.acl.auth_required:
            raise err("Client sent AUTH, but no password is set")
        if authenticate(client, DEFAULT_USER, args[1]) is None:
            raise err("invalid password")
        return reply.OK
    if authenticate(client, _text(args[1]), args[2]) is None:
        raise WRONGPASS
    return reply.OK


@command("acl", -2, "s",
         acl=ADMIN,
         syntax=('ACL SETUSER name rule... | DELUSER name... | LIST | USERS | WHOAMI | CAT '
                 '[category] | GETUSER name | SAVE | LOAD'),
         summary=('Manage the ACL users: kept by every node, answered once every reachable node '
                  'has the change.'),
         reply='depends on the subcommand',
         extension=True)
def acl_(client: Client, args: list[bytes]) -> bytes | Pending:
    """ACL SETUSER name rule... | DELUSER name... | LIST | USERS | WHOAMI | CAT [cat]
    | GETUSER name | SAVE | LOAD"""
    sub = args[1].lower()
    argc = len(args)
    acl = client.server.acl
    admin = client.server.admin_service
    try:
        if sub == b"setuser" and argc >= 3:
            held = admin.set_user(_text(args[2]), [_text(a) for a in args[3:]])
            return reply_held(client, held, reply.OK)
        if sub == b"deluser" and argc >= 3:
            deleted, held = admin.delete_users([_text(a) for a in args[2:]])
            return reply_held(client, held, reply.integer(deleted))
        if sub == b"list" and argc == 2:
            return reply.encode([user_line(u).encode("latin-1") for u in admin.users()])
        if sub == b"users" and argc == 2:
            return reply.encode([u.name.encode("latin-1") for u in admin.users()])
        if sub == b"whoami" and argc == 2:
            return reply.bulk(client.user.name.encode("latin-1"))
        if sub == b"cat" and argc == 2:
            return reply.encode([b"all", *(c.encode() for c in CATEGORIES)])
        if sub == b"cat" and argc == 3:
            category = _text(args[2]).lower()
            if category != "all" and category not in CATEGORIES:
                raise err(f"Unknown category '{category[:128]}'")
            names = acl.ruleset.all if category == "all" else acl.ruleset.by_category[category]
            return reply.encode([n.encode() for n in sorted(names)])
        if sub == b"getuser" and argc == 3:
            return _getuser(acl.get(_text(args[2])), client.resp3)
        if sub == b"save" and argc == 2:
            _need_file(acl)
            acl.save_file()
            return reply.OK
        if sub == b"load" and argc == 2:
            _need_file(acl)
            acl.load_file(next_version(acl, "", client.node.id))
            return reply.OK
    except AclError as exc:
        raise err(str(exc)) from None
    raise err(f"Unknown subcommand or wrong number of arguments for "
              f"'{_text(args[1])[:128]}'. Try ACL SETUSER, DELUSER, LIST, USERS, WHOAMI, "
              f"CAT, GETUSER, SAVE or LOAD.")


def user_line(user: User) -> str:
    """ACL LIST's line of a user: `user <name> <the rules that rebuild it>`."""
    return f"user {user.name} {user.rules()}"


def _need_file(acl: AclTable) -> None:
    if not acl.aclfile:
        raise AclError("This Disque instance is not configured to use an ACL file (aclfile). "
                       "Set users with ACL SETUSER, or set aclfile in the configuration file.")


def _getuser(user: User | None, resp3: bool) -> bytes:
    """Redis 6's form: flags, passwords, commands, keys (here: queues)."""
    if user is None:
        return reply.NULL_BULK
    flags = [b"on" if user.enabled else b"off"]
    if user.all_queues:
        flags.append(b"allkeys")
    if user.all_commands:
        flags.append(b"allcommands")
    if user.nopass:
        flags.append(b"nopass")
    fields = [b"flags", flags, b"passwords", [h.encode() for h in user.passwords],
              b"commands", " ".join(user.command_rules).encode(),
              b"keys", [b"*"] if user.all_queues else list(user.patterns)]
    encoded = reply.encode(fields)
    if resp3:
        return b"%4\r\n" + encoded[encoded.index(b"\n") + 1:]
    return encoded
