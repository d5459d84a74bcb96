"""Local vs upstream: the seqno-0 run request's model decides (local models and their variant ids)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import protocol  # its protobuf helpers load on first use (after the server listens)
from ..config import Config
from ..protocol import ConnectError
from .transport import Route

if TYPE_CHECKING:  # protobuf: not loaded before the server listens (the probe's answer needs these paths)
    from ..protocol import agent_pb2 as pb

HEALTH_PATHS = frozenset({"/__byok-api__/healthz", "/healthz"})
UI_PREFIX = "/ui/"  # the dashboard and its API (/ui/api/): local only, behind the same guard
UI_PATH = "/ui"  # redirected to UI_PREFIX
ROOT_PATH = "/"  # a person's browser or curl (not through the proxy): where the dashboard is
METRICS_PATH = "/metrics"  # Prometheus text format


def route_for(message: pb.AgentClientMessage, config: Config) -> Route:
    """Route of a transport from its seqno-0 message; ConnectError if it does not select a model."""
    from ..protocol import which

    return route_of(which(message, "message"), message, config)


def route_of(variant: str | None, message: pb.AgentClientMessage, config: Config) -> Route:
    """`route_for` a message whose oneof member `variant` is known already (a decoded append's)."""
    if variant != "run_request":
        raise ConnectError("invalid_argument", "first BidiAppend message must select a model")
    model_id = protocol.requested_model_id(message.run_request)
    if not model_id:
        raise ConnectError("invalid_argument", "first BidiAppend message must select a model")
    return Route.LOCAL if config.model(model_id) is not None else Route.UPSTREAM
