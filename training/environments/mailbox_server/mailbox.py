"""A synthetic mailbox, generated deterministically from a seed, with SQLite FTS5 search.

Nothing is downloaded: names, subjects and bodies come from small word lists here. Some emails carry a fact
(a budget, a room, a flight, a deadline) that a scenario asks about; the rest are ordinary mail that a search
has to see past. The same seed always gives the same emails, ids and scenarios.
"""
from __future__ import annotations

import datetime as dt
import random
import sqlite3
import threading
from dataclasses import asdict, dataclass

PEOPLE = ["ana.moreau", "ben.okafor", "chen.wei", "dara.singh", "eli.novak", "fay.lindqvist", "gus.romero",
          "hana.sato", "ivo.petrov", "jo.mbeki", "kai.larsen", "lea.rossi"]
DOMAIN = "example.org"
PROJECTS = ["Aurora", "Basalt", "Cobalt", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Iris", "Juniper",
            "Kestrel", "Lumen", "Meadow", "Nimbus", "Onyx", "Pioneer", "Quartz", "Raven", "Sierra", "Tundra",
            "Umber", "Vertex", "Willow", "Xenon", "Yarrow", "Zephyr", "Atlas", "Beacon", "Cedar", "Dune"]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Osaka", "Quito", "Tallinn", "Porto", "Dakar", "Hobart", "Lima"]
FILLER = [
    ("Lunch on {day}?", "Anyone up for lunch on {day}? The new place near the station has a long queue, so early."),
    ("Printer on floor {n}", "The printer on floor {n} is jammed again. Facilities know; use the one by the lift."),
    ("Notes from the {project} sync", "Short sync today about {project}. Nothing blocking; next sync in two weeks."),
    ("Re: holiday rota", "I can cover the week of the {n}th. Please update the rota when you have a minute."),
    ("Reading group", "This month's reading group meets {day}. Bring one question about chapter {n}."),
    ("Parking permits", "Parking permits for next quarter are due by {day}. Forms are at reception."),
    ("{project} dashboard slow", "The {project} dashboard takes ages to load this morning. Is it just me?"),
]
# Each fact: (subject, body, question, answer) templates; {project} keeps it findable and unique.
FACTS = [
    ("{project} budget approved", "Good news: the budget for project {project} is approved at {amount} euros. "
     "Finance will confirm the cost centre next week.", "What budget was approved for project {project}?",
     "{amount} euros"),
    ("{project} review room", "The {project} design review is booked in room {room}. Please be on time.",
     "In which room is the {project} design review?", "room {room}"),
    ("Travel for {project}", "Your flight for the {project} site visit to {city} is {flight}. Boarding pass "
     "attached.", "What is the flight number for the {project} site visit?", "{flight}"),
    ("{project} deadline moved", "Heads up: the {project} deliverable deadline moved to {deadline}. Plan "
     "accordingly.", "What is the new deadline of the {project} deliverable?", "{deadline}"),
]
FIRST_DAY = dt.date(2024, 1, 8)


@dataclass
class Email:
    id: str
    sender: str
    to: str
    date: str  # ISO date
    subject: str
    body: str


@dataclass
class MailScenario:
    id: str
    question: str
    answer: str
    source_ids: list[str]
    split: str  # train | held_out


def _address(name: str) -> str:
    return f"{name}@{DOMAIN}"


