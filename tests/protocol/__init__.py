"""Tests of cursor_byok.protocol and the protocols/ generators."""
