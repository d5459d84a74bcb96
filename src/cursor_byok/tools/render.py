"""Model-facing text for tool results (kept plain and predictable)."""
from __future__ import annotations

__all__ = ["number_lines", "split_lines", "clip_middle", "decode_text", "IMAGE_MIME_BY_MAGIC", "sniff_image"]

# Leading bytes of the image formats providers accept as tool-result images.
IMAGE_MIME_BY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(data: bytes) -> str | None:
    for magic, mime in IMAGE_MIME_BY_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def split_lines(text: str) -> list[str]:
    """Lines without terminators; a final newline does not start another line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def number_lines(lines: list[str], first_line: int) -> str:
    """`     7|text` per line: 1-based numbers right-aligned to 6, then a bar."""
    return "\n".join(f"{number:>6}|{line}" for number, line in enumerate(lines, start=first_line))


def clip_middle(text: str, limit: int) -> str:
    """At most `limit` characters: head and tail kept, the middle replaced by a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    elided = len(text) - 2 * half
    return f"{text[:half]}\n... [{elided} characters elided] ...\n{text[-half:]}"


def decode_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
