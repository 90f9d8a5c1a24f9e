"""Temporal Clue puzzles: who was where, with what, and when, deduced from clues; pure and seeded.

A puzzle has k people; each had one object, was in one place and came at one time, every object, place and
time belonging to exactly one person (three permutations). The clues are statements true of the hidden answer;
the generator adds them in a seeded random order, keeping only those that rule out some assignment still
possible, until `solve` finds exactly one assignment. `solve` enumerates every assignment (k!³: 13,824 for
k = 4), so uniqueness is checked, not assumed. The questions ask for some (person, attribute) cells.
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Callable

PEOPLE = ["Ada", "Bruno", "Chiara", "Dev", "Elif", "Farid"]
OBJECTS = ["candlestick", "rope", "wrench", "lantern", "teacup", "umbrella"]
PLACES = ["library", "kitchen", "garden", "cellar", "ballroom", "study"]
TIMES = ["8 pm", "9 pm", "10 pm", "11 pm", "midnight", "1 am"]
ATTRIBUTES = ("object", "place", "time")
ASK = {"object": "What did {p} have?", "place": "Where was {p}?", "time": "When did {p} arrive?"}

Assignment = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # per attribute: person -> value index


@dataclass
class Clue:
    text: str
    holds: Callable[[Assignment], bool]


@dataclass
class Puzzle:
    people: list[str]
    values: dict[str, list[str]]  # attribute -> its k values (times in order)
    clues: list[Clue]
    questions: list[tuple[str, str]]  # (person, attribute)
    solution: Assignment = field(repr=False, default=((), (), ()))

    def answer(self, person: str, attribute: str) -> str:
        a = ATTRIBUTES.index(attribute)
        return self.values[attribute][self.solution[a][self.people.index(person)]]

    def answers(self) -> list[str]:
        return [self.answer(p, a) for p, a in self.questions]

    def text(self) -> str:
        lines = [f"People: {', '.join(self.people)}.",
                 f"Objects: {', '.join(self.values['object'])}.",
                 f"Places: {', '.join(self.values['place'])}.",
                 f"Times, earliest first: {', '.join(self.values['time'])}.",
                 "Each person had exactly one object, was in exactly one place and arrived at exactly one time; no "
                 "two people share an object, a place or a time.", "Clues:"]
        lines += [f"- {c.text}" for c in self.clues]
        lines.append("Questions:")
        lines += [f"{i}. {ASK[a].format(p=p)}" for i, (p, a) in enumerate(self.questions, start=1)]
        lines.append("Answer each question on its own line as `N. answer` (for example `1. kitchen`).")
        return "\n".join(lines)


def all_assignments(k: int) -> list[Assignment]:
    perms = list(itertools.permutations(range(k)))
    return [(o, p, t) for o in perms for p in perms for t in perms]


def solve(puzzle: Puzzle) -> list[Assignment]:
    """Every assignment that satisfies all the clues (a well-made puzzle has exactly one)."""
    return [a for a in all_assignments(len(puzzle.people)) if all(c.holds(a) for c in puzzle.clues)]


def _owner(a: Assignment, attr: int, value: int) -> int:
    return a[attr].index(value)


def candidate_clues(people: list[str], values: dict[str, list[str]], truth: Assignment,
                    rng: random.Random) -> list[Clue]:
    """Statements true of `truth`, of several kinds (direct, negative, linked, before/after)."""
    k = len(people)
    name = {attr: values[ATTRIBUTES[attr]] for attr in range(3)}
    verb = {0: "had the {v}", 1: "was in the {v}", 2: "arrived at {v}"}
    negated = {0: "did not have the {v}", 1: "was not in the {v}", 2: "did not arrive at {v}"}
    clues: list[Clue] = []
    for person in range(k):
        for attr in range(3):
            v = truth[attr][person]
            clues.append(Clue(f"{people[person]} {verb[attr].format(v=name[attr][v])}.",
                              lambda a, p=person, t=attr, v=v: a[t][p] == v))
            other = rng.choice([x for x in range(k) if x != v])
            clues.append(Clue(f"{people[person]} {negated[attr].format(v=name[attr][other])}.",
                              lambda a, p=person, t=attr, v=other: a[t][p] != v))
    for x, y in itertools.permutations(range(3), 2):  # the person with value of x had/was value of y
        for person in range(k):
            vx, vy = truth[x][person], truth[y][person]
            subject = {0: f"The person with the {name[0][vx]}", 1: f"The person in the {name[1][vx]}",
                       2: f"The person who arrived at {name[2][vx]}"}[x]
            clues.append(Clue(f"{subject} {verb[y].format(v=name[y][vy])}.",
                              lambda a, x=x, y=y, vx=vx, vy=vy: a[y][_owner(a, x, vx)] == vy))
    for first, second in itertools.permutations(range(k), 2):  # arrival order between two people
        if truth[2][first] < truth[2][second]:
            clues.append(Clue(f"{people[first]} arrived before {people[second]}.",
                              lambda a, f=first, s=second: a[2][f] < a[2][s]))
    for place in range(k):  # the person in a place arrived before / after someone
        owner = _owner(truth, 1, place)
        for person in range(k):
            if person != owner and truth[2][owner] < truth[2][person]:
                clues.append(Clue(f"Whoever was in the {name[1][place]} arrived before {people[person]}.",
                                  lambda a, pl=place, p=person: a[2][_owner(a, 1, pl)] < a[2][p]))
    return clues


def generate(seed: int, *, people: int = 4, questions: int = 3) -> Puzzle:
    """A puzzle with exactly one solution, the same for the same seed."""
    if not 2 <= people <= len(PEOPLE):
        raise ValueError(f"a puzzle has 2 to {len(PEOPLE)} people")
    rng = random.Random(seed)
    names = rng.sample(PEOPLE, people)
    values = {"object": rng.sample(OBJECTS, people), "place": rng.sample(PLACES, people),
              "time": TIMES[:people]}
    perms = list(itertools.permutations(range(people)))
    truth: Assignment = (rng.choice(perms), rng.choice(perms), rng.choice(perms))
    pool = candidate_clues(names, values, truth, rng)
    rng.shuffle(pool)
    possible = all_assignments(people)
    chosen: list[Clue] = []
    for clue in pool:
        kept = [a for a in possible if clue.holds(a)]
        if len(kept) < len(possible):
            chosen.append(clue)
            possible = kept
        if len(possible) == 1:
            break
    cells = [(p, a) for p in names for a in ATTRIBUTES]
    asked = rng.sample(cells, min(questions, len(cells)))
    return Puzzle(people=names, values=values, clues=chosen, questions=asked, solution=truth)


# Words a person reads past at the start of an answer: "at the library", "In the kitchen.", "had the rope",
# "arrived at 9 pm" all name one value. Only leading words go, so "not the library" stays wrong.
LEADING = frozenset("he she they the a an at in on inside into by with was were had has arrived came around".split())
CLOCK = re.compile(r"\b(\d{1,2})(?::00)?\s*(am|pm)\b")


def normalise(text: str) -> str:
    """An answer as a person reads it: case, punctuation and markup ignored, leading articles and prepositions
    dropped, times written 9pm, 9 p.m. or 9:00 pm alike, 12 am as midnight."""
    text = text.lower().replace("p.m.", "pm").replace("a.m.", "am")
    words = re.sub(r"[^a-z0-9:]+", " ", text).split()
    while words and words[0] in LEADING:
        words.pop(0)
    text = CLOCK.sub(r"\1 \2", " ".join(words)).strip(" :")
    return "midnight" if text in ("12 am", "12 midnight") else text


def given_answers(reply: str) -> dict[int, str]:
    """The answers of lines `N. answer`, by N (later lines for the same N are ignored)."""
    given: dict[int, str] = {}
    for line in reply.splitlines():
        head, sep, rest = line.strip().partition(".")
        if sep and head.strip().isdigit():
            given.setdefault(int(head.strip()), rest)
    return given


def well_formed(reply: str, questions: int) -> bool:
    """Whether every question got an answer line `N. answer` with something in it: format apart from skill."""
    given = given_answers(reply)
    return all(normalise(given.get(i, "")) for i in range(1, questions + 1))


def score_answers(reply: str, answers: list[str]) -> tuple[float, list[bool]]:
    """The share of questions answered right, from lines `N. answer` (later lines for the same N are ignored)."""
    given = given_answers(reply)
    right = [normalise(given.get(i, "")) == normalise(a) for i, a in enumerate(answers, start=1)]
    return (sum(right) / len(right) if right else 0.0), right
