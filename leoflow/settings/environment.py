"""Reading declared variables from an environment mapping, the one way both loaders do it.

A blank value means unset (the declared default); a value the declaration's parser rejects
raises :class:`~leoflow.errors.SettingsError` naming the variable, without echoing the value
when the variable may carry a secret. Kept apart from :mod:`.loader` so that the client verbs'
loader (:mod:`.client`) reads its variables the same way without importing the server's groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from leoflow.errors import SettingsError

if TYPE_CHECKING:
    from leoflow.settings.declared import Variable

T = TypeVar("T")


class EnvironmentReader:
    """Reads declared variables from one environment mapping; remembers which it read."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.read: set[str] = set()

    def raw(self, variable: Variable[object]) -> str | None:
        self.read.add(variable.name)
        value = self.env.get(variable.name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def prefixed(self, family: Variable[object]) -> tuple[tuple[str, str], ...]:
        """Every non-blank ``PREFIX_<NAME>`` variable of a declared family (name ``PREFIX_*``)."""
        self.read.add(family.name)
        prefix = family.name.rstrip("*")
        return tuple(sorted((k, val) for k, val in self.env.items()
                            if k.startswith(prefix) and len(k) > len(prefix) and val.strip()))

    def get(self, variable: Variable[T]) -> T:
        """The parsed value, or the declared default when unset or blank."""
        value = self.raw(variable)  # type: ignore[arg-type]
        if value is None:
            return variable.default
        try:
            return variable.parse(value)
        except ValueError as exc:
            shown = "" if variable.secret else f", got {value!r}"
            raise SettingsError(variable.name, f"{exc}{shown}") from None
