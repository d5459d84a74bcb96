"""Whether capture is on: one small file in the data dir, written by `cursor-byok capture start`,
removed by `stop`, read by the server when it starts and when the CLI tells it to look again.

A file rather than a flag held by the running server only: capture survives a restart (the start
banner says it is on), and `start` works before the server does.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import msgspec

__all__ = ["CaptureSettings", "captures_dir", "clear_active", "read_active", "write_active"]

_CAPTURES = "captures"
_ACTIVE = "active.json"


class CaptureSettings(msgspec.Struct, frozen=True):
    session: str  # the folder under captures/ this capture writes to
    with_content: bool = False

    @staticmethod
    def new(with_content: bool) -> CaptureSettings:
        return CaptureSettings(dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S"), with_content)


def captures_dir(data_path: Path) -> Path:
    return data_path / _CAPTURES


def read_active(data_path: Path) -> CaptureSettings | None:
    try:
        fields = json.loads((captures_dir(data_path) / _ACTIVE).read_text())
        return CaptureSettings(str(fields["session"]), bool(fields.get("with_content", False)))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent (or not ours to read): capture is off


def write_active(data_path: Path, settings: CaptureSettings) -> None:
    folder = captures_dir(data_path)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = folder / f".{_ACTIVE}.tmp"
    tmp.write_text(json.dumps(msgspec.structs.asdict(settings)))
    os.replace(tmp, folder / _ACTIVE)


def clear_active(data_path: Path) -> bool:
    """Capture off; whether it was on."""
    try:
        (captures_dir(data_path) / _ACTIVE).unlink()
        return True
    except FileNotFoundError:
        return False
