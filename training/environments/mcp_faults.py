"""The named faults of an MCP server (training/environments/mcp_session.py raises them): each a `McpServerError`,
a `TrainingError`, so at launch one refuses the run, and mid-run the environment turns one into an error on that
trajectory only."""
from __future__ import annotations

from training.types import TrainingError


class McpServerError(TrainingError):
    """A fault of an MCP server; the subclass names which."""


class McpServerDidNotStart(McpServerError):
    pass


class McpServerTimeout(McpServerError):
    pass


class McpStartTimeout(McpServerDidNotStart):
    """Started (or reached), but no handshake and tool listing within startup_timeout_s."""


class McpServerExited(McpServerDidNotStart):
    """A stdio server that ended before it answered: its exit code and last stderr line."""


class McpNotMcp(McpServerDidNotStart):
    """A URL that answers, but not as an MCP endpoint (a 404, an HTML page, another content type)."""


class McpProgramNotMcp(McpServerDidNotStart):
    """A stdio program that writes text that is not JSON-RPC to its standard output where the handshake's answer
    belongs: not an MCP server (or a server that logs to stdout)."""


class McpToolsTooLarge(McpServerError):
    pass


class McpServerCrashed(McpServerError):
    pass


class McpProtocolError(McpServerError):
    pass


class McpInvalidUtf8(McpProtocolError):
    pass


class McpInvalidToolSchema(McpServerError):
    pass
