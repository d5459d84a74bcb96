"""The HTTP face of the server: RunSSE, BidiAppend, health and the upstream catch-all.

The app itself is imported on first use: `serve` listens and answers the health probe first, and
imports it in the background (`front.py`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .memory import Trimmer
from .serve import serve

if TYPE_CHECKING:
    from .app import Gateway, sweep_seconds
    from .peers import Peers

__getattr__ = lazy_names(__name__, {"app": ("Gateway", "sweep_seconds"), "peers": ("Peers",)})

__all__ = ["Gateway", "Peers", "Trimmer", "serve", "sweep_seconds"]
