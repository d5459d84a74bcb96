"""Generated protobuf modules for Cursor's wire format (see protocols/generate.py)."""
