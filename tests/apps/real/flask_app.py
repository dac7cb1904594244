"""Plain Flask, as a project would write it: a page whose script fetches a root-absolute
URL, a form POST answered with a root-absolute redirect. Run inside a sandbox by
tests/e2e/test_real_apps.py."""

from __future__ import annotations

import sys

from flask import Flask, jsonify, redirect, request
from werkzeug.wrappers import Response

app = Flask(__name__)

PAGE = """<!doctype html><title>flask: loading</title>
<form method="post" action="/echo"><input name="word" value="ping"><button>send</button></form>
<script>
fetch("/api/hello?x=sandboxed").then((r) => r.json()).then((j) => {
  document.title = "flask: " + j.hello;
});
</script>"""


@app.get("/")
def index() -> str:
    return PAGE


@app.get("/api/hello")
def hello() -> Response:
    return jsonify(hello=request.args["x"])


@app.post("/echo")
def echo() -> Response:
    return redirect("/done?word=" + request.form["word"])


@app.get("/done")
def done() -> str:
    return f"<!doctype html><title>done: {request.args['word']}</title>"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(sys.argv[1]))
