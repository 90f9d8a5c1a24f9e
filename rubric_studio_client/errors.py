"""What the Studio API answered when it refused a request: one exception class per kind of refusal, each with the
HTTP status, the API's `detail` sentence and, for a malformed body, the refused fields."""
from __future__ import annotations

from typing import Any


class StudioError(Exception):
    """A request to Rubric Studio failed. `status` is the HTTP status (0: no answer), `detail` the API's
    explanation, `fields` the per-field messages of a 400 (empty otherwise)."""

    def __init__(self, status: int, detail: str, *, fields: dict[str, Any] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.fields = fields or {}
        named = "; ".join(f"{name}: {_text(messages)}" for name, messages in self.fields.items())
        super().__init__(f"{status} {detail}" + (f" ({named})" if named else ""))


class Unreachable(StudioError):
    """No answer: the web app is down, the address is wrong, or the connection broke."""


class Unauthorized(StudioError):
    """401: the token is unknown or revoked (create one on the project's Tokens page)."""


class Forbidden(StudioError):
    """403: the token belongs to another project than the run's, or its user may not roll out for it."""


class NotFound(StudioError):
    """404: no such run (or not one this token can see)."""


class Refused(StudioError):
    """The submission itself was refused; the subclasses say why. Sending it again unchanged fails again."""


class Invalid(Refused):
    """400: the body is malformed; `fields` names each refused field."""


class TooLarge(Refused):
    """413: the body is over the web app's size limit, or has too many trajectories or messages."""


class Unsampled(Refused):
    """422: an assistant turn in a trajectory is not an answer the model sampled through the run's endpoint (and
    the run does not allow unsampled turns). `detail` names the message."""


class StepClosed(StudioError):
    """409: the submission does not fit the run's current step: the step is closed (timed out, the run paused
    past it, was cancelled or ended), the group was already submitted, a trajectory id was used before, or its
    calls were sampled with another step's adapter. `detail` says which."""


class RateLimited(StudioError):
    """429: too many requests; `retry_after_s` is the server's hint (None when it gave none)."""

    def __init__(self, status: int, detail: str, *, retry_after_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(status, detail, **kwargs)
        self.retry_after_s = retry_after_s


class ServerError(StudioError):
    """5xx: the web app failed; retrying later may work."""


_BY_STATUS: dict[int, type[StudioError]] = {400: Invalid, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                            409: StepClosed, 413: TooLarge, 422: Unsampled, 429: RateLimited}


def error_for(status: int, body: Any, *, retry_after: str | None = None) -> StudioError:
    """The exception for an error answer: `body` is the parsed JSON (`{"detail": ..., <field>: [...]}`) or text."""
    if isinstance(body, dict):
        detail = _text(body.get("detail")) or "the request was refused"
        fields = {k: v for k, v in body.items() if k != "detail"}
    else:
        detail, fields = (str(body).strip()[:500] or f"HTTP {status}"), {}
    if status == 429:
        return RateLimited(status, detail, fields=fields, retry_after_s=_seconds(retry_after))
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else StudioError)
    return cls(status, detail, fields=fields)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
