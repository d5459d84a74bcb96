"""The generated protobuf modules, under the names the `protocol` façade gives them."""
from __future__ import annotations

from .pb import agent_v1_pb2 as agent_pb2
from .pb import aiserver_side_v1_pb2 as side_pb2
from .pb import aiserver_v1_pb2 as aiserver_pb2

__all__ = ["agent_pb2", "aiserver_pb2", "side_pb2"]
