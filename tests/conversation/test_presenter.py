"""RunPresenter: which frames of a run's updates leave at once."""
from __future__ import annotations

from cursor_byok.conversation.history import TurnLog
from cursor_byok.conversation.presenter import RunPresenter
from cursor_byok.run import ModelCycleFinished, ModelCycleStarted, TextDelta, ThinkingDelta


class Frames:
    """The presenter's `write_frame`: each frame, and whether it was to go at once."""

    def __init__(self) -> None:
        self.written: list[tuple[bytes, bool]] = []

    def __call__(self, frame: bytes, *, now: bool = False) -> None:
        self.written.append((frame, now))


def test_each_model_cycles_first_text_or_thinking_goes_at_once_the_rest_at_the_pass_end() -> None:
    frames = Frames()
    presenter = RunPresenter("run", None, lambda *messages: None, TurnLog("r1"), frames)
    for event in (ModelCycleStarted(1), TextDelta("a"), TextDelta("b"), ModelCycleFinished(1, "tool_use"),
                  ModelCycleStarted(2), ThinkingDelta("hm"), TextDelta("c")):
        presenter.present(event)
    assert [now for _, now in frames.written] == [False, True, False, False, True, False]
