"""disq/acl.py: the ACL rule parser, users, the aclfile and the merge of peers' users."""

from __future__ import annotations

from pathlib import Path

import pytest

from disq.acl import AclError, AclTable, User
from disq.acl_rules import AFTER_ALL, BAD_HASH, NO_SUCH_PASSWORD, SYNTAX, UNKNOWN, hash_password
from disq.server.table import CATEGORIES


@pytest.fixture
def acl() -> AclTable:
    return AclTable(CATEGORIES)


def setuser(acl: AclTable, name: str, *rules: str, ms: int = 1) -> User:
    return acl.set_user(name, list(rules), (ms, "n"))


def test_the_default_user_may_do_everything_without_a_password(acl: AclTable) -> None:
    default = acl.default
    assert default.enabled and default.nopass and not default.restricted
    assert default.all_queues and default.all_commands
    assert not acl.auth_required
    assert default.rules() == "on nopass ~* +@all"
    assert acl.authenticate("default", b"anything") is default


def test_requirepass_sets_the_default_users_password() -> None:
    acl = AclTable(CATEGORIES, requirepass="s3cret")
    assert acl.auth_required
    assert acl.authenticate("default", b"s3cret") is acl.default
    assert acl.authenticate("default", b"wrong") is None
    acl.set_requirepass("")
    assert not acl.auth_required
    acl.set_requirepass("other")
    assert acl.authenticate("default", b"s3cret") is None
    assert acl.authenticate("default", b"other") is acl.default
    assert acl.default.version == (0, "")  # a node's own setting: not replicated


def test_a_new_user_is_off_with_nothing(acl: AclTable) -> None:
    user = setuser(acl, "bob")
    assert not user.enabled and user.restricted
    assert user.allowed == frozenset() and not user.may_use(b"q")
    assert user.rules() == "off -@all"
    assert acl.authenticate("bob", b"") is None


def test_passwords(acl: AclTable) -> None:
    user = setuser(acl, "alice", "on", ">one", ">two")
    assert user.passwords == [hash_password(b"one"), hash_password(b"two")]
    assert acl.authenticate("alice", b"one") is user
    assert acl.authenticate("alice", b"two") is user
    assert acl.authenticate("alice", b"three") is None
    setuser(acl, "alice", "<one")
    assert acl.authenticate("alice", b"one") is None
    setuser(acl, "alice", "#" + hash_password(b"h"))
    assert acl.authenticate("alice", b"h") is user
    setuser(acl, "alice", "!" + hash_password(b"h"))
    assert acl.authenticate("alice", b"h") is None
    setuser(acl, "alice", "nopass")
    assert acl.authenticate("alice", b"whatever") is user and user.passwords == []
    setuser(acl, "alice", "resetpass")
    assert acl.authenticate("alice", b"whatever") is None
    setuser(acl, "alice", ">x", "off")
    assert acl.authenticate("alice", b"x") is None  # disabled


def test_command_rules_and_categories(acl: AclTable) -> None:
    user = setuser(acl, "w", "+@consume", "-ackjob", "+qlen")
    assert "getjob" in user.allowed and "fastack" in user.allowed
    assert "ackjob" not in user.allowed and "qlen" in user.allowed
    assert "addjob" not in user.allowed and "config" not in user.allowed
    assert user.rules() == "off -@all +@consume -ackjob +qlen"
    setuser(acl, "w", "allcommands", "-@dangerous")
    assert "config" not in user.allowed and "addjob" in user.allowed
    assert not user.all_commands
    setuser(acl, "w", "+@all")
    assert user.all_commands and user.command_rules == ["+@all"]
    setuser(acl, "w", "nocommands")
    assert user.allowed == frozenset()
    for category in ("produce", "consume", "read", "admin", "dangerous", "connection"):
        assert acl.ruleset.by_category[category], category
    assert "addjob" in acl.ruleset.by_category["produce"]
    assert "acl" in acl.ruleset.by_category["admin"]
    assert "auth" in acl.ruleset.by_category["connection"]


def test_queue_patterns_glob_like_redis(acl: AclTable) -> None:
    user = setuser(acl, "q", "~jobs:*", "~one?", "~[ab]x", "~[^c]y", "~lit\\*")
    assert user.may_use(b"jobs:") and user.may_use(b"jobs:a:b")
    assert user.may_use(b"one1") and not user.may_use(b"one12")
    assert user.may_use(b"ax") and user.may_use(b"bx") and not user.may_use(b"cx")
    assert user.may_use(b"dy") and not user.may_use(b"cy")
    assert user.may_use(b"lit*") and not user.may_use(b"litx")
    assert not user.may_use(b"other") and not user.all_queues
    assert user.may_use(b"jobs:\n")  # any byte
    setuser(acl, "q", "resetqueues")
    assert not user.may_use(b"jobs:1")
    setuser(acl, "q", "allqueues")
    assert user.all_queues and user.may_use(b"anything")


def test_unrestricted_only_with_every_command_and_queue(acl: AclTable) -> None:
    user = setuser(acl, "u", "on", "+@all", "~q")
    assert user.restricted
    setuser(acl, "u", "~*")
    assert not user.restricted


