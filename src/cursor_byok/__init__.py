"""cursor-byok: the Cursor IDE's agent backend, run locally on the user's own model keys."""
from __future__ import annotations

__version__ = "0.1.0"
