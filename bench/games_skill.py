"""Skill apart from format, counted from game records (bench/games_measure.py, docs/examples.md). Pure functions.

A win over the base can come from the answer format alone: the base's malformed moves lose, its malformed answers
score nothing. So each count here is over well-formed play only, beside the share of games that were well-formed:
- Tic Tac Toe: win, draw and loss rates among the games the agent never fouled (against the random player, a rise
  in wins; against the perfect player, who never loses, draws are the skill);
- Codenames: the words the guesser found per clue it answered in form (a clue whose answer was malformed ended the
  game: that clue is left out, the rounds before it count);
- Temporal Clue: the share of questions right among well-formed answers.

A game record is what the environment leaves on the trajectory of the seat measured (Trajectory.to_dict()'s
`env_reward` and `metadata`): `well_formed` (Tic Tac Toe, Temporal Clue), `found`, `clues` and `ended` (Codenames).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Tic Tac Toe's env reward per outcome for the side measured (training/environments/tictactoe.py: side_reward).
OUTCOMES = {1.0: "win", 0.5: "draw", 0.0: "loss"}


def _formed(game: Mapping[str, Any]) -> bool:
    return bool((game.get("metadata") or {}).get("well_formed"))


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 3) if whole else None


def tictactoe_skill(games: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Games played, the share well-formed, and win / draw / loss rates among the well-formed games only."""
    games = list(games)
    formed = [g for g in games if _formed(g) and g.get("env_reward") is not None]
    counts = {name: 0 for name in OUTCOMES.values()}
    for g in formed:
        counts[OUTCOMES[float(g["env_reward"])]] += 1
    return {"games": len(games), "well_formed": _share(len(formed), len(games)),
            **{name: _share(n, len(formed)) for name, n in counts.items()}}


def codenames_skill(games: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Games played, the share that no malformed or refused reply ended, and the guesser's words found per clue
    it answered in form (our words it revealed / those clues)."""
    games = list(games)
    clues = found = malformed = 0
    for g in games:
        meta = g.get("metadata") or {}
        ended = str(meta.get("ended") or "")
        fouled = ended.startswith(("spymaster:", "guesser:"))
        malformed += fouled
        # The clue the guesser did not answer in form found nothing by skill: it is not counted.
        clues += len(meta.get("clues") or []) - ended.startswith("guesser:")
        found += int(meta.get("found") or 0)
    return {"games": len(games), "well_formed": _share(len(games) - malformed, len(games)), "clues": clues,
            "found": found, "words_per_clue": _share(found, clues)}


def clue_skill(answers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Answers given, the share well-formed, and the share of questions right among the well-formed answers."""
    answers = list(answers)
    formed = [float(a["env_reward"]) for a in answers if _formed(a) and a.get("env_reward") is not None]
    return {"answers": len(answers), "well_formed": _share(len(formed), len(answers)),
            "right_well_formed": _share(sum(formed), len(formed))}


def comparison_games(scenarios: Iterable[Mapping[str, Any]], side: str) -> list[dict[str, Any]]:
    """Game records of one side ("checkpoint" or "base") from the held-out evaluation's per-scenario comparisons
    (training/monitoring/evaluation.py ScenarioComparison as a dict: `<side>_formed`, `<side>_env_formed`): the
    evaluation keeps each answer's well-formedness and the env rewards of the well-formed ones, which is all
    the counts above need."""
    games: list[dict[str, Any]] = []
    for s in scenarios:
        formed = list(s.get(f"{side}_formed") or [])
        games += [{"env_reward": r, "metadata": {"well_formed": True}} for r in s.get(f"{side}_env_formed") or []]
        games += [{"env_reward": None, "metadata": {"well_formed": False}} for _ in range(formed.count(False))]
    return games
