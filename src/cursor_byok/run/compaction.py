"""Context-size estimation and the tool-less summary request used for automatic compaction."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from ..providers import (
    ImagePart,
    KeyedMessages,
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
    return _tokens(chars, images, len(messages))


def _tokens(chars: int, images: int, messages: int) -> int:
    return chars // CHARS_PER_TOKEN + images * IMAGE_TOKENS + messages * MESSAGE_OVERHEAD_TOKENS


class ContextEstimator:
    """Estimated prompt size of a history's messages plus a run's system prompt and tool schemas:
    the provider's last reported input tokens for the messages that request carried, plus chars/4
    for the messages added since; without such a count, chars/4 of everything.

    Kept with the history across its runs: the sizes of the messages it has seen stay summed while
    the history extends them (append-only between compactions, which reset it), so a run's first
    estimate sizes only the messages added since the previous one, not the whole conversation. A
    count is only used for the model (tokenizer) and the system prompt and tools it was taken with."""

    __slots__ = ("_base_chars", "_tokenizer", "_count", "_chars", "_images", "_last", "_anchor", "sized")

    def __init__(self) -> None:
        self._base_chars = 0  # system prompt and tool schemas of the current run
        self._tokenizer: Hashable = None
        self._count = 0  # the first `_count` messages are summed: their characters and images
        self._chars = 0
        self._images = 0
        self._last: object = None  # what names the last of them (see `_marks`)
        # The provider's count: (input tokens, messages, their chars, their images, base chars, tokenizer).
        self._anchor: tuple[int, int, int, int, int, Hashable] | None = None
        self.sized = 0  # messages sized, over every run: each once while the history only grows

    def for_run(self, base_chars: int, tokenizer: Hashable) -> None:
        """A run starts: its system prompt and tool schemas' size, and what tokenizes them."""
        self._base_chars, self._tokenizer = base_chars, tokenizer

    def reset(self) -> None:
        """The history's messages no longer start with those seen (a compaction restarted them)."""
        self._count = self._chars = self._images = 0
        self._last = self._anchor = None

    def estimate(self, messages: Sequence[Message]) -> int:
        self._extend(messages)
        anchor = self._anchor
        if anchor is None or anchor[4:] != (self._base_chars, self._tokenizer):
            return _tokens(self._base_chars + self._chars, self._images, self._count)
        tokens, count, chars, images = anchor[:4]
        return tokens + _tokens(self._chars - chars, self._images - images, self._count - count)

    def anchor(self, input_tokens: int, messages: Sequence[Message]) -> None:
        """The provider counted `input_tokens` for a request carrying these messages."""
        self._extend(messages)
        self._anchor = (input_tokens, self._count, self._chars, self._images, self._base_chars, self._tokenizer)

    def _extend(self, messages: Sequence[Message]) -> None:
        """Sum the messages past those summed; all of them again when these do not extend those."""
        count, total = self._count, len(messages)
        mark = _marks(messages)
        if count and (total < count or not _same(self._last, mark(count - 1))):
            self.reset()
            count = 0
        if count == total:
            return
        for index in range(count, total):
            chars, images = _message_size(messages[index])
            self._chars += chars
            self._images += images
        self.sized += total - count
        self._count = total
        self._last = mark(total - 1)


def _marks(messages: Sequence[Message]) -> Callable[[int], object]:
    """What names a message by its index: its key when the messages are keyed (a history's are, and
    a stored message is decoded afresh for each reader), else the message object itself."""
    return messages.key if isinstance(messages, KeyedMessages) else messages.__getitem__


def _same(mark: object, other: object) -> bool:
    return mark == other if isinstance(mark, str) else mark is other


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
