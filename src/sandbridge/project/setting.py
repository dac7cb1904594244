"""A setting's value and where it came from: the project's config, the owner's, a flag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

DEFAULT = "default"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """A value and where it came from (``.sandbridge/config:3``, ``--net``, ``default``)."""

    value: T
    source: str
