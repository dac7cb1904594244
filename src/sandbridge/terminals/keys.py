"""Ed25519 keys of the owner and of requesters, stored as 0600 files.

A key file holds the 32-byte seed in hex on one line. The owner's key lives at
``${XDG_CONFIG_HOME:-~/.config}/sandbridge/owner.key`` (directory 0700) and is created on
first use. A key file that is a link, belongs to another user or is readable by others is
refused: a key someone else could have read or replaced authorises nothing.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import nacl.exceptions
import nacl.signing

from sandbridge.exceptions import KeyFileError
from sandbridge.private_dir import is_system_dir, make_private_dir
from sandbridge.terminals.config_dir import config_dir

OWNER_KEY = "owner.key"
REQUESTERS = "requesters"
# Other machines' owner keys this machine's sessions accept approvals from, like
# ``authorized_keys``: a laptop whose owner approves terminals here over the remote link.
OWNERS = "owners"
SEED_BYTES = 32
PUBLIC_KEY_HEX = 64
# A key file is one line of 64 hex digits; anything longer was not written by us.
MAX_KEY_FILE_BYTES = 256
# A requesters file lists public keys, one a line; a few hundred is plenty for a team.
MAX_REQUESTERS_FILE_BYTES = 64 * 1024
# A requester's name (its line's comment) as the dashboard shows it: a name, not a note.
MAX_NAME_CHARS = 64


def owner_key_path() -> Path:
    return config_dir() / OWNER_KEY


def _check_private(path: Path, info: os.stat_result, kind: str, mode_mask: int) -> None:
    if info.st_uid != os.getuid():
        raise KeyFileError(f"{kind} {path} is owned by uid {info.st_uid}, not you; refusing it")
    if stat.S_IMODE(info.st_mode) & mode_mask:
        if _in_system_dir(path):
            # (--key /etc/passwd, as root): a chmod there would break the machine
            raise KeyFileError(
                f"{kind} {path} has mode {stat.S_IMODE(info.st_mode):o} and lies in a system "
                "directory, never chmod it: give the path of a sandbridge key file of your own"
            )
        raise KeyFileError(
            f"{kind} {path} has mode {stat.S_IMODE(info.st_mode):o}; run chmod "
            f"{'600' if kind == 'key file' else '700'} on it"
        )


def _in_system_dir(path: Path) -> bool:
    try:
        return is_system_dir(path.parent, os.stat(path.parent).st_mode)
    except OSError:
        return False


def _private_dir(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    make_private_dir(path, "key directory", KeyFileError)


def public_hex(key: nacl.signing.SigningKey | nacl.signing.VerifyKey) -> str:
    """The public key as 64 hex digits, the form commands and records show."""
    verify = key.verify_key if isinstance(key, nacl.signing.SigningKey) else key
    return bytes(verify).hex()


def parse_public_key(text: str, what: str = "public key") -> nacl.signing.VerifyKey:
    """A public key from 64 hex digits; refuse anything else with the value."""
    if len(text) != PUBLIC_KEY_HEX or any(c not in "0123456789abcdef" for c in text):
        raise KeyFileError(f"{what} {text[:80]!r}: expected 64 lower-case hex digits")
    return nacl.signing.VerifyKey(bytes.fromhex(text))


def load_key(path: Path) -> nacl.signing.SigningKey:
    """Read a private key file; refuse a link, a foreign owner or a mode wider than 0600."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise KeyFileError(f"key file {path} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"key file {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"key file {path} is not a regular file")
        _check_private(path, info, "key file", 0o077)
        raw = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    text = raw.decode("ascii", "replace").strip()
    if len(text) != 2 * SEED_BYTES or any(c not in "0123456789abcdef" for c in text):
        raise KeyFileError(f"key file {path} does not hold a sandbridge key (64 hex digits)")
    return nacl.signing.SigningKey(bytes.fromhex(text))


