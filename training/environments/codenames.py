"""`codenames`: two roles that must cooperate, a spymaster and a guesser, rewarded together from the game.

The board comes from the scenario (metadata `seed`, else its id), so a group plays one board. The rules are in
training/environments/codenames_rules.py. Each round the spymaster sees the board with the key and answers
`<clue>word N</clue>`; the guesser sees the board (revealed words marked), the clue, and answers
`<guess>word, word</guess>` (at most N + 1, best first). A malformed or forbidden clue, or a reply with no
guesses, ends the game where it stands. Both roles get the game's reward: 1 for finding all our words, 0 for the
assassin, else 0.8 × the share found.

`play`: `both` (self-play: one trajectory per role per episode, roles `spymaster` and `guesser`), or one role
with the other played by `partner_model` (another name the run's server serves). A judge may add a rubric on the
clue's quality: the spymaster's group is judged like any group.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.environments import codenames_rules as rules
from training.environments import register
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory
from training.types import Message, Scenario, Trajectory

SPYMASTER, GUESSER = "spymaster", "guesser"
BRIEF = {
    SPYMASTER: "You are the spymaster in Codenames. Give one-word clues that lead your guesser to your team's "
               "words (marked (ours)) and away from the assassin, the other team's and neutral words. Answer "
               "<clue>word N</clue>: a word that is not on the board, and how many of our words it points to.",
    GUESSER: "You are the guesser in Codenames. From your spymaster's clue, pick the board words it points to, "
             "best first, at most N + 1. Answer <guess>word, word</guess>. Avoid the assassin.",
}


class CodenamesOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    play: Literal["both", "spymaster", "guesser"] = Field(
        "both", description="The roles the policy plays: both (self-play), or one with `partner_model` as the other.")
    partner_model: str = Field("", max_length=300, description="With one role played: the served name of the model "
                                                              "that plays the other (the base model, an adapter).")
    rounds: int = Field(4, ge=1, le=12, description="Rounds of clue and guesses before the game stops.")

    @model_validator(mode="after")
    def _partner_named(self) -> "CodenamesOptions":
        if (self.play != "both") != bool(self.partner_model):
            raise ValueError("partner_model is required when the policy plays one role, and only then")
        return self


@dataclass
class Player:
    role: str
    trajectory: Trajectory
    model: str
    trained: bool


def board_seed(scenario: Scenario) -> int:
    return int(scenario.metadata.get("seed", zlib.crc32(scenario.id.encode())))


def spymaster_prompt(game: rules.Game, round_no: int, news: str) -> str:
    keyed = rules.render_board(game, with_key=True)
    return f"{news}Round {round_no}. The board, with the key in parentheses and revealed words in brackets:\n{keyed}"


def guesser_prompt(game: rules.Game, round_no: int, news: str, clue: tuple[str, int]) -> str:
    word, number = clue
    return (f"{news}Round {round_no}. The board, revealed words in brackets:\n"
            f"{rules.render_board(game, with_key=False)}\nClue: {word} {number}. Pick at most {number + 1} words.")


def round_news(game: rules.Game, guesses: list[str], number: int, rng: random.Random) -> str:
    """Reveals the guesses, then (unless the game is over) the other team's word; what both players hear next."""
    shown = rules.reveal(game, guesses, number)
    news = "Last round: " + (", ".join(f"{w} was {side}" for w, side in shown) or "no guess") + ". "
    if not game.over:
        theirs = rules.their_turn(game, rng)
        news += f"The other team revealed {theirs}. " if theirs else ""
    return news


@register("codenames")
class CodenamesEnvironment(Environment):
    Options = CodenamesOptions

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return True

    @classmethod
    def roles(cls, options: BaseModel) -> list[str]:
        play = getattr(options, "play", "both")
        return [SPYMASTER, GUESSER] if play == "both" else [play]

    async def rollout(self, client: Any, model: str, scenario: Scenario,
                      config: RolloutConfig) -> Trajectory | list[Trajectory]:
        options: CodenamesOptions = config.options  # type: ignore[assignment]
        seed = board_seed(scenario)
        game, rng = rules.new_game(seed), random.Random(seed + 1)
        trained = self.roles(options)
        players = {role: self._player(role, scenario, config, model if role in trained else options.partner_model,
                                      role in trained) for role in (SPYMASTER, GUESSER)}
        clues: list[str] = []
        news = ""  # what happened last round, told to both at the start of the next
        for round_no in range(1, options.rounds + 1):
            said = await self._say(players[SPYMASTER], client, config, spymaster_prompt(game, round_no, news))
            clue = rules.parse_clue(said, game)
            if isinstance(clue, str):
                game.over = f"spymaster: {clue}"
                break
            word, number = clue
            clues.append(f"{word} {number}")
            said = await self._say(players[GUESSER], client, config, guesser_prompt(game, round_no, news, clue))
            guesses = rules.parse_guesses(said)
            if guesses is None:
                game.over = "guesser: no guesses in the form <guess>word, word</guess>"
                break
            news = round_news(game, guesses, number, rng)
            if game.over:
                break
        reward = rules.reward(game)
        sides = []
        for role in trained:
            t = players[role].trajectory
            t.env_reward = reward
            # A game its own side ended with a malformed or refused reply was not well-formed for that role.
            t.metadata.update(found=game.found, ended=game.over or "rounds ran out", clues=clues, seed=seed,
                              well_formed=not game.over.startswith(f"{role}:"))
            sides.append(t)
        return sides if options.play == "both" else sides[0]

    @staticmethod
    def _player(role: str, scenario: Scenario, config: RolloutConfig, model: str, trained: bool) -> Player:
        system: list[Message] = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
        trajectory = new_trajectory(scenario, system)
        trajectory.role = role
        return Player(role, trajectory, model, trained)

    @staticmethod
    async def _say(player: Player, client: Any, config: RolloutConfig, text: str) -> str:
        first = not any(m["role"] == "user" for m in player.trajectory.messages)
        player.trajectory.messages.append({"role": "user", "content": f"{BRIEF[player.role]}\n{text}" if first
                                           else text})
        turn = await complete(client, player.model, player.trajectory.messages, config.sampling)
        add_turn(player.trajectory, turn)
        return str(turn.message.get("content") or "")
