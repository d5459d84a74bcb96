"""Capture and replay: record what the IDE and the server said to each other (each agent RPC
stream as one redacted JSON file), and play a capture's client side against a server, diffing its
answers against the recording.

The gateway holds a `Capture` while capture is on (`sync_capture`) and hands it each request;
`cursor-byok capture ...` and `cursor-byok replay` are the commands. Protobuf and the replay client
are imported on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .settings import CaptureSettings, captures_dir, clear_active, read_active, write_active

if TYPE_CHECKING:
    from .control import Capture, sync_capture
    from .redact import Redactor
    from .replay import replay_files

__getattr__ = lazy_names(
    __name__,
    {
        "control": ("Capture", "sync_capture"),
        "redact": ("Redactor",),
        "replay": ("replay_files",),
    },
)

__all__ = [
    "Capture",
    "CaptureSettings",
    "Redactor",
    "captures_dir",
    "clear_active",
    "read_active",
    "replay_files",
    "sync_capture",
    "write_active",
]
