"""cursor-byok: the Cursor IDE's agent backend, run locally on the user's own model keys."""
from __future__ import annotations

import sys

__version__ = "0.1.0"

# httpx imports its command-line client (click, pygments, rich: 20-60 ms at start) whenever those
# happen to be installed, and nothing here uses it. A None entry makes that one import fail, which
# httpx handles by defining a stub `httpx.main` instead.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
