"""`python -m judging score` end to end: a subprocess, real litellm, the HTTP double."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from judging.cli import main
from tests.judge_double import JudgeDouble
from tests.judging.groups import trajectory

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "judging", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                           "RUBRIC_STUDIO_JUDGE_CACHE": str(tmp_path / "cache"), **env})


def test_the_cli_scores_each_group_and_prints_scores_and_explanations(rule_double: JudgeDouble,
                                                                      tmp_path: Path) -> None:
    groups = tmp_path / "groups.jsonl"
    groups.write_text("\n".join(json.dumps(g) for g in [
        {"id": "refund", "trajectories": [trajectory(0.2), trajectory(0.8)]},
        {"id": "named", "trajectories": [{"id": "terse", "messages": trajectory(0.4)},
                                         {"id": "verbose", "messages": trajectory(0.6)}]},
    ]) + "\n")
    rubric = tmp_path / "rubric.md"
    rubric.write_text("Prefer faithful answers.")

    proc = _run(["score", str(groups), "--judge-model", rule_double.model, "--rubric", str(rubric),
                 "--api-base", rule_double.api_base, "--api-key-env", "JUDGE_KEY"], tmp_path, JUDGE_KEY="test")

    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "== refund: 2 trajectories" in out and "cost unknown" in out
    assert "#2  0.800  rule gave 0.800" in out and "#1  0.200  rule gave 0.200" in out
    assert out.index("#2  0.800") < out.index("#1  0.200")  # ranked best first
    assert "verbose  0.600" in out and "terse  0.400" in out
    assert out.index("== refund") < out.index("== named")
    assert "scored 2/2 groups" in proc.stderr
    assert len(rule_double.requests) == 2
    assert "Prefer faithful answers." in rule_double.requests[0].messages[0]["content"]
    assert rule_double.requests[0].headers.get("authorization") == "Bearer test"


def test_the_cli_prints_json_lines_on_request(rule_double: JudgeDouble, tmp_path: Path, capsys,
                                              monkeypatch) -> None:
    # in-process (main() is what `python -m judging` runs) to spare a second litellm import
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"trajectories": [trajectory(0.3), trajectory(0.7)]}) + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "test")

    code = main(["score", str(groups), "--judge-model", rule_double.model, "--api-base", rule_double.api_base,
                 "--json", "--passes", "2"])

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["id"] == "line1"
    assert [s["score"] for s in result["scores"]] == [0.3, 0.7]
    assert result["passes"] == 2 and result["cost_usd"] is None


def test_a_malformed_groups_file_is_reported_with_its_line(tmp_path: Path) -> None:
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"trajectories": [trajectory(0.3)]}) + "\n" + json.dumps({"id": "x"}) + "\n")

    proc = _run(["score", str(groups), "--judge-model", "openai/judge"], tmp_path)

    assert proc.returncode == 2
    assert "groups.jsonl:2: trajectories: Field required" in proc.stderr


def test_a_group_the_judge_cannot_score_is_printed_as_failed(judge_double: JudgeDouble, tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"id": "broken", "trajectories": [trajectory(0.3), trajectory(0.7)]}) + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    judge_double.queue("not json", "still not json")

    code = main(["score", str(groups), "--judge-model", judge_double.model, "--api-base", judge_double.api_base])

    assert code == 1
    captured = capsys.readouterr()
    assert "== broken: FAILED" in captured.out and "not valid JSON" in captured.out
    assert "1 failed" in captured.err


def test_the_cli_prints_explanations_in_the_files_names_not_the_judges_shuffled_numbers(
        judge_double: JudgeDouble, tmp_path: Path, capsys, monkeypatch) -> None:
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"id": "g", "trajectories": [{"id": "terse", "messages": trajectory(0.3)},
                                                              {"id": "verbose", "messages": trajectory(0.7)}]}) + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", "test")

    def explain(request):
        blocks = request.trajectory_blocks()
        best = next(tid for tid, text in blocks.items() if "quality 0.70" in text)
        return {"scores": [{"trajectory_id": tid, "score": 0.7 if tid == best else 0.3,
                            "explanation": f"Trajectory {tid}; best is trajectory {best}."} for tid in blocks]}

    judge_double.responder = explain
    code = main(["score", str(groups), "--judge-model", judge_double.model, "--api-base", judge_double.api_base,
                 "--no-cache"])

    out = capsys.readouterr().out
    assert code == 0
    assert "terse  0.300  Trajectory terse; best is trajectory verbose." in out
    assert "verbose  0.700  Trajectory verbose; best is trajectory verbose." in out


def test_the_cli_reports_the_cacheable_prefix_and_the_cost_without_the_cached_price(rule_double: JudgeDouble,
                                                                                    tmp_path: Path) -> None:
    rule_double.usage, rule_double.cached_tokens = (2000, 100), 1024
    groups = tmp_path / "groups.jsonl"
    groups.write_text("\n".join(json.dumps({"id": f"g{k}", "trajectories": [trajectory(0.2), trajectory(0.8)]})
                                for k in range(2)) + "\n")

    proc = _run(["score", str(groups), "--judge-model", "openai/gpt-4o-mini", "--api-base", rule_double.api_base,
                 "--api-key-env", "JUDGE_KEY"], tmp_path, JUDGE_KEY="test")

    assert proc.returncode == 0, proc.stderr
    total = proc.stdout.strip().splitlines()[-1]
    assert total.startswith("== total: 2 groups, 2 request(s), tokens 4000+200, cost $")
    assert "cacheable prefix " in total and "provider-cached 2048 tokens" in total
    assert "at the plain input price" in total and "written to the cache" not in total
    share = int(total.split("cacheable prefix ")[1].split("%")[0])
    assert 20 < share < 100
