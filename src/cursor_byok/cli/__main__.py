"""`python -m cursor_byok.cli`: the same as the `cursor-byok` console script."""
from __future__ import annotations

import sys

from . import main

sys.exit(main())