def create_key(path: Path) -> nacl.signing.SigningKey:
    """Write a new key file at ``path`` (0600, in a 0700 directory); never overwrite one."""
    _private_dir(path.parent)
    key = nacl.signing.SigningKey.generate()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, bytes(key).hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def owner_key() -> nacl.signing.SigningKey:
    """The owner's key, created on first use."""
    path = owner_key_path()
    if not path.exists() and not path.is_symlink():
        _private_dir(path.parent)
        with contextlib.suppress(FileExistsError):
            return create_key(path)
    return load_key(path)


def owner_public_key() -> nacl.signing.VerifyKey:
    """The owner's public key (the host verifies approvals with it)."""
    return owner_key().verify_key


def requester_key(path: Path | None) -> nacl.signing.SigningKey:
    """The key a requester signs with: ``--key PATH``, else the owner's own."""
    return owner_key() if path is None else load_key(path)


def allowed_requesters() -> set[str]:
    """Public keys that may *request* terminals: the owner's, the other owners this
    machine trusts (``owners``: as the owner here, they request with their own key), and
    those in ``requesters``.

    Being listed never authorises a shell: only an owner-signed approval does.
    """
    return {public_hex(owner_public_key()), *trusted_owners(), *_listed_requesters()}


def requester_names() -> dict[str, str]:
    """The names the owner wrote for listed keys: the comment after a key on its line of
    ``requesters`` (``KEY  # alice``), at most :data:`MAX_NAME_CHARS` characters."""
    return {key: name for key, name in _listed_requesters().items() if name}


def trusted_owners() -> dict[str, str]:
    """Other owners' public keys whose approvals this machine's sessions admit, as the
    ``owners`` file lists them (``KEY  # laptop``; the same rules and limits as
    ``requesters``), each with its name. Removing a line voids that key's approvals at
    the next lease refresh: the file is read again at every check."""
    return _listed_keys(OWNERS, strict=True)


def trust_owner(public: str, name: str = "") -> Path:
    """Add ``public`` (64 hex digits) to the ``owners`` file, with ``name`` as its comment;
    return the file's path. A key already listed is left as it is."""
    key = public_hex(parse_public_key(public, "owner key"))
    if len(name) > MAX_NAME_CHARS or not name.isprintable() or "#" in name or "\n" in name:
        raise KeyFileError(
            f"--name {name[:80]!r}: printable, no '#', at most {MAX_NAME_CHARS} characters"
        )
    if key in trusted_owners():
        return config_dir() / OWNERS
    path = config_dir() / OWNERS
    _private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (key + (f"  # {name}" if name else "") + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _listed_requesters() -> dict[str, str]:
    """Each key of the ``requesters`` file with its line's comment (maybe empty)."""
    return _listed_keys(REQUESTERS)


def _listed_keys(name: str, strict: bool = False) -> dict[str, str]:
    """Each key of the file ``name`` in the config dir with its line's comment. ``strict``
    (a file that grants approvals, as ``authorized_keys`` grants logins): a link, a file
    of another user or one others may write is refused, naming it."""
    path = config_dir() / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_NOFOLLOW if strict else 0))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        if strict:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise KeyFileError(f"{path} is not a regular file")
            _check_private(path, info, "key file", 0o022)
        raw = file.read(MAX_REQUESTERS_FILE_BYTES + 1)
    if len(raw) > MAX_REQUESTERS_FILE_BYTES:
        raise KeyFileError(f"{path} is larger than {MAX_REQUESTERS_FILE_BYTES} bytes")
    listed: dict[str, str] = {}
    for number, line in enumerate(raw.decode("ascii", "replace").splitlines(), 1):
        text, _, comment = line.partition("#")
        if text.strip():
            key = public_hex(parse_public_key(text.strip(), f"{path} line {number}"))
            listed[key] = comment.strip()[:MAX_NAME_CHARS]
    return listed


def verify_signature(public: str, message: bytes, signature: bytes) -> bool:
    """True if ``signature`` is ``public``'s Ed25519 signature over ``message``."""
    try:
        parse_public_key(public).verify(message, signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, KeyFileError):
        return False
    return True
