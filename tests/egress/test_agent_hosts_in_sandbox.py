"""An agent profile's API host is reachable through the egress proxy, and no other host
is (both backends), in the test-made internet of :mod:`tests.apps.net_world`.

No agent's real API is reachable from the test machines: the profile here is a user
profile (in the test's private XDG_CONFIG_HOME) whose API host is ``public.test``, a
server of the test-made internet; ``other.test`` stands for any host it does not name.
The project's policy names neither: only the profile adds ``public.test``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, REPO, SANDBRIDGE
from tests.egress.test_in_sandbox import PROBES, collect, in_world


def test_the_profiles_api_host_is_reached_and_another_is_refused(
    backend: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / ".sandbridge").mkdir()
    (work / ".sandbridge" / "config").write_text("resolver = 127.0.0.1:5353\n")
    config = tmp_path / "config" / "sandbridge"
    (config / "agents").mkdir(parents=True)
    config.chmod(0o700)
    (config / "agents" / "stand-in.toml").write_text(
        f'command = ["{PYTHON}", "{PROBES}"]\nhosts = ["public.test"]\n'
    )
    (tmp_path / "home").mkdir()
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_RUNTIME_DIR": str(xdg),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    argv = [
        *SANDBRIDGE,
        "run",
        "--backend",
        backend,
        "--workdir",
        str(work),
        "--ro-bind",
        str(REPO),
        "--agent",
        "stand-in",
        "--",
        "allowed_http",
        "refused_domain",
    ]
    process = in_world(argv, env)
    try:
        probes = collect(process)
        assert process.popen.wait(30) == 0
    finally:
        if process.popen.poll() is None:
            process.stop()
    stderr = process.drain("stderr")
    lines = process.lines["stderr"] + stderr.splitlines()
    assert probes["allowed_http"].startswith("status=200")
    assert "hello from public80" in probes["allowed_http"]
    assert probes["refused_domain"].startswith("status=403")
    assert not [line for line in lines if line.startswith("HIT other80")]
