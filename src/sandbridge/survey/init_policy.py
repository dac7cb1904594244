"""``sandbridge policy init``: a first policy from a survey, in the formats already read.

:func:`plan` (pure) turns a :class:`~sandbridge.survey.walk.Survey` and the registries
this host's toolchains name (:mod:`sandbridge.survey.presets`) into the text of
``.sandbridge/allow`` (entries as :mod:`sandbridge.project.policy` reads them),
``.sandbridge/config`` and ``.sandbridge/env.example``; every entry has a comment above
it naming the evidence that produced it. :func:`write` puts them in place: never over an
existing file without ``force``, never through a symbolic link, and ``.sandbridge/env``
(the secrets file, :mod:`sandbridge.project.secrets_file`) is added to ``.gitignore``.

What becomes an active entry, and what only a commented suggestion:

- hosts a package toolchain reaches (registries, indexes, lockfile and dependency URLs,
  registry variables) and submodule hosts over HTTPS: entries;
- host ports that compose files publish, and registries on this host: ``gate:PORT``;
- git remotes (fetching is also pushing: a way out), hosts only CI files name, remotes
  over ssh (which does not use the egress proxy) and ports the project serves
  (``publish = PORT``, auto-publish being opt-in): commented;
- a wildcard, an internationalized name or an address that is not public, whatever names
  it: commented, with a line saying why (the project's files are the sandbox's to have
  written).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sandbridge.egress.requests import idn_caution
from sandbridge.exceptions import PolicyError
from sandbridge.project.held_folder import HeldFolder
from sandbridge.project.policy import (
    ALLOW_FILE,
    CONFIG_FILE,
    DEFAULT_PORTS,
    MAX_POLICY_FILE_BYTES,
    format_entry,
    parse_entry,
)
from sandbridge.survey.findings import Finding, Kind, not_public
from sandbridge.survey.presets import PRESETS, replaces_default
from sandbridge.survey.toolchain_index import ASKED
from sandbridge.survey.walk import Survey

ENV_FILE = ALLOW_FILE.parent / "env"
ENV_EXAMPLE_FILE = ALLOW_FILE.parent / "env.example"
GITIGNORE_LINE = "/.sandbridge/env"
# A .gitignore people write; a larger one is left to them.
MAX_GITIGNORE_BYTES = 1024 * 1024
# Evidence lines named above one entry; the rest is counted.
MAX_EVIDENCE = 3
# Variables the project's compose services set for themselves (containers outside the
# sandbox): not the sandbox's to fill in.
_SERVICE_ENVIRONMENT = "compose service "


@dataclass(frozen=True, slots=True)
class PolicyFiles:
    """The three files ``init`` writes, as text."""

    allow: str
    config: str
    env_example: str


def _is_active(finding: Finding) -> bool:
    what = finding.what
    if finding.kind is Kind.HOST and _caution(finding.name):
        return False  # the owner must choose it (_caution says why)
    if "over ssh" in what:
        return False
    if what.startswith("git submodule"):
        return True
    return bool(finding.ecosystem)


def _entry(finding: Finding) -> str:
    if finding.kind is Kind.SERVICE:
        return f"gate:{finding.name}"
    port = None if finding.port in DEFAULT_PORTS else finding.port
    if finding.name.startswith("*."):
        return finding.name if port is None else f"{finding.name}:{port}"
    return format_entry(finding.name, port)


def _block(entry: str, evidence: list[Finding], active: bool) -> list[str]:
    lines = [f"# {f.where}: {f.what}" for f in evidence[:MAX_EVIDENCE]]
    if len(evidence) > MAX_EVIDENCE:
        lines.append(f"# ... and {len(evidence) - MAX_EVIDENCE} more")
    caution = _caution(evidence[0].name) if evidence[0].kind is Kind.HOST else None
    if caution is not None and not active:
        lines.append(f"# {caution}")
    if active and evidence[0].kind in (Kind.HOST, Kind.SERVICE):
        try:  # a line the policy reader refuses would stop every later run
            parse_entry(entry, "entry")
        except PolicyError as exc:
            lines.append(f"# not an entry: {str(exc).removeprefix('entry: ')}")
            active = False
    lines.append(entry if active else f"# {entry}")
    return lines


def _caution(host: str) -> str | None:
    """Why a host the project names is not made an active entry: the word ``gate``
    without a port (which the policy reader refuses), a wildcard (a public
    suffix such as ``.github.io`` looks like a company's domain), an internationalized
    name (a letter of another script can pass for a Latin one), or an address that is not
    public (an address entry is taken at its word)."""
    if host == "gate":  # a port of it is a host service; the word alone is no entry
        return (
            "gate names this host's services, not a host the proxy reaches: write gate:PORT "
            "for the port the sandbox needs"
        )
    if host.startswith("*."):
        return (
            f"{host} is a wildcard: it allows every name ending in {host[1:]}, and a public "
            "suffix (.co.uk, .github.io) looks like a company's domain; uncomment it only if "
            "the sandbox must reach it"
        )
    idn = idn_caution(host)
    if idn is not None:
        return f"{idn}; uncomment it only if the sandbox must reach it"
    kind = not_public(host)
    if kind is None:
        return None
    return (
        f"{host} is a {kind} address: the proxy connects to an address entry as written; "
        "uncomment it only if the sandbox must reach it"
    )


def _grouped(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    """Findings by the entry they produce, in the order first seen."""
    groups: dict[str, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(_entry(finding), []).append(finding)
    return groups


def project_ecosystems(survey: Survey) -> set[str]:
    """The toolchains :func:`plan` writes a section for: those the project's files use
    and those its entries belong to (only their host registries are of use to it)."""
    return _ecosystems(survey.ecosystems(), _active(survey.of(Kind.HOST) + survey.of(Kind.SERVICE)))


def _active(hosts: list[Finding]) -> list[Finding]:
    return [f for f in hosts if _is_active(f) or f.kind is Kind.SERVICE]


def _ecosystems(ecosystems: Mapping[str, list[str]], active: list[Finding]) -> set[str]:
    return ({f.ecosystem for f in active} | set(ecosystems)) - {""}


def plan(
    survey: Survey,
    host_registries: list[Finding],
    written_on: str,
    non_global: Mapping[str, str] | None = None,
    resolver: str | None = None,
) -> PolicyFiles:
    """The policy for ``survey``; ``host_registries`` from :func:`presets.host_registries`
    and :func:`toolchain_index.toolchain_indexes`; ``non_global``: the index names that
    resolved to non-global addresses only (:func:`index_addresses.non_global_names`),
    written with ``private``; ``resolver``: the DNS server asked, written as ``resolver =``."""
    non_global = non_global or {}
    hosts = survey.of(Kind.HOST) + survey.of(Kind.SERVICE)
    active = _active(hosts)
    chosen = set(active)  # a set: a lockfile may name thousands of hosts
    suggested = [f for f in hosts if f not in chosen]
    head = [
        f"# Written by `sandbridge policy init` on {written_on} from what this project",
        "# declares (`sandbridge policy survey` lists it). Review every entry: the sandbox",
        "# reaches exactly these. One entry a line; docs/network.md gives the syntax.",
    ]
    lines = list(head)
    ecosystems = survey.ecosystems()
    for ecosystem in sorted(_ecosystems(ecosystems, active)):
        section = _ecosystem_section(ecosystem, ecosystems, active, host_registries, non_global)
        lines += ["", *section]
    services = [f for f in active if f.kind is Kind.SERVICE]
    if services:
        lines += [
            "",
            "# host services: the sandbox reaches this host's 127.0.0.1:PORT at gate:PORT",
        ]
        for entry, evidence in _grouped(services).items():
            lines += _block(entry, evidence, True)
    others = [f for f in active if f.kind is Kind.HOST and not f.ecosystem]
    if others:
        lines += ["", "# git submodules"]
        for entry, evidence in _grouped(others).items():
            lines += _block(entry, evidence, True)
    if suggested:
        lines += [
            "",
            "# named by the project but not made entries (git remotes: fetching is also",
            "# pushing; hosts only CI names; git over ssh, which the proxy does not carry;",
            "# wildcards and addresses that are not public, each saying why): uncomment",
            "# what the sandbox should reach",
        ]
        for entry, evidence in _grouped(suggested).items():
            lines += _block(entry, evidence, False)
    return PolicyFiles(
        allow="\n".join(lines) + "\n",
        config=_config(survey, written_on, resolver),
        env_example=_env_example(survey, written_on),
    )


def _ecosystem_section(
    ecosystem: str,
    ecosystems: dict[str, list[str]],
    active: list[Finding],
    host_registries: list[Finding],
    non_global: Mapping[str, str],
) -> list[str]:
    preset = PRESETS.get(ecosystem)
    files = ecosystems.get(ecosystem, [])
    lines = [f"# {ecosystem}" + (f" ({', '.join(files[:MAX_EVIDENCE])})" if files else "")]
    own = [f for f in active if f.ecosystem == ecosystem]
    from_host: list[Finding] = []
    if preset is not None:
        lines.append(f"# {preset.needs}")
        if not (own and replaces_default(preset, own)):
            from_host = [f for f in host_registries if f.ecosystem == ecosystem]
            if not replaces_default(preset, from_host):
                # Above the section's entries: the comment is about what is still missing.
                lines.append(f"# {preset.placeholder}")
    for entry, evidence in _grouped(own).items():
        lines += _registry_block(entry, evidence, non_global)
    taken = {_entry(f) for f in own}
    for entry, evidence in _grouped(from_host).items():
        if entry not in taken:
            lines += _registry_block(entry, [_host_evidence(f) for f in evidence], non_global)
    return lines


def _registry_block(
    entry: str, evidence: list[Finding], non_global: Mapping[str, str]
) -> list[str]:
    """An ecosystem's entry; ``private`` when its name resolved to non-global addresses
    only (a company mirror, a split-DNS name), which the proxy reaches only so."""
    first = evidence[0]
    seen = non_global.get(first.name) if first.kind is Kind.HOST else None
    if seen is None:
        return _block(entry, evidence, True)
    lines = _block(f"{entry} private", evidence, True)
    why = f"# {seen} (when init ran): 'private' lets the proxy connect to it"
    return [*lines[:-1], why, lines[-1]]


def _host_evidence(finding: Finding) -> Finding:
    if ASKED in finding.what:  # says itself where it came from
        return finding
    return Finding(
        finding.kind,
        finding.name,
        finding.where,
        f"{finding.what} (this host's own configuration)",
        finding.ecosystem,
        finding.port,
    )


def _config(survey: Survey, written_on: str, resolver: str | None) -> str:
    lines = [
        f"# Written by `sandbridge policy init` on {written_on}; `key = value` lines,",
        "# docs/network.md gives every key.",
        "net = allow",
    ]
    if resolver is not None:
        lines += [
            "# the DNS server init asked for the index hosts' addresses",
            f"resolver = {resolver}",
        ]
    ports = survey.of(Kind.PORT)
    if ports:
        lines += [
            "",
            "# ports the project serves: uncomment to publish each when something listens",
            "# on it (auto-publish, docs/network.md#auto-publish)",
        ]
        for evidence in _grouped(ports).values():
            lines += _block(f"publish = {evidence[0].name}", evidence, False)
    return "\n".join(lines) + "\n"


# Directories and file names of tests and their fixtures, across ecosystems (pytest,
# go test, Jest, RSpec, Mocha): a variable only they name is the tests' own, not one the
# project needs a value for in the sandbox.
_TEST_DIRS = frozenset(
    {"test", "tests", "testdata", "fixtures", "__fixtures__", "__tests__", "__mocks__", "spec"}
)
_TEST_FILES = ("test_*", "*_test.*", "*.test.*", "*.spec.*", "*_spec.*", "conftest.py")


def is_test_fixture(where: str) -> bool:
    """Whether a finding's ``file[:line]`` lies in a project's tests or their fixtures."""
    path = PurePosixPath(where.rsplit(":", 1)[0] if where[-1:].isdigit() else where)
    if any(part in _TEST_DIRS for part in path.parts[:-1]):
        return True
    return any(fnmatch.fnmatchcase(path.name, pattern) for pattern in _TEST_FILES)


def _env_example(survey: Survey, written_on: str) -> str:
    lines = [
        f"# Written by `sandbridge policy init` on {written_on}: the variables this project",
        "# names. Copy it to .sandbridge/env, fill in the values and keep that file private",
        "# (chmod 600, never committed: .gitignore lists it); `sandbridge run` sets them in",
        "# the sandbox (docs/policy.md).",
    ]
    names: dict[str, list[Finding]] = {}
    for finding in survey.of(Kind.VARIABLE):
        if not finding.what.startswith(_SERVICE_ENVIRONMENT):
            names.setdefault(finding.name, []).append(finding)
    names = {
        name: evidence
        for name, evidence in names.items()
        if not all(is_test_fixture(f.where) for f in evidence)
    }
    for name, evidence in names.items():
        lines += ["", *_block(f"{name}=", evidence, True)]
    return "\n".join(lines) + "\n"


# --- writing -------------------------------------------------------------------------------


def existing(root: Path) -> list[Path]:
    """The policy files ``init`` would replace."""
    return [
        root / name
        for name in (ALLOW_FILE, CONFIG_FILE, ENV_EXAMPLE_FILE)
        if os.path.lexists(root / name)
    ]


def write(root: Path, files: PolicyFiles, force: bool, ignored: bool | None = None) -> list[Path]:
    """Write the three files under ``root/.sandbridge`` (not over existing ones unless
    ``force``) and list ``.sandbridge/env`` in ``.gitignore`` (``ignored``: whether git
    ignores it already, :func:`ignore_secrets_file`); return what was written."""
    present = existing(root)
    if present and not force:
        shown = ", ".join(str(path) for path in present)
        raise PolicyError(
            f"{shown}: a policy exists; review it, or replace it with "
            "`sandbridge policy init --force`"
        )
    for name, text in ((ALLOW_FILE, files.allow), (CONFIG_FILE, files.config)):
        size = len(text.encode())
        if size > MAX_POLICY_FILE_BYTES:
            raise PolicyError(
                f"{root / name}: would be {size} bytes, more than the {MAX_POLICY_FILE_BYTES} "
                "a policy file may hold (`sandbridge policy survey` lists what made it so "
                "long); nothing was written: write the policy by hand"
            )
    directory = root / ALLOW_FILE.parent
    try:  # held by its descriptor from here on: a swap for a link now changes nothing
        folder = HeldFolder.make(directory)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PolicyError(f"{directory}: not a directory; remove it first") from None
        raise PolicyError(f"{directory}: cannot open: {exc.strerror}") from None
    written = []
    with folder:
        for name, text in (
            (ALLOW_FILE, files.allow),
            (CONFIG_FILE, files.config),
            (ENV_EXAMPLE_FILE, files.env_example),
        ):
            try:
                folder.replace(name.name, text.encode())
            except OSError as exc:
                raise PolicyError(f"{root / name}: cannot write: {exc.strerror}") from None
            written.append(root / name)
    if ignore_secrets_file(root, ignored):
        written.append(root / ".gitignore")
    return written


def ignore_secrets_file(root: Path, ignored: bool | None = None) -> bool:
    """Add ``/.sandbridge/env`` to ``root/.gitignore`` unless it is ignored already; True
    if the file changed.

    ``ignored`` is git's own answer (the caller asks the hardened host git): a line naming
    the file proves nothing when a later ``!/.sandbridge/env`` (which the sandbox may have
    written) takes it back, so with git's "no" the line is appended, and wins, being last.
    Without git (``None``) a line naming it is taken as enough. The file is opened once,
    never through a link, never blocking, and only a regular file is read or written."""
    if ignored is True:
        return False
    path = root / ".gitignore"
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else f"cannot open: {exc.strerror}"
        raise PolicyError(f"{path}: {why}; add the line {GITIGNORE_LINE} yourself") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PolicyError(f"{path}: not a regular file; add the line {GITIGNORE_LINE} yourself")
    with os.fdopen(fd, "r+b") as file:
        raw = file.read(MAX_GITIGNORE_BYTES + 1)
        try:
            if len(raw) > MAX_GITIGNORE_BYTES:
                raise ValueError(f"larger than {MAX_GITIGNORE_BYTES} bytes")
            text = raw.decode("utf-8")
        except ValueError as exc:
            raise PolicyError(
                f"{path}: cannot read it ({exc}); add the line {GITIGNORE_LINE} yourself"
            ) from None
        names_it = any(
            line.strip() in (GITIGNORE_LINE, str(ENV_FILE)) for line in text.splitlines()
        )
        if ignored is None and names_it:
            return False
        addition = ("" if not text or text.endswith("\n") else "\n") + GITIGNORE_LINE + "\n"
        try:
            file.write(addition.encode())
            file.flush()
        except OSError as exc:
            raise PolicyError(f"{path}: cannot write: {exc.strerror}") from None
    return True
