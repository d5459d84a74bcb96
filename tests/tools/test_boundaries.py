from __future__ import annotations

import subprocess
import sys


def test_tools_do_not_import_the_conversation_runtime():
    code = (
        "import sys, cursor_byok.tools;"
        "bad = sorted(m for m in sys.modules if m.startswith('cursor_byok.conversation'));"
        "print(','.join(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
