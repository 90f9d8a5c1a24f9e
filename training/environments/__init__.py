"""The environment registry. Built in: `chat`, `tools`, `game_2048`, `mcp`, `external` and the games; add yours with
`register`. Beside them: a run's scenarios (`scenarios`) and the guard on the programs an environment starts
(`process_guard`). Imports training's top modules only."""
from __future__ import annotations

from typing import Callable

from pydantic import ValidationError

from training.environments.base import Environment, RolloutConfig
from training.types import TrainingError

_REGISTRY: dict[str, type[Environment]] = {}


def register(name: str) -> Callable[[type[Environment]], type[Environment]]:
    def add(cls: type[Environment]) -> type[Environment]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise TrainingError(f"an environment named {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def _load_builtins() -> None:
    # They register themselves.
    from training.environments import (chat, codenames, external, game_2048, mcp, temporal_clue,  # noqa: F401
                                       tictactoe, tools)


def get_environment(name: str) -> Environment:
    _load_builtins()
    if name not in _REGISTRY:
        raise TrainingError(f"unknown environment {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def needs_judge(name: str, options: dict) -> bool:
    """True when the environment says its rollouts carry no reward of their own with these options."""
    _load_builtins()
    cls = _REGISTRY.get(name)
    return cls is not None and cls.has_own_reward(options) is False


def environment_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def parse_options(env: Environment, options: dict) -> object:
    try:
        return env.Options.model_validate(options)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise TrainingError(f"invalid options for environment {env.name!r}: {problems}") from None


__all__ = ["Environment", "RolloutConfig", "register", "get_environment", "needs_judge", "environment_names", "parse_options"]
