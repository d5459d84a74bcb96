"""Context-size estimation and the tool-less summary request used for automatic compaction."""
from __future__ import annotations

from collections.abc import Sequence

from ..providers import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 1600  # a typical screenshot; base64 length says nothing about image tokens
MESSAGE_OVERHEAD_TOKENS = 4
FALLBACK_CHARS = 12_000  # kept verbatim when no summary can be produced
TOOL_RESULT_TRANSCRIPT_CHARS = 6_000  # per tool result inside the summary transcript
ARGUMENTS_TRANSCRIPT_CHARS = 1_500


def _message_size(message: Message) -> tuple[int, int]:
    """(characters, images) of one message as the model would read it."""
    chars = 0
    images = 0
    for part in message.parts:
        kind = type(part)
        if kind is TextPart or kind is ThinkingPart:
            chars += len(part.text)
        elif kind is ToolCallPart:
            chars += len(part.name) + len(part.arguments)
        elif kind is ToolResultPart:
            chars += len(part.content)
            images += len(part.images)
        elif kind is ImagePart:
            images += 1
    return chars, images


def estimate_tokens(messages: Sequence[Message], extra_chars: int = 0) -> int:
    chars = extra_chars
    images = 0
    for message in messages:
        c, i = _message_size(message)
        chars += c
        images += i
    return chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS + len(messages) * MESSAGE_OVERHEAD_TOKENS


class ContextEstimator:
    """Estimated prompt size: the provider's last reported input tokens for the messages that request
    carried, plus chars/4 for the messages added since. Without an anchor, chars/4 of everything."""

    def __init__(self, base_chars: int) -> None:
        self._base_chars = base_chars  # system prompt and tool schemas
        self._anchor_tokens: int | None = None
        self._anchor_count = 0

    def anchor(self, input_tokens: int, message_count: int) -> None:
        self._anchor_tokens = input_tokens
        self._anchor_count = message_count

    def reset(self) -> None:
        self._anchor_tokens = None
        self._anchor_count = 0

    def estimate(self, messages: Sequence[Message]) -> int:
        if self._anchor_tokens is None or self._anchor_count > len(messages):
            return estimate_tokens(messages, self._base_chars)
        return self._anchor_tokens + estimate_tokens(messages[self._anchor_count:])


# ---- summary transcript --------------------------------------------------------------------------
def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def _render(message: Message) -> str:
    lines: list[str] = []
    if message.role == "user":
        lines.append("### User")
        for part in message.parts:
            if type(part) is TextPart:
                lines.append(part.text)
            elif type(part) is ImagePart:
                lines.append("[image]")
    elif message.role == "assistant":
        lines.append("### Assistant")
        for part in message.parts:
            if type(part) is TextPart:
                lines.append(part.text)
            elif type(part) is ToolCallPart:
                lines.append(f"[tool call {part.name} {_clip(part.arguments, ARGUMENTS_TRANSCRIPT_CHARS)}]")
    else:
        for part in message.parts:
            if type(part) is ToolResultPart:
                status = "error" if part.is_error else "result"
                lines.append(f"### Tool {status} ({part.name})")
                lines.append(_clip(part.content, TOOL_RESULT_TRANSCRIPT_CHARS))
                lines.extend("[image]" for _ in part.images)
    return "\n".join(lines)


def summary_transcript(messages: Sequence[Message], budget_chars: int) -> str:
    """The conversation as plain text, trimmed from the front at user-turn boundaries to fit
    `budget_chars`; if even the last turn does not fit, its tail."""
    blocks = [_render(m) for m in messages]
    sizes = [len(b) + 2 for b in blocks]
    suffix = 0
    start = None
    for i in range(len(blocks) - 1, -1, -1):
        suffix += sizes[i]
        if suffix > budget_chars:
            break
        if messages[i].role == "user":
            start = i
    if start is not None:
        return "\n\n".join(blocks[start:])
    return "\n\n".join(blocks)[-budget_chars:]


def fallback_summary(transcript: str) -> str:
    return (
        "The earlier conversation could not be summarized. Its most recent part follows verbatim:\n\n"
        + transcript[-FALLBACK_CHARS:]
    )
