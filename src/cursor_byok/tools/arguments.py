"""Typed reads of a tool call's JSON arguments that collect problems instead of raising.

Every getter returns a usable default, so an invalid call can still be presented (its card shows
whatever was valid) while `errors` explains to the model what was wrong.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Arguments"]

_MISSING = object()
# Wire integers are int32 at most; larger values would not fit the protobuf fields.
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class Arguments:
    def __init__(self, raw: dict[str, Any] | None) -> None:
        self.raw: dict[str, Any] = raw if isinstance(raw, dict) else {}
        self.errors: list[str] = []

    def has(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def _get(self, name: str, required: bool) -> Any:
        value = self.raw.get(name, _MISSING)
        if value is _MISSING or value is None:
            if required:
                self.errors.append(f"missing required argument '{name}'")
            return _MISSING
        return value

    def string(self, name: str, *, required: bool = False, non_empty: bool = False) -> str | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # models sometimes send ids as numbers
        if not isinstance(value, str):
            self.errors.append(f"argument '{name}' must be a string")
            return None
        if non_empty and not value.strip():
            self.errors.append(f"argument '{name}' must not be empty")
        return value

    def text(self, name: str) -> str:
        """A required string that may be empty (file contents, replacement text)."""
        value = self.string(name, required=True)
        return value if value is not None else ""

    def integer(self, name: str, *, minimum: int | None = None) -> int | None:
        value = self._get(name, False)
        if value is _MISSING:
            return None
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
            number = int(value.strip())
        if number is None:
            self.errors.append(f"argument '{name}' must be an integer")
            return None
        if minimum is not None and number < minimum:
            self.errors.append(f"argument '{name}' must be at least {minimum}")
            return None
        if not _INT32_MIN <= number <= _INT32_MAX:
            self.errors.append(f"argument '{name}' is out of range")
            return None
        return number

    def boolean(self, name: str) -> bool | None:
        value = self._get(name, False)
        if value is _MISSING:
            return None
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.errors.append(f"argument '{name}' must be a boolean")
        return None

    def string_list(self, name: str, *, required: bool = False) -> list[str]:
        value = self._get(name, required)
        if value is _MISSING:
            return []
        if isinstance(value, str):
            return [value]  # a lone path where a list was expected is unambiguous
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.errors.append(f"argument '{name}' must be a list of strings")
            return []
        return list(value)

    def objects(self, name: str, *, required: bool = False) -> list[dict[str, Any]]:
        value = self._get(name, required)
        if value is _MISSING:
            return []
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            self.errors.append(f"argument '{name}' must be a list of objects")
            return []
        return list(value)

    def mapping(self, name: str, *, required: bool = False) -> dict[str, Any]:
        value = self._get(name, required)
        if value is _MISSING:
            return {}
        if not isinstance(value, dict):
            self.errors.append(f"argument '{name}' must be an object")
            return {}
        return value

    def choice(self, name: str, allowed: tuple[str, ...]) -> str | None:
        value = self.string(name)
        if value is not None and value not in allowed:
            self.errors.append(f"argument '{name}' must be one of {', '.join(allowed)}")
            return None
        return value
