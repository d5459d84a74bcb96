"""Queued write ops: the base class's contract and a batch's grouping into statements."""
from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.store.bindings import BindRequest
from cursor_byok.store.conversations import StartRun
from cursor_byok.store.history import AppendEvents
from cursor_byok.store.ops import Barrier, BatchContext, RowWrite, Stage, Statement, WriteOp, group_statements


def test_a_write_op_without_plan_or_describe_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="NoPlan must define plan"):
        class NoPlan(WriteOp):  # noqa: F841 - defining it is the test
            def describe(self) -> str:
                return "no plan"

    with pytest.raises(TypeError, match="Bare must define describe and plan"):
        class Bare(WriteOp):  # noqa: F841
            pass


def test_a_complete_write_op_is_a_plain_class() -> None:
    class Complete(WriteOp):
        __slots__ = ()

        def describe(self) -> str:
            return "complete"

        def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
            return 1

    op = Complete()
    assert op.describe() == "complete"
    assert not isinstance(op, Barrier) and isinstance(Barrier(), WriteOp)
    assert type(WriteOp) is type  # no ABC: `isinstance(op, Barrier)` per op stays a C check


def test_statements_group_by_table_in_foreign_key_order_keeping_queue_order() -> None:
    out: list[Statement] = []
    for op in (
        RowWrite("event 1", Stage.EVENTS, "E", (1,)),
        RowWrite("run", Stage.RUNS, "R", (2,)),
        RowWrite("event 2", Stage.EVENTS, "E", (3,)),
        RowWrite("retention", Stage.RETENTION, "X", (4,)),
        RowWrite("conversation", Stage.CONVERSATIONS, "C", (5,)),
    ):
        op.plan(None, out)  # type: ignore[arg-type] - a row write reads no batch state
    assert group_statements(out) == [("C", [(5,)]), ("R", [(2,)]), ("E", [(1,), (3,)]), ("X", [(4,)])]


def test_only_ops_that_name_probe_keys_are_asked_for_them() -> None:
    class Bound(WriteOp):
        __slots__ = ()

        def describe(self) -> str:
            return "bound"

        def binding_keys(self) -> tuple[str, ...]:
            return ("r",)

        def plan(self, ctx: BatchContext, out: list[Statement]) -> Any:
            return None

    assert Bound.keyed and AppendEvents.keyed and BindRequest.keyed and StartRun.keyed
    assert not RowWrite.keyed and not Barrier.keyed
