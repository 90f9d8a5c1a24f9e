"""The mailbox's MCP tools, written with the MCP SDK's server side (MCPServer)."""
from __future__ import annotations

import functools
import json
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from training.environments.mailbox_server.mailbox import Mailbox, generate

INSTRUCTIONS = ("A company mailbox. Find the email that answers the question with search_inbox, read it with "
                "read_email, then call answer with the answer and the ids of the emails it comes from.")


def _search_shape(
    keywords: Annotated[str, Field(description="Words that must all appear in the subject or body.")] = "",
    sender: Annotated[str | None, Field(alias="from", description="Part of the sender's address.")] = None,
    to: Annotated[str | None, Field(description="Part of the recipient's address.")] = None,
    before: Annotated[str | None, Field(description="Only emails dated before this ISO date.")] = None,
    after: Annotated[str | None, Field(description="Only emails dated after this ISO date.")] = None,
) -> str:
    """Search the inbox; returns up to 10 matches (id, from, date, subject) as JSON."""
    raise NotImplementedError  # only its signature is used: `from` is a Python keyword


def build_server(*, seed: int = 0, count: int = 300) -> MCPServer:
    emails, _ = generate(seed, count)
    mailbox = Mailbox(emails)
    server = MCPServer("mailbox", instructions=INSTRUCTIONS, log_level="WARNING")

    @functools.wraps(_search_shape)
    def search_inbox(**given: str | None) -> str:
        # The SDK passes the argument as `from`; Python cannot name a parameter that.
        return json.dumps(mailbox.search(keywords=given.get("keywords") or "", sender=given.get("from"),
                                         to=given.get("to"), before=given.get("before"), after=given.get("after")))

    def read_email(id: Annotated[str, Field(description="An email id from search_inbox.")]) -> str:  # noqa: A002
        """Read one email: from, to, date, subject and body as JSON."""
        email = mailbox.read(id)
        if email is None:
            raise ToolError(f"no email with id {id!r}")
        return json.dumps(email)

    def answer(text: Annotated[str, Field(description="The answer to the question.")],
               sources: Annotated[list[str], Field(description="Ids of the emails the answer comes from.")]) -> str:
        """Give the final answer with the ids of the emails it comes from. Ends the task."""
        return "answer recorded"

    server.tool(name="search_inbox")(search_inbox)
    server.tool()(read_email)
    server.tool()(answer)
    return server
