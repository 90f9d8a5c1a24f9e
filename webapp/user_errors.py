"""What a person reads when something failed: the engine's, the judge's and litellm's messages are written for
developers ("TrainingError … litellm.InternalServerError … OpenAIException"). Every page that shows an error
passes it through `user_error`, which says what happened and what to do in the pages' words; the original text
stays available, folded, as the technical details. The one place that maps errors to user text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class UserError:
    what: str  # what happened, one sentence
    todo: str  # what to do about it ("" when the sentence says it already)
    details: str  # the original text, for the folded technical details ("" when nothing more to show)


# First match wins, so the specific rules come before the general ones. Matched against the whole raw text; the
# judge's errors read "judge MODEL: KIND ..." (judging/llm.py), so a rule about the judge's API keys on that.
_RULES: list[tuple[re.Pattern[str], str, str]] = [(re.compile(p, re.S), what, todo) for p, what, todo in [
    (r"has no env reward|needs a judge",
     "This agent's answers have no reward of their own, and the run has no judge to score them.",
     "Launch the run again with a judge chosen in the form (or give the agent an environment with its own reward)."),
    (r"rejected the credentials|judge \S+: AuthenticationError",
     "The judge's API refused its key.",
     "Fix the key (or the environment variable that holds it) on the judge's page, use Test judge there, then "
     "try again."),
    (r"does not know this model|judge \S+: NotFoundError",
     "The judge's API does not know this model or address.",
     "Check the judge's model name and API base URL on its page, use Test judge there, then try again."),
    (r"did not reply with usable scenarios",
     "The judge's model did not send back scenarios in the form this page needs.",
     "Try again, or choose a judge whose model supports structured (JSON) replies."),
    (r"gave no usable reply",
     "The judge answered, but its replies could not be read as scores.",
     "Choose a stronger judge model, or one that supports structured (JSON) replies; Test judge on the judge's "
     "page shows a sample reply."),
    (r"the judge API rejected the request|judge \S+: BadRequestError",
     "The judge's API rejected the request.",
     "Check the judge's model name and settings on its page; the model must support structured (JSON) replies."),
    (r"judge \S+: \w+ persisted after \d+ retr|judge \S+: (InternalServerError|ServiceUnavailableError|"
     r"BadGatewayError|APIConnectionError|RateLimitError|Timeout)",
     "The judge's API could not be reached or kept failing (server error, timeout or rate limit).",
     "Check that the judge's server is up and its API base URL is right (Test judge on the judge's page), then "
     "try again; a failed run resumes from its last checkpoint."),
    (r"McpServerDidNotStart",
     "The MCP server did not start, or could not be reached, within its time.",
     "Check the server's command or URL on its page (is it running? does the command exist on the workers?), "
     "then use Test connection; the technical details end with what the server printed."),
    (r"McpHostNotAllowed",
     "The web server may not connect to this MCP server's address.",
     "Loopback and private addresses need an entry in STUDIO_MCP_ALLOWED_HOSTS (set by the administrator); "
     "link-local addresses such as cloud metadata endpoints are never allowed. The details name the address."),
    (r"McpInvalidToolSchema",
     "The MCP server lists a tool a model cannot be given (an invalid input schema or tool name).",
     "Fix that tool's name or input schema in the server; the technical details name the tool."),
    (r"McpServerTimeout",
     "The MCP server stopped answering: a tool call took longer than the per-call timeout.",
     "Check the server, or raise the per-call timeout on the server's page."),
    (r"McpServerCrashed",
     "The MCP server went away in the middle of its work (the process died or the connection dropped).",
     "Read the technical details for what it printed, fix the server, then use Test connection."),
    (r"McpProtocolError",
     "The MCP server sent something that is not MCP (e.g. it prints to its standard output).",
     "A stdio server must write only MCP messages to its standard output; log to standard error instead."),
    (r"rollouts failed in step",
     "The agent's model failed to answer too many scenarios.",
     "Read the technical details for the first failure; a failed run resumes from its last checkpoint."),
    (r"(?i:out of memory)|OutOfMemoryError",
     "The machine ran out of memory.",
     "Lower the group size, the groups per step or the agent's max tokens, then resume."),
]]

# Signs that a text was written for a developer: exception class names, library names, pydantic's links.
_DEVELOPER = re.compile(r"\b\w+(Error|Exception)\b|litellm|pydantic|Traceback|validation error for|\{'|\[type=",
                        re.S)


def user_error(raw: object) -> UserError:
    """`raw`: an exception or its text. A text that already reads as a sentence for people is kept as it is
    (its first line shown, the rest folded)."""
    text = str(raw or "").strip()
    if not text:
        return UserError("", "", "")
    for pattern, what, todo in _RULES:
        if pattern.search(text):
            return UserError(what, todo, text)
    first, _, rest = text.partition("\n")
    # The engine's own errors are written to be acted on: without their class name they read as sentences.
    first = re.sub(r"^(TrainingError|JudgeError): ", "", first)
    if not _DEVELOPER.search(first):
        return UserError(first, "", text if rest.strip() or first != text else "")
    return UserError("Something failed that this page cannot explain.",
                     "The technical details below say what; if they do not help, ask whoever runs this server.",
                     text)
