"""The HTTP face of the server: RunSSE, BidiAppend, health and the upstream catch-all."""
from __future__ import annotations

from .app import Gateway, create_app, sweep_seconds
from .memory import Trimmer
from .serve import serve

__all__ = ["Gateway", "Trimmer", "create_app", "serve", "sweep_seconds"]
