"""The judge numbers the trajectories it is shown 1..N in presentation order, shuffled per pass; people know
them by the caller's labels (the web app's letters A, B, C). `relabel` rewrites an explanation's mentions of
the judge's numbers ("Attempt 3", "trajectory #1") into those labels, so no page shows the judge's numbering."""
from __future__ import annotations

import re

# What a judge calls the things it compares, followed by its number: "attempt 2", "Trajectory #3", "answer id 1".
MENTION = re.compile(r"\b(trajector(?:y|ies)|attempts?|answers?|responses?|candidates?)(\s*(?:id\s*)?#?\s*)(\d+)\b",
                     re.I)


def relabel(text: str, names: dict[int, str]) -> str:
    """`text` with every mention of a judge number in `names` (1-based) replaced by its name; numbers the judge
    was not shown are left as they are."""
    def name(m: re.Match[str]) -> str:
        number = int(m.group(3))
        return f"{m.group(1)}{m.group(2).replace('#', '')}{names[number]}" if number in names else m.group(0)

    return MENTION.sub(name, text) if text else text
