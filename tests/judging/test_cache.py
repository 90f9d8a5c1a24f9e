"""The on-disk cache: the same model + params + rubric + group never reaches the API twice."""
from __future__ import annotations

from pathlib import Path

import judging
from tests.judge_double import JudgeDouble
from tests.judging.groups import judge_kwargs, trajectory

GROUP = [trajectory(0.2), trajectory(0.5), trajectory(0.9)]


async def test_a_cache_hit_sends_no_request(rule_double: JudgeDouble) -> None:
    first = await judging.score_group(GROUP, **judge_kwargs(rule_double, passes=2))
    again = await judging.score_group(GROUP, **judge_kwargs(rule_double, passes=2))

    assert len(rule_double.requests) == 2  # the two passes of the first run, nothing more
    assert again.cache_hit is True and first.cache_hit is False
    assert [s.score for s in again.scores] == [s.score for s in first.scores]
    assert [s.explanation for s in again.scores] == [s.explanation for s in first.scores]
    assert again.prompt_tokens == 0 and again.cost_usd == 0.0  # nothing paid this time
    assert [c.prompt_tokens for c in again.calls] == [c.prompt_tokens for c in first.calls]  # the record stays


async def test_a_different_rubric_or_temperature_or_group_misses_the_cache(rule_double: JudgeDouble) -> None:
    await judging.ruler(GROUP, **judge_kwargs(rule_double))
    await judging.ruler(GROUP, rubric="Be strict.", **judge_kwargs(rule_double))
    params = {**rule_double.litellm_params, "temperature": 0.3}
    await judging.ruler(GROUP, judge_model=rule_double.model, extra_litellm_params=params)
    await judging.ruler(GROUP[:2], **judge_kwargs(rule_double))
    assert len(rule_double.requests) == 4


async def test_the_api_key_is_not_part_of_the_cache_key(rule_double: JudgeDouble) -> None:
    await judging.ruler(GROUP, **judge_kwargs(rule_double))
    params = {**rule_double.litellm_params, "api_key": "rotated"}
    await judging.ruler(GROUP, judge_model=rule_double.model, extra_litellm_params=params)
    assert len(rule_double.requests) == 1


async def test_the_cache_can_be_turned_off(rule_double: JudgeDouble) -> None:
    await judging.ruler(GROUP, **judge_kwargs(rule_double, cache=False))
    await judging.ruler(GROUP, **judge_kwargs(rule_double, cache=False))
    assert len(rule_double.requests) == 2


async def test_the_cache_lives_where_it_is_told(rule_double: JudgeDouble, tmp_path: Path) -> None:
    await judging.ruler(GROUP, **judge_kwargs(rule_double, cache_dir=str(tmp_path / "c")))
    assert list((tmp_path / "c").rglob("*.json"))


async def test_the_env_var_sets_the_default_cache_dir(rule_double: JudgeDouble, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RUBRIC_STUDIO_JUDGE_CACHE", str(tmp_path / "env-cache"))
    await judging.ruler(GROUP, **judge_kwargs(rule_double))
    assert list((tmp_path / "env-cache").rglob("*.json"))


async def test_a_corrupt_cache_entry_is_a_miss(rule_double: JudgeDouble, tmp_path: Path) -> None:
    await judging.ruler(GROUP, **judge_kwargs(rule_double, cache_dir=str(tmp_path)))
    for f in tmp_path.rglob("*.json"):
        f.write_text("{truncated")

    scores = await judging.ruler(GROUP, **judge_kwargs(rule_double, cache_dir=str(tmp_path)))

    assert [s.score for s in scores] == [0.2, 0.5, 0.9]
    assert len(rule_double.requests) == 2


async def test_a_rejected_reply_is_never_cached(judge_double: JudgeDouble) -> None:
    judge_double.queue("garbage", "garbage")
    try:
        await judging.ruler(GROUP[:2], **judge_kwargs(judge_double))
    except judging.JudgeError:
        pass
    judge_double.queue(JudgeDouble.scores_reply({"1": 0.1, "2": 0.2}))

    await judging.ruler(GROUP[:2], **judge_kwargs(judge_double))

    assert len(judge_double.requests) == 3


async def test_an_unwritable_cache_warns_but_still_returns_the_scores(rule_double: JudgeDouble, tmp_path: Path,
                                                                       caplog) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")

    scores = await judging.ruler(GROUP, **judge_kwargs(rule_double, cache_dir=str(blocker)))

    assert [s.score for s in scores] == [0.2, 0.5, 0.9]
    assert "not being cached" in caplog.text