@pytest.mark.parametrize(("rule", "error"), [
    ("bogus", SYNTAX),
    ("+nosuchcommand", UNKNOWN),
    ("+@nosuchcategory", UNKNOWN),
    ("<notthere", NO_SUCH_PASSWORD),
    ("#abc", BAD_HASH),
    ("#" + "A" * 64, BAD_HASH),
    ("+", SYNTAX),
])
def test_a_bad_rule_changes_nothing(acl: AclTable, rule: str, error: str) -> None:
    user = setuser(acl, "alice", "on", ">pw", "~q", "+getjob")
    before = user.rules()
    with pytest.raises(AclError) as exc:
        setuser(acl, "alice", "off", "nopass", rule, "+@all", ms=2)
    assert str(exc.value) == f"Error in ACL SETUSER modifier '{rule}': {error}"
    assert user.rules() == before and user.version == (1, "n")
    with pytest.raises(AclError):
        setuser(acl, "carol", "on", rule)
    assert acl.get("carol") is None


def test_a_pattern_after_allqueues_is_refused(acl: AclTable) -> None:
    with pytest.raises(AclError, match="Adding a pattern"):
        setuser(acl, "a", "~*", "~q")
    assert AFTER_ALL.startswith("Adding a pattern")


def test_bad_user_names(acl: AclTable) -> None:
    for name in ("", "a b", "a\0b", "x" * 2000):
        with pytest.raises(AclError):
            setuser(acl, name, "on")


def test_delete(acl: AclTable) -> None:
    user = setuser(acl, "gone", "on", "nopass", "+@all", "~*")
    deleted: list[User] = []
    acl.on_delete = deleted.append
    assert acl.delete("gone", (5, "n"))
    assert deleted == [user] and user.deleted and user.restricted
    assert acl.get("gone") is None and acl.authenticate("gone", b"") is None
    assert not acl.delete("gone", (6, "n"))
    with pytest.raises(AclError, match="default"):
        acl.delete("default", (7, "n"))
    assert [u.name for u in acl.live()] == ["default"]


def test_merge_takes_the_newest_version(acl: AclTable) -> None:
    user = setuser(acl, "alice", "on", ">pw", "~a*", "+@read", ms=10)
    other = AclTable(CATEGORIES)
    assert other.merge(user.to_wire()) is not None
    copy = other.get("alice")
    assert copy is not None and copy.rules() == user.rules() and copy.version == (10, "n")
    older = ["alice", 5, "z", False, "on nopass ~* +@all"]
    assert other.merge(older) is None and copy.rules() == user.rules()
    assert other.merge(["alice", 20, "m", True, ""]) is not None
    assert other.get("alice") is None
    assert other.merge(user.to_wire()) is None  # the tombstone is newer
    assert other.merge(["default", 30, "m", True, ""]) is None  # never deleted
    # malformed: ignored
    for bad in (None, [], ["x"], ["a b", 40, "m", False, "on"], ["bob", 40, "m", False, "bogus"],
                ["bob", "40", "m", False, "on"], ["bob", 0, "m", False, "on"]):
        assert other.merge(bad) is None, bad
    assert other.get("bob") is None
    assert [u.name for u in acl.replicated()] == ["alice"]


def test_aclfile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "users.acl"
    acl = AclTable(CATEGORIES, aclfile=str(path))
    setuser(acl, "alice", "on", ">pw", "~jobs:*", "~with space", "+@produce", "-cron")
    setuser(acl, "bob", "off", "nopass", "~*", "+@all")
    acl.save_file()
    text = path.read_text()
    assert "user alice on #" in text and "'~with space'" in text
    fresh = AclTable(CATEGORIES, aclfile=str(path))
    assert fresh.load_file((3, "n"), at_start=True) == 3
    for name in ("default", "alice", "bob"):
        mine, theirs = acl.get(name), fresh.get(name)
        assert mine is not None and theirs is not None
        assert mine.rules() == theirs.rules(), name
    alice = fresh.get("alice")
    assert alice is not None and alice.may_use(b"with space")
    assert fresh.authenticate("alice", b"pw") is alice


def test_acl_load_replaces_every_user_or_none(tmp_path: Path) -> None:
    path = tmp_path / "users.acl"
    acl = AclTable(CATEGORIES, aclfile=str(path))
    setuser(acl, "old", "on", "nopass")
    path.write_text("user new on >pw ~q +getjob\nuser broken on +nosuch\n")
    with pytest.raises(AclError, match=r"users.acl:2: Error in ACL SETUSER modifier "
                                       r"'\+nosuch'"):
        acl.load_file((5, "n"))
    assert acl.get("old") is not None and acl.get("new") is None
    path.write_text("# a comment\n\nuser new on >pw ~q +getjob\n")
    changed: list[str] = []
    acl.on_change = lambda user: changed.append(user.name)
    assert acl.load_file((6, "n")) == 1
    assert acl.get("old") is None and acl.get("new") is not None
    assert sorted(changed) == ["new", "old"]
    for bad in ("nouser x on\n", "user\n", "user a on\nuser a off\n", "user 'a\n"):
        path.write_text(bad)
        with pytest.raises(AclError, match="users.acl:"):
            acl.load_file((7, "n"))
    path.unlink()
    with pytest.raises(AclError, match="opening file"):
        acl.load_file((8, "n"))
