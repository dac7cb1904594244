"""The network policy: parsing, merging, provenance and every destination decision."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import pytest

from sandbridge.egress.decision import check_addresses, host_service_decision, match_destination
from sandbridge.exceptions import PolicyError
from sandbridge.project.policy import (
    NetMode,
    Policy,
    Setting,
    describe,
    load_policy,
    mask_credentials,
)
from sandbridge.protocol.contract import PROXY_PORT
from sandbridge.protocol.http.origin_policy import UrlForm
from sandbridge.protocol.open_request import OpenAction
from tests.conftest import swapping


def project(tmp_path: Path, allow: str = "", config: str = "") -> Path:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text(allow)
    (tmp_path / ".sandbridge" / "config").write_text(config)
    return tmp_path


def policy_of(*entries: str, **flags: Any) -> Policy:
    return load_policy(Path("/nonexistent"), allow=entries, **flags)


def test_no_files_and_no_flags_is_allow_mode_with_nothing_allowed() -> None:
    policy = policy_of()
    assert policy.mode.value is NetMode.ALLOW
    assert policy.rules == () and policy.host_services == ()
    assert policy.gate == "100.64.0.1"
    assert policy.gate_ports() == [PROXY_PORT]


def test_files_and_flags_merge_with_provenance(tmp_path: Path) -> None:
    workdir = project(
        tmp_path,
        allow="# the project's registry\npkgs.example.com\n\n100.64.0.1:5432  # dev db\n",
        config="net = allow\nallow = *.registry.example.com\nenv = TOKEN=abc\n",
    )
    policy = load_policy(workdir, allow=["gate:6379"], gate_addr="100.64.9.9")
    assert [(r.text, r.source) for r in policy.rules] == [
        ("*.registry.example.com", ".sandbridge/config:2"),
        ("pkgs.example.com", ".sandbridge/allow:2"),
        ("100.64.0.1:5432", ".sandbridge/allow:4"),
    ]
    # The gate moved: 100.64.0.1:5432 is now an ordinary IP-literal proxy entry.
    assert [(s.port, s.source) for s in policy.host_services] == [(6379, "--allow")]
    assert policy.gate_addr.source == "--gate-addr"
    assert policy.mode.source == ".sandbridge/config:1"
    assert policy.sandbox_env()["TOKEN"] == "abc"


def test_open_setting_is_read_with_its_line_and_printed(tmp_path: Path) -> None:
    policy = load_policy(project(tmp_path, config="net = none\nopen = ask\n"))
    assert policy.open_action == Setting(OpenAction.ASK, ".sandbridge/config:2")
    assert any(
        line.startswith("open = ask") and line.endswith("(.sandbridge/config:2)")
        for line in describe(policy)
    )
    assert policy_of().open_action is None


def test_url_form_setting_is_read_with_its_line_and_printed(tmp_path: Path) -> None:
    policy = load_policy(project(tmp_path, config="url_form = ip\n"))
    assert policy.url_form == Setting(UrlForm.IP, ".sandbridge/config:1")
    assert any(
        line.startswith("url_form = ip") and line.endswith("(.sandbridge/config:1)")
        for line in describe(policy)
    )
    assert policy_of().url_form is None


def test_flag_overrides_file_setting(tmp_path: Path) -> None:
    policy = load_policy(project(tmp_path, config="net = full\n"), net="none")
    assert policy.mode.value is NetMode.NONE
    assert policy.mode.source == "--net"


@pytest.mark.parametrize(
    ("allow", "config", "message"),
    [
        ("exa mple.com\n", "", ".sandbridge/allow:1: expected 'HOST[:PORT]'"),
        ("ok.org\nbad_name!\n", "", ".sandbridge/allow:2: 'bad_name!' is not a domain name"),
        ("example.com:0\n", "", ".sandbridge/allow:1: port must be 1..65535, got '0'"),
        ("example.com:http\n", "", "port must be 1..65535, got 'http'"),
        ("example.com:" + "9" * 5000 + "\n", "", "port must be 1..65535, got '99999999"),
        ("example.com:\u00b2\n", "", "port must be 1..65535, got '\u00b2'"),
        ("*.com\n", "", "'*.com' would allow a whole top-level domain"),
        ("*\n", "", "'*' is not a domain name"),
        ("a.*.com\n", "", "'a.*.com' is not a domain name"),
        ("::1\n", "", "write an IPv6 address in brackets"),
        ("gate\n", "", "a host service needs a port"),
        ("100.64.0.1\n", "", "a host service needs a port"),
        ("gate:18081\n", "", "port 18081 of the gate is the egress proxy"),
        ("", "net = open\n", ".sandbridge/config:1: net must be one of none, allow, full"),
        ("", "gate_addr = 127.0.0.2\n", "must not be loopback"),
        ("", "gate_addr = gate.local\n", "gate_addr must be an IPv4 address"),
        ("", "color = blue\n", ".sandbridge/config:1: unknown key 'color'"),
        ("", "just words\n", ".sandbridge/config:1: expected 'key = value'"),
        ("", "env = 1BAD=x\n", "expected 'env = NAME=VALUE'"),
        ("", "resolver = dns.example\n", "resolver must be an IP address"),
        ("", "open = firefox\n", ".sandbridge/config:1: open must be one of browser, print, ask"),
        ("", "url_form = IP\n", ".sandbridge/config:1: url_form must be one of name, ip, got 'IP'"),
        ("", "url_form =\n", ".sandbridge/config:1: url_form must be one of name, ip, got ''"),
    ],
)
def test_malformed_line_names_file_line_and_problem(
    tmp_path: Path, allow: str, config: str, message: str
) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        load_policy(project(tmp_path, allow, config))


def test_non_utf8_policy_file_is_refused(tmp_path: Path) -> None:
    workdir = project(tmp_path)
    (workdir / ".sandbridge" / "allow").write_bytes(b"caf\xe9.org\n")
    with pytest.raises(PolicyError, match=r".sandbridge/allow: not UTF-8"):
        load_policy(workdir)


@pytest.mark.parametrize("name", ["allow", "config"])
def test_a_policy_file_that_links_elsewhere_is_refused_and_not_read(
    tmp_path: Path, name: str
) -> None:
    # A repository can carry the link: its target is any file the owner can read, and a
    # parse error would print its first line.
    target = tmp_path / "elsewhere"
    target.write_text("root:x:0:0:secret-line\n")
    workdir = project(tmp_path)
    (workdir / ".sandbridge" / name).unlink(missing_ok=True)
    (workdir / ".sandbridge" / name).symlink_to(target)
    with pytest.raises(PolicyError) as caught:
        load_policy(workdir)
    assert str(caught.value) == f".sandbridge/{name}: a symbolic link; make it a plain file"


def test_a_policy_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    workdir = project(tmp_path)
    (workdir / ".sandbridge" / "allow").unlink(missing_ok=True)
    os.mkfifo(workdir / ".sandbridge" / "allow")  # nobody writes: a blocking open would hang
    with pytest.raises(PolicyError) as caught:
        load_policy(workdir)
    assert str(caught.value) == ".sandbridge/allow: not a regular file; make it a plain file"


def test_bad_flag_entry_names_the_flag() -> None:
    with pytest.raises(PolicyError, match=re.escape("--allow: expected 'HOST[:PORT]'")):
        policy_of("no way")


POLICY = policy_of(
    "example.com",
    "*.corp.example:8080",
    "git.internal private",
    "203.0.113.7",
    "[2001:db8::1]:443",
    "gate:5432",
)


@pytest.mark.parametrize(
    ("host", "port", "allowed", "text"),
    [
        ("example.com", 443, True, "allowed by 'example.com'"),
        ("EXAMPLE.com.", 80, True, "allowed by 'example.com'"),
        ("example.com", 8443, True, "allowed by"),
        ("example.com", 22, False, "port 22 is not allowed for example.com"),
        ("www.example.com", 443, False, "www.example.com is not in the allowlist"),
        ("a.corp.example", 8080, True, "allowed by '*.corp.example:8080'"),
        ("a.b.corp.example", 8080, True, "allowed by"),
        ("corp.example", 8080, False, "not in the allowlist"),
        ("a.corp.example", 443, False, "port 443 is not allowed"),
        ("evilexample.com", 443, False, "not in the allowlist"),
        ("203.0.113.7", 443, True, "allowed by '203.0.113.7'"),
        ("203.0.113.8", 443, False, "IP-literal destinations are refused"),
        ("[2001:db8::1]", 443, True, "allowed by '[2001:db8::1]:443'"),
        ("127.0.0.1", 443, False, "IP-literal destinations are refused"),
        ("100.64.0.1", 5432, False, "the gate address is not reachable through the proxy"),
        ("bad host", 443, False, "is not a valid host name"),
        ("example.com", 70000, False, "out of range"),
    ],
)
def test_destination_table(host: str, port: int, allowed: bool, text: str) -> None:
    decision = match_destination(POLICY, host, port)
    assert decision.allowed is allowed
    assert text in decision.reason


@pytest.mark.parametrize(
    ("host", "port", "line"),
    [
        ("other.org", 443, "'other.org'"),
        ("other.org", 9000, "'other.org:9000'"),
        ("example.com", 22, "'example.com:22'"),
        ("198.51.100.1", 80, "'198.51.100.1'"),
        ("[2001:db8::2]", 8080, "'[2001:db8::2]:8080'"),
    ],
)
def test_refusal_names_destination_and_the_line_that_allows_it(
    host: str, port: int, line: str
) -> None:
    text = match_destination(POLICY, host, port).refusal_text(f"{host}:{port}")
    assert text.startswith(f"egress to {host}:{port} refused: ")
    assert f"add the line {line} to .sandbridge/allow" in text


ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("host", "addresses", "usable", "refusal"),
    [
        ("example.com", ["93.184.216.34"], ["93.184.216.34"], None),
        ("example.com", ["127.0.0.1"], [], "resolves to 127.0.0.1 (loopback)"),
        ("example.com", ["10.1.2.3"], [], "(private)"),
        ("example.com", ["169.254.169.254"], [], "(link-local)"),
        ("example.com", ["::ffff:127.0.0.1"], [], "(loopback)"),
        ("example.com", ["fe80::1"], [], "(link-local)"),
        ("example.com", ["100.64.0.1"], [], "(non-global)"),
        ("example.com", ["127.0.0.1", "93.184.216.34"], ["93.184.216.34"], None),
        ("example.com", [], [], "does not resolve"),
        ("git.internal", ["10.1.2.3"], ["10.1.2.3"], None),
        ("git.internal", ["127.0.0.1"], ["127.0.0.1"], None),
        # 6to4 (2002::/16) and Teredo (2001::/32) deliver to the IPv4 address they carry.
        ("example.com", ["2002:7f00:1::1"], [], "(loopback via 6to4)"),
        ("example.com", ["2002:a00:1::1"], [], "(private via 6to4)"),
        ("example.com", ["2002:a9fe:a9fe::1"], [], "(link-local via 6to4)"),
        ("example.com", ["2002:6440:1::1"], [], "(non-global via 6to4)"),
        # A 6to4 address reaches the network behind its IPv4 address: refused even when
        # that is public, on every Python (docs/network.md).
        ("example.com", ["2002:5db8:d822::1"], [], "(6to4)"),
        ("example.com", ["2001:0:4136:e378:8000:63bf:80ff:fffe"], [], "(loopback via Teredo)"),
        # Teredo is non-global whatever its client: refused even when that is public.
        ("example.com", ["2001:0:4136:e378:8000:63bf:a247:27dd"], [], "(private)"),
        ("example.com", ["64:ff9b::7f00:1"], [], "(reserved)"),
        ("git.internal", ["2002:7f00:1::1"], ["2002:7f00:1::1"], None),
    ],
)
def test_resolved_addresses_table(
    host: str, addresses: list[str], usable: list[str], refusal: str | None
) -> None:
    decision = match_destination(POLICY, host, 443)
    assert decision.allowed
    result, final = check_addresses(decision, host, 443, [ip(a) for a in addresses])
    assert [str(a) for a in result] == usable
    if refusal is None:
        assert final.allowed
    else:
        assert not final.allowed and refusal in final.reason


def test_the_hosts_own_global_address_is_refused_unless_private() -> None:
    own = ip("93.184.216.34")
    decision = match_destination(POLICY, "example.com", 443)
    usable, final = check_addresses(decision, "example.com", 443, [own], local=[own])
    assert usable == [] and "(this host)" in final.reason
    private = match_destination(POLICY, "git.internal", 443)
    assert check_addresses(private, "git.internal", 443, [own], local=[own])[0] == [own]


def test_a_6to4_address_of_the_hosts_own_address_is_refused_unless_private() -> None:
    own, tunnelled = ip("93.184.216.34"), ip("2002:5db8:d822::1")
    decision = match_destination(POLICY, "example.com", 443)
    usable, final = check_addresses(decision, "example.com", 443, [tunnelled], local=[own])
    assert usable == [] and "(this host via 6to4)" in final.reason
    private = match_destination(POLICY, "git.internal", 443)
    assert check_addresses(private, "git.internal", 443, [tunnelled], local=[own])[0] == [tunnelled]


def test_private_refusal_names_the_entry_to_change_to_private() -> None:
    decision = match_destination(POLICY, "example.com", 443)
    _, final = check_addresses(decision, "example.com", 443, [ip("127.0.0.1")])
    assert final.suggestion == "example.com private"
    assert "change the entry 'example.com' (--allow) to 'example.com private'" in (
        final.refusal_text("example.com:443")
    )


def test_private_refusal_names_the_file_line_to_edit_never_a_line_to_add(
    tmp_path: Path,
) -> None:
    # A line added after `pkgs.test` would never be reached: the first matching entry
    # decides. The refusal names the line that decided.
    policy = load_policy(project(tmp_path, allow="# index\n\npkgs.test\n"))
    decision = match_destination(policy, "pkgs.test", 443)
    _, final = check_addresses(decision, "pkgs.test", 443, [ip("192.0.2.7")])
    text = final.refusal_text("pkgs.test:443")
    assert "edit .sandbridge/allow:3 to read 'pkgs.test private'" in text
    assert "add the line" not in text


def test_private_refusal_under_a_wildcard_says_to_add_the_name_above_it(
    tmp_path: Path,
) -> None:
    policy = load_policy(project(tmp_path, allow="*.corp.test\n"))
    decision = match_destination(policy, "pkgs.corp.test", 443)
    _, final = check_addresses(decision, "pkgs.corp.test", 443, [ip("10.0.0.8")])
    assert (
        "add the line 'pkgs.corp.test private' above '*.corp.test' (.sandbridge/allow:1), "
        "which decides first" in final.refusal_text("pkgs.corp.test:443")
    )


@pytest.mark.parametrize(
    ("port", "allowed"), [(5432, True), (5433, False), (PROXY_PORT, True), (22, False)]
)
def test_host_service_table(port: int, allowed: bool) -> None:
    assert host_service_decision(POLICY, port).allowed is allowed


def test_neighbouring_host_port_refusal_names_the_entry() -> None:
    text = host_service_decision(POLICY, 5433).refusal_text("gate port 5433")
    assert "add the line '100.64.0.1:5433'" in text


def test_proxy_environment_covers_loopback_and_the_gate() -> None:
    env = policy_of().sandbox_env()
    assert env["http_proxy"] == env["HTTPS_PROXY"] == env["ALL_PROXY"] == "http://100.64.0.1:18081"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1,100.64.0.1"
    assert "http_proxy" not in policy_of(net="none").sandbox_env()


def test_describe_shows_sources_and_hides_env_values_and_credentials(tmp_path: Path) -> None:
    workdir = project(
        tmp_path, "pkgs.example.com\n", "env = TOKEN=hunter2\nresolver = 127.0.0.1:5353\n"
    )
    text = "\n".join(describe(load_policy(workdir, allow=["gate:5432"])))
    assert "hunter2" not in text
    assert "env TOKEN = (value hidden)" in text
    assert "(.sandbridge/allow:1)" in text and "(--allow)" in text
    assert "resolver = 127.0.0.1:5353" in text
    assert "100.64.0.1:5432 -> 127.0.0.1:5432" in text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("http://user:pw@proxy.example:3128/", "http://***@proxy.example:3128/"),
        ("see https://tok@x.org and ftp://a@b", "see https://***@x.org and ftp://***@b"),
        ("http://plain.example/a@b", "http://plain.example/a@b"),
    ],
)
def test_url_credentials_are_masked(text: str, masked: str) -> None:
    assert mask_credentials(text) == masked


# --- publish = ... (auto-publish's rules, protocol/publish_rules.py) ------------------


def test_publish_lines_and_flags_keep_their_order_and_source(tmp_path: Path) -> None:
    workdir = project(tmp_path, config="publish = auto\npublish = 5432 ignore\n")
    policy = load_policy(workdir, publish=["3000-3999"])
    assert [(rule.text, rule.source) for rule in policy.publish] == [
        ("auto notify", ".sandbridge/config:1"),
        ("5432 ignore", ".sandbridge/config:2"),
        ("3000-3999 notify", "--publish"),
    ]


def test_no_publish_line_means_no_auto_publish() -> None:
    assert policy_of().publish == ()


def test_a_bad_publish_line_names_file_line_and_value(tmp_path: Path) -> None:
    workdir = project(tmp_path, config="net = none\npublish = 9999-3000\n")
    with pytest.raises(PolicyError, match=r"^\.sandbridge/config:2: publish = 9999-3000: give"):
        load_policy(workdir)


def test_auto_publish_with_net_full_is_refused_naming_both_lines() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(Path("/nonexistent"), net="full", publish=["auto"])
    assert str(caught.value) == (
        "--publish: publish = auto watches the sandbox's own network, but net = full (--net) "
        "shares the host's; use net allow or none, or --publish PORT"
    )


def test_ignore_rules_alone_are_accepted_with_net_full(tmp_path: Path) -> None:
    workdir = project(tmp_path, config="publish = 5432 ignore\n")
    assert load_policy(workdir, net="full").publish[0].text == "5432 ignore"


def test_describe_lists_publish_rules_with_their_source(tmp_path: Path) -> None:
    workdir = project(tmp_path, config="publish = 3000-3999 silent\n")
    lines = describe(load_policy(workdir))
    assert any(
        line.startswith("publish = 3000-3999 silent") and line.endswith("(.sandbridge/config:1)")
        for line in lines
    )


def test_a_private_address_under_a_wildcard_suggests_the_name_alone() -> None:
    # The line a refusal names is shown to the owner (the 403, the dashboard) as the one
    # that allows it: `*.corp.example:8080 private` would open every name of the domain
    # to private addresses, for one name the sandbox chose.
    decision = match_destination(POLICY, "evil.corp.example", 8080)
    _, final = check_addresses(decision, "Evil.corp.example.", 8080, [ip("10.1.2.3")])
    assert not final.allowed
    assert final.suggestion == "evil.corp.example:8080 private"


def test_a_policy_folder_swapped_for_another_projects_is_never_read(tmp_path: Path) -> None:
    # The session checked `.sandbridge` (no link), then read its files by their whole
    # paths: a sandbox swapping the folder for a link to another project's in a loop had
    # the host read that project's policy. Each read now finds the real folder or refuses.
    (tmp_path / "p").mkdir()
    (tmp_path / "o").mkdir()
    workdir = project(tmp_path / "p", allow="own.test\n")
    other = project(tmp_path / "o", allow="other.test\n")
    (workdir / "link").symlink_to(other / ".sandbridge")
    read = 0
    with swapping(workdir / ".sandbridge", workdir / "link"):
        for _ in range(1500):
            try:
                policy = load_policy(workdir)
            except PolicyError as exc:
                assert "symbolic link or not a directory" in str(exc), exc
                continue
            assert [rule.host for rule in policy.rules] == ["own.test"]
            read += 1
    assert read > 0
