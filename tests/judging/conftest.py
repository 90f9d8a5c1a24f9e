"""Fixtures for the judge's tests: the HTTP judge double (real litellm, real HTTP, nothing of ours mocked)."""
from __future__ import annotations

import pytest

from tests.judge_double import JudgeDouble, judge_double  # noqa: F401  (re-exported fixture)
from tests.judging.groups import quality_rule


@pytest.fixture
def rule_double(judge_double: JudgeDouble) -> JudgeDouble:  # noqa: F811
    """The double, answering every request by reading the quality markers from the prompt."""
    judge_double.responder = JudgeDouble.score_by(quality_rule)
    return judge_double
