"""The rules of our Codenames, pure and seeded: a 5×5 board drawn from codenames_words.txt; a key gives 8 words
to our team, 8 to the other team, 1 to the assassin and the rest (8) are neutral.

A round: the spymaster (who sees the key) gives a one-word clue that is not a word on the board and a number;
the guesser picks up to number + 1 unrevealed words, best first. Each pick is revealed: our word → the guesser
may go on; a neutral word or the other team's word → the round ends (theirs counts for them); the assassin →
the game is over, lost. After our round the other team reveals one of its own words. The game ends when all
our words are found (won), all theirs are (lost), the assassin is picked (lost), or the rounds run out.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

OURS, THEIRS, NEUTRAL, ASSASSIN = "ours", "theirs", "neutral", "assassin"
TEAM_WORDS = 8
CLUE = re.compile(r"<clue>\s*([A-Za-z][A-Za-z'-]*)\s+(\d)\s*</clue>")
GUESS = re.compile(r"<guess>(.*?)</guess>", re.S)


@lru_cache(maxsize=1)
def words() -> list[str]:
    text = (Path(__file__).parent / "codenames_words.txt").read_text()
    return [w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#")]


@dataclass
class Game:
    board: list[str]  # 25 words, row by row
    key: dict[str, str]  # word -> ours / theirs / neutral / assassin
    revealed: list[str] = field(default_factory=list)
    over: str = ""  # why the game ended ("" while it goes on)

    def left(self, side: str) -> list[str]:
        return [w for w in self.board if self.key[w] == side and w not in self.revealed]

    def unrevealed(self) -> list[str]:
        return [w for w in self.board if w not in self.revealed]

    @property
    def found(self) -> int:
        return sum(self.key[w] == OURS for w in self.revealed)


def new_game(seed: int) -> Game:
    rng = random.Random(seed)
    board = rng.sample(words(), 25)
    sides = [OURS] * TEAM_WORDS + [THEIRS] * TEAM_WORDS + [ASSASSIN] + [NEUTRAL] * (25 - 2 * TEAM_WORDS - 1)
    rng.shuffle(sides)
    return Game(board=board, key=dict(zip(board, sides)))


def parse_clue(text: str, game: Game) -> tuple[str, int] | str:
    """(word, number) or why the clue is not allowed."""
    match = CLUE.search(text or "")
    if not match:
        return "no clue in the form <clue>word N</clue>"
    word, number = match.group(1).lower(), int(match.group(2))
    if word in game.unrevealed() or any(word in w or w in word for w in game.unrevealed()):
        return f"the clue {word!r} is (part of) a word on the board"
    if not 1 <= number <= TEAM_WORDS:
        return f"the number {number} is not between 1 and {TEAM_WORDS}"
    return word, number


def parse_guesses(text: str) -> list[str] | None:
    match = GUESS.search(text or "")
    if not match:
        return None
    return [w.strip().strip(".").lower() for w in match.group(1).split(",") if w.strip()]


def reveal(game: Game, guesses: list[str], number: int) -> list[tuple[str, str]]:
    """Reveals the picks in order (at most number + 1) until one is not ours; returns (word, side) of each. A
    pick that is not an unrevealed board word ends the round, revealing nothing."""
    shown: list[tuple[str, str]] = []
    for word in guesses[:number + 1]:
        if word not in game.unrevealed():
            shown.append((word, "not on the board"))
            break
        game.revealed.append(word)
        side = game.key[word]
        shown.append((word, side))
        if side == ASSASSIN:
            game.over = "the guesser picked the assassin"
            break
        if not game.left(OURS):
            game.over = "all our words found"
            break
        if not game.left(THEIRS):
            game.over = "the other team's words were all revealed"
            break
        if side != OURS:
            break
    return shown


def their_turn(game: Game, rng: random.Random) -> str | None:
    """The other team reveals one of its words; returns it (None when the game is over)."""
    if game.over or not game.left(THEIRS):
        return None
    word = rng.choice(game.left(THEIRS))
    game.revealed.append(word)
    if not game.left(THEIRS):
        game.over = "the other team found all its words first"
    return word


def reward(game: Game) -> float:
    """Both roles' reward: 1 for a win, 0 for the assassin, else 0.8 × the share of our words found."""
    if game.over == "all our words found":
        return 1.0
    if game.over == "the guesser picked the assassin":
        return 0.0
    return 0.8 * game.found / TEAM_WORDS


def render_board(game: Game, *, with_key: bool) -> str:
    rows = []
    for r in range(5):
        cells = []
        for w in game.board[r * 5:r * 5 + 5]:
            mark = f"[{game.key[w]}]" if w in game.revealed else (f"({game.key[w]})" if with_key else "")
            cells.append(f"{w}{mark}")
        rows.append(" | ".join(cells))
    return "\n".join(rows)
