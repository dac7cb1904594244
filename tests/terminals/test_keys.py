"""Key files: created private on first use; unsafe ones refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.exceptions import KeyFileError
from sandbridge.terminals import keys


@pytest.fixture(autouse=True)
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    return tmp_path / "cfg" / "sandbridge"


def test_owner_key_is_created_once_0600_in_a_0700_dir(config: Path) -> None:
    first = keys.owner_key()
    assert os.stat(config).st_mode & 0o777 == 0o700
    assert os.stat(config / "owner.key").st_mode & 0o777 == 0o600
    assert keys.public_hex(keys.owner_key()) == keys.public_hex(first)


def test_a_key_file_readable_by_others_is_refused(config: Path) -> None:
    keys.owner_key()
    os.chmod(config / "owner.key", 0o644)
    with pytest.raises(KeyFileError, match="mode 644"):
        keys.owner_key()


def test_a_key_file_readable_by_others_is_advised_chmod_600(config: Path) -> None:
    keys.owner_key()
    os.chmod(config / "owner.key", 0o644)
    with pytest.raises(KeyFileError) as refused:
        keys.owner_key()
    assert str(refused.value).endswith("has mode 644; run chmod 600 on it")


def test_a_file_of_a_system_directory_is_never_advised_a_chmod() -> None:
    # (--key /etc/passwd, as root: its owner)
    with pytest.raises(KeyFileError) as refused:
        keys.load_key(Path("/etc/passwd"))
    assert "chmod 600" not in str(refused.value)
    if os.stat("/etc/passwd").st_uid == os.getuid():
        assert str(refused.value) == (
            "key file /etc/passwd has mode 644 and lies in a system directory, never chmod "
            "it: give the path of a sandbridge key file of your own"
        )


def test_a_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.key"
    keys.create_key(real)
    (tmp_path / "link.key").symlink_to(real)
    with pytest.raises(KeyFileError):
        keys.load_key(tmp_path / "link.key")


def test_a_foreign_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    keys.create_key(path)
    os.chown(path, 65534, 65534)
    with pytest.raises(KeyFileError, match="owned by uid 65534"):
        keys.load_key(path)


def test_garbage_in_a_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.key"
    path.write_text("not a key\n")
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="does not hold"):
        keys.load_key(path)


def test_requesters_file_adds_keys_and_refuses_bad_lines(config: Path, tmp_path: Path) -> None:
    other = keys.create_key(tmp_path / "other.key")
    config.mkdir(parents=True, mode=0o700)
    (config / "requesters").write_text(f"# team\n{keys.public_hex(other)}  # alice\n")
    assert keys.public_hex(other) in keys.allowed_requesters()
    (config / "requesters").write_text("nothex\n")
    with pytest.raises(KeyFileError, match="line 1"):
        keys.allowed_requesters()


def test_a_requesters_comment_is_its_keys_name(config: Path, tmp_path: Path) -> None:
    alice, bob = (keys.public_hex(keys.create_key(tmp_path / f"{n}.key")) for n in ("a", "b"))
    config.mkdir(parents=True, mode=0o700)
    long_name = "x" * 200
    (config / "requesters").write_text(f"# team\n{alice}  # alice <a@b>\n{bob}\n")
    assert keys.requester_names() == {alice: "alice <a@b>"}
    (config / "requesters").write_text(f"{bob} #{long_name}\n")
    assert keys.requester_names() == {bob: "x" * keys.MAX_NAME_CHARS}


def test_trust_owner_lists_a_key_once_with_its_name_in_a_0600_file(
    config: Path, tmp_path: Path
) -> None:
    laptop = keys.public_hex(keys.create_key(tmp_path / "laptop.key"))
    path = keys.trust_owner(laptop, "laptop")
    keys.trust_owner(laptop, "again")
    assert path == config / "owners"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_text() == f"{laptop}  # laptop\n"
    assert keys.trusted_owners() == {laptop: "laptop"}
    # As the owner here, a trusted owner may also request (with its own key).
    assert laptop in keys.allowed_requesters()


@pytest.mark.parametrize(
    ("key", "name", "refusal"),
    [
        ("ab" * 31, "", "expected 64 lower-case hex digits"),
        ("AB" * 32, "", "expected 64 lower-case hex digits"),
        ("ab" * 32, "a # b", "no '#'"),
        ("ab" * 32, "a\nb", "printable"),
        ("ab" * 32, "x" * 65, "at most 64"),
    ],
)
def test_trust_owner_refuses_a_bad_key_or_name_naming_it(key: str, name: str, refusal: str) -> None:
    with pytest.raises(KeyFileError, match=refusal):
        keys.trust_owner(key, name)
    assert keys.trusted_owners() == {}


def test_an_owners_file_others_may_write_or_a_link_is_refused(config: Path, tmp_path: Path) -> None:
    laptop = keys.public_hex(keys.create_key(tmp_path / "laptop.key"))
    path = keys.trust_owner(laptop)
    path.chmod(0o620)
    with pytest.raises(KeyFileError, match="mode 620"):
        keys.trusted_owners()
    path.unlink()
    elsewhere = tmp_path / "owners"
    elsewhere.write_text(laptop + "\n")
    path.symlink_to(elsewhere)
    with pytest.raises(KeyFileError, match="owners"):
        keys.trusted_owners()


def test_a_bad_line_in_the_owners_file_is_refused_naming_it(config: Path) -> None:
    config.mkdir(parents=True, mode=0o700)
    (config / "owners").write_text("# laptops\nnothex\n")
    (config / "owners").chmod(0o600)
    with pytest.raises(KeyFileError, match="owners line 2"):
        keys.trusted_owners()
