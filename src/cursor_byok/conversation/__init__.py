"""The conversation domain: identities, bindings, the single-writer runtime, output, history."""
from __future__ import annotations

from .identity import ParentConversationRef, new_run_id
from .intake import AppendIntake, AppendOrder, Keep, fingerprint
from .observation import NO_OBSERVER, NoObserver, ObservedRun, ObservedTool, RunObserver
from .output import OutputHub, OutputStream, ReadResult, ReplayUnavailable
from .registry import Binding, BindingConflict, BindKind, Registry
from .data import RuntimeServices
from .runtime import ConversationRuntime
from .service import ConversationService, OpenedRun
from .state import TRANSITIONS, IllegalTransition, Outcome, Phase, check_transition

__all__ = [
    "TRANSITIONS",
    "AppendIntake",
    "AppendOrder",
    "Binding",
    "BindKind",
    "BindingConflict",
    "ConversationRuntime",
    "ConversationService",
    "IllegalTransition",
    "Keep",
    "NO_OBSERVER",
    "NoObserver",
    "ObservedRun",
    "ObservedTool",
    "OpenedRun",
    "Outcome",
    "OutputHub",
    "OutputStream",
    "ParentConversationRef",
    "Phase",
    "ReadResult",
    "Registry",
    "ReplayUnavailable",
    "RunObserver",
    "RuntimeServices",
    "check_transition",
    "fingerprint",
    "new_run_id",
]
