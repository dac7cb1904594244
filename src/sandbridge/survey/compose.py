"""Compose files for the survey: services, the host ports they publish, their images and
the *names* of their environment variables.

A compose file is YAML in all its forms (block and flow style, ``ports: ["5432:5432"]``,
quoting, anchors), so it is read with PyYAML's safe composer: a tree of nodes that keeps
each value's line, in which no tag is constructed and no code can run. Only the nodes
under ``services`` that say where the sandbox goes are looked at, within a budget, so an
alias repeated a million times (a "billion laughs" file) costs no more than the budget;
a value is never taken, only the names around it.
"""

from __future__ import annotations

import re

import yaml

from sandbridge.project.policy import ENV_NAME
from sandbridge.survey.findings import Finding, Kind
from sandbridge.survey.packages import numbered

MAX_PORT = 65535
# Nodes under ``services`` looked at in one file: a large stack's services, ports and
# variables; aliases that repeat one list without end are cut here.
MAX_COMPOSE_NODES = 10_000
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)")
# libyaml's safe loader where PyYAML has it (its wheels do): about six times faster than
# the pure-Python one on a megabyte file, and libyaml refuses nesting past 1,000 levels;
# the pure-Python one stops at Python's recursion limit instead (RecursionError).
_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(
    yaml, "CSafeLoader", yaml.SafeLoader
)


def published_port(spec: str) -> int | None:
    """The host port of a short ``ports:`` entry (``[IP:]HOST:CONTAINER[/proto]``)."""
    spec = spec.strip().split("/", 1)[0]
    if ":" not in spec:
        return None  # a container port alone is published on a random host port
    host_part = spec.rsplit(":", 1)[0]
    host_port = host_part.rsplit(":", 1)[-1].strip("[]")
    return _port(host_port)


def _port(text: str) -> int | None:
    if not text.isdigit():
        return None  # a range, a variable or an address without a port
    port = int(text)
    return port if 0 < port <= MAX_PORT else None


def _tree(text: str) -> yaml.Node | None:
    """The file's one document as nodes; ``None`` if it is not one YAML document (or is
    nested past the stack)."""
    try:
        return yaml.compose(text, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return None


class _Budget:
    """Counts the nodes a walk looks at; past :data:`MAX_COMPOSE_NODES` it yields none."""

    def __init__(self) -> None:
        self.left = MAX_COMPOSE_NODES

    def items(self, node: yaml.Node) -> list[yaml.Node]:
        """A sequence's items, or a mapping's keys, as far as the budget goes."""
        if isinstance(node, yaml.SequenceNode):
            found = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            found = [key for key, _ in node.value]
        else:
            return []
        taken = found[: max(0, self.left)]
        self.left -= len(taken)
        return taken

    def pairs(self, node: yaml.Node) -> list[tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            return []
        taken = list(node.value[: max(0, self.left)])
        self.left -= len(taken)
        return taken


def _scalar(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def read_compose(path: str, text: str) -> list[Finding]:
    """Services, their published host ports (host services), images, environment variable
    names, and the names ``${VAR}`` interpolates."""
    found = [
        Finding(Kind.VARIABLE, name, f"{path}:{number}", "compose interpolation")
        for number, line in numbered(text)
        for name in _INTERPOLATION.findall(line)
    ]
    tree = _tree(text)
    budget = _Budget()
    top = budget.pairs(tree) if tree is not None else []
    services = next((value for key, value in top if _scalar(key) == "services"), None)
    if services is None:
        return found
    for key, service in budget.pairs(services):
        name = _scalar(key) or ""
        fields = {_scalar(k): v for k, v in budget.pairs(service)}
        image = _scalar(fields["image"]) if "image" in fields else None
        if image:
            where = f"{path}:{fields['image'].start_mark.line + 1}"
            found.append(Finding(Kind.IMAGE, image, where, f"compose service {name}"))
        what = f"compose service {name} publishes it" + (f" ({image})" if image else "")
        for item in budget.items(fields["ports"]) if "ports" in fields else []:
            published = _item_port(item, budget)
            if published is not None:
                port, node = published
                where = f"{path}:{node.start_mark.line + 1}"
                found.append(Finding(Kind.SERVICE, str(port), where, what, port=port))
        for item in budget.items(fields["environment"]) if "environment" in fields else []:
            variable = (_scalar(item) or "").split("=", 1)[0].strip()
            if ENV_NAME.fullmatch(variable):
                where = f"{path}:{item.start_mark.line + 1}"
                found.append(Finding(Kind.VARIABLE, variable, where, f"compose service {name}"))
    return found


def _item_port(item: yaml.Node, budget: _Budget) -> tuple[int, yaml.Node] | None:
    """The host port one ``ports:`` item publishes (``"8080:80"``, ``{published: 8080}``)
    and the node whose line names it."""
    spec = _scalar(item)
    if spec is not None:
        port = published_port(spec)
        return None if port is None else (port, item)
    for key, value in budget.pairs(item):
        if _scalar(key) == "published":
            port = _port((_scalar(value) or "").strip())
            return None if port is None else (port, value)
    return None
