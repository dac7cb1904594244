"""Egress requests from inside a sandbox, step by step.

Usage: egress_asker.py FIFO STEPS_JSON, where STEPS_JSON is a list of steps:
``["fetch", NAME, URL]`` (curl through the proxy), ``["ask", NAME, ARG...]``
(``sandbridge-allow ARG...``), ``["flood", NAME, COUNT]`` (COUNT ``--no-wait`` requests
for distinct names), ``["wait"]`` (read one line from FIFO: the test says go on). Each
step but ``wait`` prints ``STEP <name> <result>`` on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def curl(url: str) -> str:
    """curl through the proxy the sandbox's environment names (as egress_probes does)."""
    result = subprocess.run(
        ["curl", "-sS", "-m", "20", "-o", "-", "-w", "\nstatus=%{http_code}", url],
        capture_output=True,
        text=True,
        check=False,
    )
    body, _, status = result.stdout.rpartition("\n")
    return f"{status} rc={result.returncode} body={body.strip()[:400]!r}"


def ask(*args: str) -> str:
    result = subprocess.run(
        ["sandbridge-allow", *args], capture_output=True, text=True, check=False, timeout=120
    )
    return json.dumps(
        {"rc": result.returncode, "out": result.stdout.strip(), "err": result.stderr.strip()}
    )


def flood(count: int) -> str:
    outcomes = [json.loads(ask(f"flood{n}.test", "--reason", "flood", "--no-wait"))
                for n in range(count)]  # fmt: skip
    return json.dumps(outcomes)


def main() -> int:
    fifo, steps = Path(sys.argv[1]), json.loads(sys.argv[2])
    for step in steps:
        kind = step[0]
        if kind == "wait":
            with fifo.open() as file:
                file.readline()
            continue
        if kind == "fetch":
            result = curl(step[2])
        elif kind == "ask":
            result = ask(*step[2:])
        elif kind == "flood":
            result = flood(int(step[2]))
        else:
            raise SystemExit(f"unknown step {kind!r}")
        print(f"STEP {step[1]} {result}", flush=True)
    print("STEPS DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
