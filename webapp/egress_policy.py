"""The deployment's egress policy (egress/, docs/security.md "Outbound addresses") from its settings:
STUDIO_EGRESS_ALLOWED_HOSTS with STUDIO_MCP_ALLOWED_HOSTS merged in, and STUDIO_EGRESS_DENY_ALL. Installed as the
process's policy at start and whenever a test changes one of those settings, so the judging calls this process
makes (Test judge, the scenario generator, the playground, distillation) use it; passed to the engine child in
its environment (`egress_env`)."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.signals import setting_changed

import egress

SETTINGS = ("STUDIO_EGRESS_ALLOWED_HOSTS", "STUDIO_MCP_ALLOWED_HOSTS", "STUDIO_EGRESS_DENY_ALL")


def egress_entries() -> list[str]:
    return [*getattr(settings, "STUDIO_EGRESS_ALLOWED_HOSTS", []), *settings.STUDIO_MCP_ALLOWED_HOSTS]


def egress_policy() -> egress.Policy:
    return egress.Policy.from_entries(egress_entries(),
                                      deny_all=bool(getattr(settings, "STUDIO_EGRESS_DENY_ALL", False)))


def egress_install(**_: object) -> None:
    egress.install_policy(egress_policy())


def _changed(*, setting: str, **_: object) -> None:
    if setting in SETTINGS:
        egress_install()


setting_changed.connect(_changed, dispatch_uid="webapp.egress_policy")


def egress_env() -> dict[str, str]:
    """The policy as the engine child reads it (egress.policy_from_env); the older variable is folded in."""
    return {egress.ALLOWED_ENV: ",".join(egress_entries()), egress.MCP_ALLOWED_ENV: "",
            egress.DENY_ALL_ENV: "1" if getattr(settings, "STUDIO_EGRESS_DENY_ALL", False) else "0"}


def egress_refusal(url: str | None) -> str | None:
    """Why requests to `url` may not be sent, or None (blank: the provider's own default address, which no
    project member chose; a name that resolves to nothing now, e.g. on a machine without DNS, is left to the
    check at each connection)."""
    if not url:
        return None
    try:
        egress.check_url(url, egress_policy())
    except egress.EgressUnresolvable:
        return None  # nothing to check yet (or DNS is down): each connection checks again, and sends nothing
    except egress.EgressRefused as err:
        return f"this address is not allowed: {err}"
    return None


def egress_field_check(*, field: str, url: str | None) -> None:
    """ValidationError beside `field` unless requests to `url` may be sent."""
    if (refusal := egress_refusal(url)) is not None:
        raise ValidationError({field: [refusal]})
