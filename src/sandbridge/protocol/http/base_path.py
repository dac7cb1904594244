"""The base-path rule of the accepted contract.

An app registered under a base path such as ``/app`` is served at
``http://127.0.0.1:<port>/app``; its pages still use root-absolute URLs like
``/styles.css``. The rule: base ``/`` forwards every path unchanged; otherwise a
root-absolute path gets the base prepended unless it already is the base or lies
under it (``/app``, ``/app/...``, ``/app?...``). The rule is idempotent, so a peer
that applies it again changes nothing.
"""

from __future__ import annotations


def apply_base_path(target: str, base_path: str) -> str:
    """Return the path the app sees for browser request-target ``target``."""
    if base_path == "/":
        return target
    if target == base_path or target.startswith((base_path + "/", base_path + "?")):
        return target
    return base_path + target
