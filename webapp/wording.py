"""Small rules of English that messages built from values (a status, a role) must follow."""
from __future__ import annotations


def with_article(phrase: str) -> str:
    """`phrase` after "a" or "an", by its first letter: "an awaiting review", "a queued", "an editor".

    The values it meets are statuses, roles and kinds in lower-case words, where the first letter decides;
    a word spoken with another first sound (e.g. "user") would need its own rule here."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' else 'a'} {phrase}"
