"""aep: a Python client of the Agent-Environment Protocol for the aep host.

    import aep
    with aep.Client.stdio(token="...", caps=["tools"]) as c:
        print(c.tool_list().tools)

Message models (generated from gen/contract/aep.schema.json) are in
``aep.models``; typed methods return them. See sdk/python/README.md.
"""

from . import _models as models
from ._models import AgentMessage, ErrorCode, EventMessage, HostMessage
from .client import AsyncClient, Call, Client, Forks, Move, SyncCall
from .errors import (AEPError, ConnectionClosed, HandshakeError, MoveFailed, NoSnapshot, PointGap, ProtocolError,
                     RequestInterrupted, RequestTimeout, SessionLost, SessionTerminated)
from .transports import HTTPTransport, StdioTransport, Transport, WebSocketTransport

__version__ = "0.1.0"

__all__ = [
    "AEPError", "AgentMessage", "AsyncClient", "Call", "Client", "ConnectionClosed", "ErrorCode",
    "EventMessage", "Forks", "HTTPTransport", "HandshakeError", "HostMessage", "Move", "MoveFailed", "NoSnapshot", "PointGap", "ProtocolError",
    "RequestInterrupted", "RequestTimeout", "SessionLost", "SessionTerminated", "StdioTransport", "SyncCall", "Transport", "WebSocketTransport", "models",
]
