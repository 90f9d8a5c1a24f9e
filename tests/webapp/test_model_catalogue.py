"""The deployment's model catalogue (webapp/model_catalogue.py): parsed at start, failing loudly on a bad value;
resolving a catalogue name, an allowed Hugging Face id, or an agent's pre-catalogue source, and nothing else."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webapp.model_catalogue import (
    GAMES_MODEL, TINY_MODEL, BaseModelChoiceError, check_choice, hf_allowed, parse_catalogue, parse_hf_patterns, resolve,
)

BASE = Path("/srv/studio")


def test_the_tiny_models_are_listed_with_their_directories_and_context_lengths_by_default():
    from training.fixtures.examples import GAMES_MODEL as EXAMPLES_GAMES_MODEL

    entries = parse_catalogue("", base_dir=BASE)
    assert list(entries) == [TINY_MODEL, GAMES_MODEL] and GAMES_MODEL == EXAMPLES_GAMES_MODEL
    assert entries[TINY_MODEL].source == "/srv/studio/var/tiny-model" and entries[TINY_MODEL].context_length == 1024
    # The game examples' own model, where bench/games_measure.py and `python -m training.fixtures.tiny_games_model` build it.
    assert entries[GAMES_MODEL].source == "/srv/studio/var/tiny-games-model"
    assert entries[GAMES_MODEL].context_length == 2048
    assert "python -m training.fixtures.tiny_games_model" in entries[GAMES_MODEL].description


def test_a_deployment_adds_entries_from_json_or_a_file_and_may_remove_the_defaults(tmp_path):
    raw = {"qwen-small": {"source": "Qwen/Qwen2.5-0.5B-Instruct", "context_length": 32768, "description": "small"},
           TINY_MODEL: None, GAMES_MODEL: None}
    assert list(parse_catalogue(json.dumps(raw), base_dir=BASE)) == ["qwen-small"]
    (tmp_path / "models.json").write_text(json.dumps({"local": {"source": "/models/local", "context_length": 8}}))
    assert parse_catalogue(f"@{tmp_path / 'models.json'}", base_dir=BASE)["local"].source == "/models/local"


@pytest.mark.parametrize("raw, says", [
    ("{not json", "expected JSON"),
    ("[]", "expected a JSON object"),
    ('{"Bad Name": {"source": "/m", "context_length": 8}}', "entry name 'Bad Name'"),
    ('{"m": {"source": "/m"}}', "entry 'm': context_length"),
    ('{"m": {"source": "/m", "context_length": 8, "command": "sh"}}', "entry 'm': command"),
    ('{"m": {"source": "models/a/m", "context_length": 8}}', "give a Hugging Face id (owner/name) or an absolute"),
    ('{"m": {"source": "/models/../etc", "context_length": 8}}', "an absolute directory"),
])
def test_a_bad_catalogue_is_refused_naming_the_variable_and_the_problem(raw, says):
    with pytest.raises(ValueError) as err:
        parse_catalogue(raw, base_dir=BASE)
    assert str(err.value).startswith("STUDIO_BASE_MODELS") and says in str(err.value)


@pytest.mark.parametrize("pattern", ["/models/*", "../x/*", "Qwen", "Qwen/*/x", "~/x", "file:///etc/*", "Qw[e]n/*"])
def test_hugging_face_patterns_are_ids_never_paths(pattern):
    with pytest.raises(ValueError, match="STUDIO_HF_MODELS"):
        parse_hf_patterns(pattern)


def test_an_allowed_pattern_matches_owner_and_name_only():
    patterns = parse_hf_patterns(" Qwen/* , meta-llama/Llama-3.2-1B-Instruct ")
    assert patterns == ["Qwen/*", "meta-llama/Llama-3.2-1B-Instruct"]
    assert hf_allowed("Qwen/Qwen3-0.6B", patterns) and hf_allowed("meta-llama/Llama-3.2-1B-Instruct", patterns)
    assert not hf_allowed("Qwen/a/b", patterns) and not hf_allowed("Qwen/..", patterns)
    assert not hf_allowed("meta-llama/Llama-3.2-3B", patterns) and not hf_allowed("qwen/Qwen3-0.6B", patterns)


def test_the_resolver_takes_a_name_an_allowed_id_or_a_stored_source_and_nothing_else():
    entries = parse_catalogue("", base_dir=BASE)
    patterns = ["Qwen/*"]
    by_name = resolve(TINY_MODEL, entries=entries, hf_patterns=patterns)
    assert (by_name.name, by_name.source, by_name.context_length) == (TINY_MODEL, "/srv/studio/var/tiny-model", 1024)
    assert resolve("Qwen/Qwen3-0.6B", entries=entries, hf_patterns=patterns).source == "Qwen/Qwen3-0.6B"
    # An agent saved with the directory before the catalogue existed is the entry of that directory.
    assert resolve("/srv/studio/var/tiny-model", entries=entries, hf_patterns=patterns).name == TINY_MODEL
    for value in ("/etc", "/srv/studio/var", "meta-llama/Llama-3.2-1B", "", "var/tiny-model"):
        with pytest.raises(BaseModelChoiceError, match="choose a model"):
            resolve(value, entries=entries, hf_patterns=patterns)
    # A source is what old agents stored; a person choosing today chooses a name.
    with pytest.raises(BaseModelChoiceError, match="choose a model"):
        check_choice("/srv/studio/var/tiny-model", entries=entries, hf_patterns=patterns)


def test_the_web_app_does_not_start_with_a_bad_catalogue():
    env = {**os.environ, "STUDIO_BASE_MODELS": '{"m": {"source": "relative/../dir", "context_length": 8}}',
           "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0 and "ImproperlyConfigured: STUDIO_BASE_MODELS" in result.stderr
    env = {**env, "STUDIO_BASE_MODELS": "", "STUDIO_HF_MODELS": "/models/*"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0 and "ImproperlyConfigured: STUDIO_HF_MODELS" in result.stderr
