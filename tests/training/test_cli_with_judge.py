"""`python -m training run` with a judge section: the judge (a real litellm client against the HTTP judge
double) scores every group, and its scores and explanations appear in the step output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.training.configs import small_config

REPO = Path(__file__).resolve().parents[2]


def run_cli(config_path: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               RUBRIC_STUDIO_JUDGE_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "training", "run", "--config", str(config_path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_judge_scores_and_explanations_appear_in_the_step_output(tiny_model_dir, tmp_path):
    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as double:
        config = small_config(tiny_model_dir, tmp_path / "run", steps=2, judge={
            "judge_model": "openai/judge", "api_base": double.api_base, "api_key_env": "JUDGE_TEST_KEY",
            "rubric": "Shorter games are better.", "combine": "weighted", "judge_weight": 0.5, "env_weight": 0.5})
        path = tmp_path / "config.json"
        path.write_text(config.model_dump_json())
        os.environ["JUDGE_TEST_KEY"] = "test"
        try:
            proc = run_cli(path, tmp_path / "cache")
        finally:
            del os.environ["JUDGE_TEST_KEY"]
        assert proc.returncode == 0, proc.stderr
        steps = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [s["step"] for s in steps] == [1, 2]
        for step in steps:
            assert step["judge_mean"] is not None and step["env_mean"] is not None
        # A group of identical answers is not sent (it has nothing to rank and is skipped); every other group is.
        groups = [g for step in steps for g in step["groups"]]
        sent = [g for g in groups if not (g["skipped"] and all(s is None for s in g["judge_scores"]))]
        assert sent
        for group in sent:
            assert all(e.startswith("rule gave ") for e in group["explanations"])
            assert all(0.0 <= s <= 1.0 for s in group["judge_scores"])
        # One judge request per sent group, each carrying the rubric: the scorer really went through HTTP.
        assert len(double.requests) == len(sent)
        assert "Shorter games are better." in double.requests[0].prompt_text


def test_a_bad_judge_section_is_a_clear_error(tiny_model_dir, tmp_path):
    config = small_config(tiny_model_dir, tmp_path / "run", steps=1, judge={"judge_model": "openai/judge",
                                                                           "combine": "median"})
    path = tmp_path / "config.json"
    path.write_text(config.model_dump_json())
    proc = run_cli(path, tmp_path / "cache")
    assert proc.returncode == 2
    assert "invalid judge section" in proc.stderr and "combine" in proc.stderr
