"""The judge's references to the answers it was shown, rewritten into the labels people know (judging.labels):
a corpus of what LLM judges write, each with what a person must read instead. The judge saw five answers in the
order C, A, E, B, D, so its "1" is C, its "2" is A, and so on; a sixth, "6", was never shown."""
from __future__ import annotations

import pytest

from judging.labels import relabel

NAMES = {1: "C", 2: "A", 3: "E", 4: "B", 5: "D"}

CORPUS = [
    # one noun, one number, in the ways judges tag it
    ("Attempt 3 cites the policy.", "Attempt E cites the policy."),
    ("Better than attempt #1.", "Better than attempt C."),
    ("Trajectory 2 is vague.", "Trajectory A is vague."),
    ("Unlike Response 4, it answers the question.", "Unlike Response B, it answers the question."),
    ("answer 5 repeats answer 2.", "answer D repeats answer A."),
    ("Candidate 1 is the most complete.", "Candidate C is the most complete."),
    ("Trajectory id 2 loops on the same tool.", "Trajectory A loops on the same tool."),
    ("trajectory_id 5 never calls the tool.", "trajectory D never calls the tool."),
    ("As in response no. 4, the refund is wrong.", "As in response B, the refund is wrong."),
    ("Completion 3's tone is rude.", "Completion E's tone is rude."),
    ("ATTEMPT 1: correct.", "ATTEMPT C: correct."),
    # lists after one noun
    ("Compared with attempts 1 and 2, this answer (answer 4) is clearer.",
     "Compared with attempts C and A, this answer (answer B) is clearer."),
    ("Attempts 1, 2 and 3 all miss the deadline.", "Attempts C, A and E all miss the deadline."),
    ("Attempts 1, 2, and 5 are fine.", "Attempts C, A, and D are fine."),
    ("Responses #2 & #4 quote the wrong price.", "Responses A & B quote the wrong price."),
    ("Worse than trajectories 1, 3 or 5.", "Worse than trajectories C, E or D."),
    ("answers #2/#4 are the same.", "answers A/B are the same."),
    ("Attempts 5 and 1 and 2 agree.", "Attempts D and C and A agree."),
    ("Responses 1 vs 2: the first is longer.", "Responses C vs A: the first is longer."),
    ("Both attempts 2 and 3 hedge.", "Both attempts A and E hedge."),
    # ranges
    ("Attempts 1-3 never mention the fee.", "Attempts A, C and E never mention the fee."),
    ("Responses 2 to 4 are polite.", "Responses A, B and E are polite."),
    ("Trajectories 1 through 3 fail.", "Trajectories A, C and E fail."),
    ("Attempts 4–5 and 1 are short.", "Attempts B, D and C are short."),
    # bare tags
    ("Ranks above #2 and #5.", "Ranks above A and D."),
    ("Same as id 3.", "Same as E."),
    ("(ids 1-2) both guess.", "(A and C) both guess."),
    # ordinals
    ("The first attempt is the best.", "Attempt C is the best."),
    ("It beats the second response.", "It beats response A."),
    ("Unlike the 4th answer, it is correct.", "Unlike answer B, it is correct."),
    ("The second and third attempts are weak.", "Attempts A and E are weak."),
    # left alone: numbers the judge never showed, and numbers that count or measure
    ("Attempt 6 does not exist.", "Attempt 6 does not exist."),
    ("It fails to answer 2 questions.", "It fails to answer 2 questions."),
    ("The agent had to attempt 3 times.", "The agent had to attempt 3 times."),
    ("The response 1.5 points lower.", "The response 1.5 points lower."),
    ("Its answer 3/10 is far off.", "Its answer 3/10 is far off."),
    ("It took 2 tool calls and 4 turns.", "It took 2 tool calls and 4 turns."),
    ("Scores of 1-3 are for wrong answers.", "Scores of 1-3 are for wrong answers."),
    ("Attempts 1-6 cannot all be shown.", "Attempts 1-6 cannot all be shown."),
    ("Answer 5% of the time.", "Answer 5% of the time."),
    ("The first two attempts are short.", "The first two attempts are short."),
    ("Good answer, 4 steps.", "Good answer, 4 steps."),
]


def test_the_corpus_holds_at_least_thirty_phrasings_with_lists_and_ranges():
    assert len(CORPUS) >= 30
    assert sum(" and " in text or "," in text for text, _ in CORPUS) >= 5
    assert sum("-" in text or " to " in text or "through" in text for text, _ in CORPUS) >= 3


@pytest.mark.parametrize("judge_wrote, people_read", CORPUS, ids=[t for t, _ in CORPUS])
def test_each_judge_phrasing_reads_with_the_stable_labels(judge_wrote, people_read):
    assert relabel(judge_wrote, NAMES) == people_read


def test_a_label_that_is_a_number_is_never_translated_twice():
    # The command line lets a group name its trajectories; "2" and "1" here are people's names, not the judge's.
    assert relabel("Attempt 1 beats the first attempt and #2.", {1: "2", 2: "1"}) == "Attempt 2 beats attempt 2 and 1."


def test_a_shared_slot_reads_as_all_the_answers_it_stands_for():
    assert relabel("Attempts 1 and 2 tie.", {1: "B/D", 2: "A"}) == "Attempts B/D and A tie."


def test_text_without_judge_references_is_not_looked_at():
    from judging.labels import mentions_judge_ids

    assert not mentions_judge_ids("Clear and polite; cites the refund policy.")
    assert mentions_judge_ids("Clearer than attempts 1 and 2.")
    assert relabel("", NAMES) == "" and relabel("Attempt 1", {}) == "Attempt 1"


@pytest.mark.parametrize("text", ["attempt 1 -" + " " * 20_000, "attempt id" + " " * 20_000 + "x",
                                  "attempts " + "1, " * 5_000 + "x", "the first " * 5_000 + "attempt"])
def test_an_explanation_built_to_be_slow_is_read_in_well_under_a_second(text):
    # An LLM's text is untrusted: runs of spaces must never be re-split (quadratic backtracking took 27 s here).
    import time

    started = time.perf_counter()
    relabel(text, NAMES)
    assert time.perf_counter() - started < 1.0