def generate(seed: int = 0, count: int = 300, projects: list[str] = PROJECTS
             ) -> tuple[list[Email], list[MailScenario]]:
    """`count` emails, a third of them facts (at most one per project and kind), and one scenario per fact email
    (every 5th scenario is held out): the default mailbox has 100 scenarios, 80 to train on and 20 held out.
    `projects`: the names the mailbox talks about (the served mailbox's are PROJECTS)."""
    rng = random.Random(seed)
    emails: list[Email] = []
    scenarios: list[MailScenario] = []
    # Up to one fact of each kind per project: a question's words (project and kind) find its email alone.
    kinds = [(project, kind) for project in projects for kind in range(len(FACTS))]
    facts = iter(rng.sample(kinds, min(len(kinds), count // 3)))
    fact_slots = set(rng.sample(range(count), min(len(kinds), count // 3)))
    for i in range(count):
        sender, to = rng.sample(PEOPLE, 2)
        date = FIRST_DAY + dt.timedelta(days=i * 300 // count)
        email_id = f"m{i:04d}"
        fill = {"day": rng.choice(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]),
                "n": rng.randint(2, 9), "project": rng.choice(projects)}
        if i in fact_slots:
            project, kind = next(facts)
            subject, body, question, answer = FACTS[kind]
            fill |= {"project": project, "amount": f"{rng.randint(12, 95) * 1000:,}",
                     "room": f"{rng.choice('ABCDE')}{rng.randint(10, 49)}", "city": rng.choice(CITIES),
                     "flight": f"{rng.choice(['TP', 'SK', 'KQ', 'LA'])}{rng.randint(100, 999)}",
                     "deadline": (date + dt.timedelta(days=rng.randint(10, 60))).isoformat()}
            n = len(scenarios)
            scenarios.append(MailScenario(id=f"mail-{n:03d}", question=question.format(**fill),
                                          answer=answer.format(**fill), source_ids=[email_id],
                                          split="held_out" if n % 5 == 4 else "train"))
        else:
            subject, body = rng.choice(FILLER)
        emails.append(Email(email_id, _address(sender), _address(to), date.isoformat(),
                            subject.format(**fill), body.format(**fill)))
    return emails, scenarios


class Mailbox:
    """The emails in an in-memory SQLite database with an FTS5 index over subject and body."""

    def __init__(self, emails: list[Email]) -> None:
        self._lock = threading.Lock()  # the SDK runs synchronous tools on worker threads
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE TABLE email (id TEXT PRIMARY KEY, sender TEXT, recipient TEXT, date TEXT, "
                         "subject TEXT, body TEXT)")
        self._db.execute("CREATE VIRTUAL TABLE email_fts USING fts5(id UNINDEXED, subject, body)")
        self._db.executemany("INSERT INTO email VALUES (?, ?, ?, ?, ?, ?)",
                             [(e.id, e.sender, e.to, e.date, e.subject, e.body) for e in emails])
        self._db.executemany("INSERT INTO email_fts VALUES (?, ?, ?)", [(e.id, e.subject, e.body) for e in emails])

    def search(self, *, keywords: str = "", sender: str | None = None, to: str | None = None,
               before: str | None = None, after: str | None = None, limit: int = 10) -> list[dict[str, str]]:
        where, params = [], []
        words = [w for w in "".join(c if c.isalnum() else " " for c in keywords).split() if w]
        if words:  # each word quoted: the agent's text never becomes FTS5 query syntax
            where.append("e.id IN (SELECT id FROM email_fts WHERE email_fts MATCH ?)")
            params.append(" ".join(f'"{w}"' for w in words))
        for column, value, op in (("sender", sender, "LIKE"), ("recipient", to, "LIKE"), ("date", before, "<"),
                                  ("date", after, ">")):
            if value:
                where.append(f"e.{column} {op} ?")
                params.append(f"%{value}%" if op == "LIKE" else value)
        sql = "SELECT id, sender, date, subject FROM email e" + (" WHERE " + " AND ".join(where) if where else "")
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY date, id LIMIT ?", [*params, limit]).fetchall()
        return [{"id": r[0], "from": r[1], "date": r[2], "subject": r[3]} for r in rows]

    def read(self, email_id: str) -> dict[str, str] | None:
        with self._lock:
            row = self._db.execute("SELECT id, sender, recipient, date, subject, body FROM email WHERE id = ?",
                                   (email_id,)).fetchone()
        if row is None:
            return None
        return dict(zip(("id", "from", "to", "date", "subject", "body"), row))


def scenario_records(scenarios: list[MailScenario]) -> list[dict]:
    """The scenarios as training scenario specs (id, user_message, reference, metadata)."""
    return [{"id": s.id, "user_message": s.question, "reference": s.answer,
             "metadata": {"source_ids": s.source_ids, "split": s.split}} for s in scenarios]


def as_dicts(emails: list[Email]) -> list[dict]:
    return [asdict(e) for e in emails]
