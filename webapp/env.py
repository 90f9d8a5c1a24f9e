"""Reading settings from the environment: every parser fails loudly, naming the variable and what it expects.

A typo such as DEBUG=ture must stop the process at start, not quietly fall back to a default.
"""
from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off")


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r} must be one of {', '.join(choices)}")
    return raw


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    """postgres://user:pass@host:port/name or sqlite:///absolute/path.db into a DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql", "pgsql"):
        name = unquote(parsed.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no database (postgres://user@host:5432/NAME)")
        try:
            port = parsed.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} has an invalid port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": dict(parse_qsl(parsed.query)),
            "CONN_MAX_AGE": 0,
        }
    if parsed.scheme == "sqlite":
        path = parsed.path or ""
        if not path or path == "/":
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no file (sqlite:////absolute/path.db)")
        return sqlite_database(path)
    raise ImproperlyConfigured(f"DATABASE_URL={url!r}: scheme must be postgres:// or sqlite://")


def sqlite_database(path: str) -> dict:
    # WAL lets pages read while the executor writes events; IMMEDIATE avoids "database is locked" upgrades.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


def check_redis_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(f"REDIS_URL={url!r}: scheme must be redis://, rediss:// or unix://")
    try:
        parsed.port
    except ValueError:
        raise ImproperlyConfigured(f"REDIS_URL={url!r} has an invalid port") from None
    return url
