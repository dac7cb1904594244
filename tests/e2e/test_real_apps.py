"""Real apps through the relay in Chromium: Vite with hot reload, Streamlit, JupyterLab with
a kernel, Gradio and plain Flask, each run inside one sandbox from the project's own
virtualenv (``.venv-apps``, first on the owner's PATH, as a project's environment is) and
published by auto-publish as it starts listening.

Each test drives what its app needs from the relay: Vite's hot-reload WebSocket,
Streamlit's session WebSocket, JupyterLab's page and a kernel's WebSocket, Gradio's queue
and its server-sent events, Flask's root-absolute fetch, POST and redirect.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import REPO, Process, run_argv
from tests.e2e.browser import CHROMIUM

APPS_VENV = REPO / ".venv-apps"
VITE_FIXTURE = REPO / "tests" / "apps" / "vite_app"
REAL = REPO / "tests" / "apps" / "real"
PORTS = {"vite": 4171, "streamlit": 4172, "jupyter": 4173, "gradio": 4174, "flask": 4175}
JUPYTER_TOKEN = "sandbridge-real-apps"
# Startup of the heavier apps (JupyterLab, Gradio) on a busy 2-core machine.
START_SECONDS = 120
pytestmark = pytest.mark.timeout(300)
PUBLISHED = re.compile(r"sandbridge: sandbox port (\d+) \([^)]*\) -> (http://\S+)")


def _script(go: Path) -> str:
    python = APPS_VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: ./dev.sh setup makes it"
    return " ".join(
        [
            "export GRADIO_ANALYTICS_ENABLED=False;",
            f"(cd vite && VITE_PORT={PORTS['vite']} node node_modules/vite/bin/vite.js",
            "--configLoader native) &",
            f"python -m streamlit run {REAL / 'streamlit_app.py'} --server.headless true",
            f"--server.address 127.0.0.1 --server.port {PORTS['streamlit']}",
            "--browser.gatherUsageStats false &",
            "python -m jupyterlab --no-browser --ip 127.0.0.1",
            f"--port {PORTS['jupyter']} --IdentityProvider.token={JUPYTER_TOKEN} --allow-root &",
            f"python {REAL / 'gradio_app.py'} {PORTS['gradio']} &",
            f"python {REAL / 'flask_app.py'} {PORTS['flask']} &",
            f"read done < {go}",
        ]
    )


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The five apps' host URLs, by name, from one running session."""
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
    assert (VITE_FIXTURE / "node_modules" / "vite").is_dir(), "./dev.sh setup installs Vite"
    work = tmp_path_factory.mktemp("real-apps")
    vite = work / "vite"
    vite.mkdir()
    for name in ("index.html", "main.js", "message.js", "vite.config.js", "package.json"):
        shutil.copy(VITE_FIXTURE / name, vite / name)
    (vite / "node_modules").symlink_to(VITE_FIXTURE / "node_modules")
    go = work / "go"
    os.mkfifo(go)
    ports = f"{min(PORTS.values())}-{max(PORTS.values())}"
    env = dict(os.environ, PATH=f"{APPS_VENV / 'bin'}:{os.environ['PATH']}")
    session = Process(
        run_argv(work, "sh", "-c", _script(go), options=("--publish", ports)), env=env
    )
    try:
        urls: dict[int, str] = {}
        while len(urls) < len(PORTS):
            line = session.wait_line("sandbridge: sandbox port", "stderr", START_SECONDS)
            session.lines["stderr"].remove(line)
            if match := PUBLISHED.match(line):
                urls[int(match[1])] = match[2]
        yield {name: urls[port] for name, port in PORTS.items()}
    finally:
        _release(go)
        assert session.popen.wait(60) == 0, session.drain("stderr")


def _release(go: Path) -> None:
    """Let the session's script end (if it still waits: a session that failed has no reader)."""
    try:
        fd = os.open(go, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"done\n")
    finally:
        os.close(fd)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def edit_in_place(path: Path, text: str) -> None:
    """Replace ``path``'s text by one of the same length in one write, never truncating:
    Vite's watcher read an edit made by ``write_text`` while the file was empty (truncated,
    not yet written), hot-reloaded a module without its export and never saw the text
    (the page showed nothing: once in a clean-clone run)."""
    data = text.encode()
    assert len(data) == path.stat().st_size, "an edit in place keeps the file's length"
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.write(fd, data) == len(data)
    finally:
        os.close(fd)


def test_vite_page_updates_in_place_when_a_module_changes(
    apps: dict[str, str], page: Page, tmp_path_factory: pytest.TempPathFactory
) -> None:
    page.goto(apps["vite"])
    expect(page.locator("#app")).to_have_text("vite says one", timeout=60_000)
    page.evaluate("window.sandbridgeMarker = 'same page'")
    message = next(tmp_path_factory.getbasetemp().glob("real-apps*/vite/message.js"))
    edit_in_place(message, 'export const message = "vite says two";\n')
    expect(page.locator("#app")).to_have_text("vite says two", timeout=30_000)
    # Hot reload, not a reload: the page's own state survived the change.
    assert page.evaluate("window.sandbridgeMarker") == "same page"


def test_streamlit_reruns_on_a_click(apps: dict[str, str], page: Page) -> None:
    page.goto(apps["streamlit"])
    expect(page.get_by_text("count=0")).to_be_visible(timeout=60_000)
    page.get_by_role("button", name="Count").click()
    expect(page.get_by_text("count=1")).to_be_visible(timeout=30_000)


def test_jupyterlab_loads_and_its_kernel_computes(apps: dict[str, str], page: Page) -> None:
    page.goto(f"{apps['jupyter']}lab?token={JUPYTER_TOKEN}")
    expect(page.locator(".jp-Launcher").first).to_be_visible(timeout=90_000)
    result = page.evaluate(
        """async (token) => {
          const headers = {Authorization: "token " + token};
          const made = await fetch("/api/kernels", {method: "POST", headers, body: "{}"});
          const kernel = await made.json();
          return await new Promise((resolve, reject) => {
            const url = `ws://${location.host}/api/kernels/${kernel.id}/channels?token=${token}`;
            const socket = new WebSocket(url);
            socket.onerror = () => reject(new Error("kernel WebSocket failed"));
            socket.onopen = () => socket.send(JSON.stringify({
              header: {msg_id: "m1", username: "test", session: "s1", date: "",
                       msg_type: "execute_request", version: "5.3"},
              parent_header: {}, metadata: {}, channel: "shell", buffers: [],
              content: {code: "6 * 7", silent: false, store_history: false,
                        user_expressions: {}, allow_stdin: false, stop_on_error: true},
            }));
            socket.onmessage = (event) => {
              const message = JSON.parse(event.data);
              if (message.msg_type === "execute_result") {
                resolve(message.content.data["text/plain"]);
                socket.close();
              }
            };
          });
        }""",
        JUPYTER_TOKEN,
    )
    assert result == "42"


def test_gradio_answers_through_its_queue(apps: dict[str, str], page: Page) -> None:
    page.goto(apps["gradio"])
    page.get_by_label("word").fill("sandbox", timeout=60_000)
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_label("reversed")).to_have_value("xobdnas", timeout=30_000)


def test_flask_fetch_post_and_redirect(apps: dict[str, str], page: Page) -> None:
    page.goto(apps["flask"])
    expect(page).to_have_title("flask: sandboxed", timeout=30_000)
    page.get_by_role("button", name="send").click()
    expect(page).to_have_title("done: ping", timeout=30_000)
    assert page.url == apps["flask"] + "done?word=ping"
