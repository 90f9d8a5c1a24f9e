"""The example mailbox: deterministic from its seed, searchable, with scenarios that its search can answer."""
from __future__ import annotations

from training.environments.mailbox_server.mailbox import Mailbox, generate, scenario_records


def test_the_same_seed_gives_the_same_mailbox_and_another_seed_another():
    assert generate(3) == generate(3)
    assert generate(3)[0] != generate(4)[0]
    emails, scenarios = generate(0)
    assert len(emails) == 300 and len({e.id for e in emails}) == 300
    assert len(scenarios) == 100  # a third of the emails


def test_every_scenario_is_answered_by_its_source_email_which_a_keyword_search_finds():
    emails, scenarios = generate(0)
    mailbox = Mailbox(emails)
    for s in scenarios:
        (source,) = s.source_ids
        assert s.answer.split()[0] in mailbox.read(source)["body"]
        project = next(w for w in s.question.rstrip("?").split() if w[0].isupper() and w not in ("What", "In"))
        assert source in [hit["id"] for hit in mailbox.search(keywords=project, limit=50)]


def test_search_filters_by_sender_recipient_and_dates_and_quotes_the_agents_words():
    emails, _ = generate(0)
    mailbox = Mailbox(emails)
    first = emails[0]
    hits = mailbox.search(sender=first.sender.split("@")[0], before="2024-01-09")
    assert [h["id"] for h in hits] == [first.id]
    assert all(h["date"] > "2024-10-01" for h in mailbox.search(after="2024-10-01"))
    assert mailbox.search(keywords='budget" OR "x NEAR(') is not None  # no FTS5 syntax error reaches the agent
    assert mailbox.read("m9999") is None


def test_about_a_fifth_of_the_scenarios_are_held_out_and_records_carry_the_sources():
    _, scenarios = generate(0)
    records = scenario_records(scenarios)
    held_out = [r for r in records if r["metadata"]["split"] == "held_out"]
    assert len(held_out) == len(records) // 5
    assert all(r["reference"] and r["metadata"]["source_ids"] for r in records)
