"""The judge numbers the trajectories it is shown 1..N in presentation order, shuffled per pass; people know
them by the caller's labels (the web app's letters A, B, C). `relabel` is the one function that rewrites an
explanation's references to the judge's numbers into those labels, so no page, API, export or playground shows
the judge's numbering (DESIGN §8 invariant 2). It reads what judges write:

- a noun and a number: "Attempt 3", "trajectory #1", "response id 2", "answer no. 4", "trajectory_id 5";
- lists after one noun: "attempts 1, 2 and 3", "responses #2 & #4", "answers 1/3", "attempts 1, 2, or 4";
- ranges: "attempts 1-3", "responses 2 to 4", "trajectories 1 through 3" (written out as the labels covered);
- a bare tag: "#2", "id 3", "ids 1-4";
- ordinals: "the first attempt", "the 2nd and third responses".

Numbers the judge was not shown are left as they are, and so is a number that counts or measures something
("answer 2 questions", "attempt 3 times", "response 1.5"). One pass over the text, so a label that happens to be
a number is never translated twice.
"""
from __future__ import annotations

import re

_NOUN = (r"trajector(?:y|ies)|attempts?|answers?|responses?|candidates?|completions?|submissions?|"
         r"solutions?|outputs?")
# What may stand between the noun and its number: "id", "_id", "ID:", "no.", "number", ":".
_TAG = r"(?:\s*+_?ids?\b\s*+[:=]?|\s*+no\.|\s*+number\b|\s*+[:=])?\s*+"
# A number that is an id: not a decimal, a percentage, a fraction, or a count of something ("2 of", "3 times").
_COUNTED = (r"%|percent|of|out\s++of|times|x|questions?|steps?|turns?|tool\s++calls?|calls?|items?|points?|"
            r"words?|tokens?|lines?|seconds?|minutes?|hours?|days?|sentences?|paragraphs?|parts?")
_NUM = rf"#?\s*+\d+(?![\d.,/]\d)(?!\s*+(?:{_COUNTED})\b)(?!\s*+%)"
_RANGE = r"\s*+(?:-|–|—|\bto\b|\bthrough\b|\bthru\b)\s*+"
_SEP = r"\s*+(?:,\s*+(?:and\b|or\b|&)?|\band\b|\bor\b|&|/|\bvs\b\.?|\bversus\b|\bnor\b)\s*+"
_ITEM = rf"{_NUM}(?:{_RANGE}{_NUM})?"
_LIST = rf"{_ITEM}(?:{_SEP}{_ITEM})*"

_ORDINALS = {w: i for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split(), start=1)}
_ORD = r"(?:" + "|".join(_ORDINALS) + r"|\d+(?:st|nd|rd|th))"

# One pattern, four forms, tried left to right in one pass: "the first attempt", "attempts 1 and 2", "id 3", "#2".
_REFERENCE = re.compile(
    rf"\b(?P<o_the>the)\s++(?P<o_list>{_ORD}(?:{_SEP}(?:the\s++)?{_ORD})*)\s++(?P<o_noun>{_NOUN})\b"
    rf"|\b(?P<m_noun>{_NOUN}){_TAG}(?P<m_list>{_LIST})\b"  # attempts 1 and 2
    rf"|(?<![\w#&])ids?\s*+[:=]?\s*+(?P<i_list>{_LIST})\b"  # id 3
    rf"|(?<![\w#&])(?P<h_list>(?=#){_LIST})\b",  # #2
    re.I)
_NUMBER = re.compile(r"\d+")
_PIECE = re.compile(rf"(?P<item>{_ITEM})|{_SEP}", re.I)
# Whitespace is matched possessively (\s*+): a run of spaces is never re-split, so no text makes the search slow.


def _key(label: str) -> tuple[int, str]:
    return len(label), label  # A < B < … < Z < AA


def _join(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _item(text: str, names: dict[int, str], alone: bool) -> str:
    """One item of a list: a number becomes its name; a range becomes the names it covers, in label order."""
    numbers = [int(n) for n in _NUMBER.findall(text)]
    if len(numbers) == 1:
        return names[numbers[0]] if numbers[0] in names else text
    low, high = numbers
    covered = range(low, high + 1)
    if not covered or any(n not in names for n in covered):
        return text  # a range that is not the judge's ids (e.g. "scores 1-3") stays as it is
    labels = sorted(set(names[n] for n in covered), key=_key)
    return _join(labels) if alone else ", ".join(labels)


def _list(text: str, names: dict[int, str]) -> str:
    pieces = list(_PIECE.finditer(text))
    alone = sum(bool(p.group("item")) for p in pieces) == 1
    out, end = [], 0
    for p in pieces:
        out += [text[end:p.start()], _item(p.group("item"), names, alone) if p.group("item") else p.group(0)]
        end = p.end()
    return "".join(out + [text[end:]])


def _ordinal(m: re.Match[str], names: dict[int, str]) -> str:
    numbers = [_ORDINALS.get(w.lower()) or int(_NUMBER.match(w).group(0))
               for w in re.findall(_ORD, m.group("o_list"), re.I)]
    if any(n not in names for n in numbers):
        return m.group(0)
    noun = m.group("o_noun")
    if len(numbers) > 1 and not noun.lower().endswith("s"):
        noun = noun[:-1] + "ies" if noun.lower().endswith("y") else noun + "s"
    if m.group("o_the")[0].isupper():
        noun = noun[0].upper() + noun[1:]
    return f"{noun} {_join([names[n] for n in numbers])}"


def _reference(m: re.Match[str], names: dict[int, str]) -> str:
    if m.group("o_list"):
        return _ordinal(m, names)
    listed = m.group("m_list") or m.group("i_list") or m.group("h_list")
    translated = _list(listed, names)
    if translated == listed:
        return m.group(0)
    # The judge's tag goes ("Trajectory #2" → "Trajectory B", "id 3" → "C"); the noun people read stays.
    return f"{m.group('m_noun')} {translated}" if m.group("m_noun") else translated


def relabel(text: str, names: dict[int, str]) -> str:
    """`text` with every reference to a judge number in `names` (1-based) replaced by its name; numbers the judge
    was not shown are left as they are. The only place explanations are translated."""
    if not text or not names:
        return text
    return _REFERENCE.sub(lambda m: _reference(m, names), text)


def mentions_judge_ids(text: str) -> bool:
    """Whether `text` may refer to the judge's numbers at all (a cheap test before looking for the call)."""
    return bool(text) and _REFERENCE.search(text) is not None
