"""training.model.preflight: the base model is checked before a run starts (exists, loads, fits), in plain sentences,
and `python -m training run` fails fast with the same messages."""
from __future__ import annotations

import json
import shutil

from training.__main__ import main
from training.config import parse_run_config
from training.model.preflight import preflight


def _config(base_model, **extra):
    return parse_run_config({"base_model": str(base_model), "scenarios": [{"id": "s1", "user_message": "Hi?"}],
                             **extra})


def test_the_tiny_model_passes(tiny_model_dir):
    assert preflight(_config(tiny_model_dir)) == []


def test_a_missing_local_directory_is_named(tmp_path):
    problems = preflight(_config(tmp_path / "no-such-model"))
    assert len(problems) == 1
    assert "no such directory" in problems[0] and str(tmp_path / "no-such-model") in problems[0]
    assert "workers" in problems[0]


def test_a_directory_without_config_json_is_refused(tmp_path, tiny_model_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "config.json").unlink()
    problems = preflight(_config(model))
    assert len(problems) == 1 and "no loadable config.json" in problems[0]


def test_a_directory_without_tokenizer_files_is_refused(tmp_path, tiny_model_dir):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tiny_model_dir / "config.json", model / "config.json")
    assert preflight(_config(model)) == [f"base model {model}: no tokenizer files "
                                         "(tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json)"]


def test_an_uncached_hub_id_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    problems = preflight(_config("someorg/not-cached-model"))
    assert len(problems) == 1
    assert "not-cached-model" in problems[0] and "local Hugging Face cache" in problems[0]
    assert str(tmp_path / "hub") in problems[0] and "workers" in problems[0]


def test_max_tokens_beyond_the_models_context_is_refused(tiny_model_dir):
    context = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    problems = preflight(_config(tiny_model_dir, sampling={"max_tokens": context + 1}))
    assert problems == [f"sampling.max_tokens {context + 1} is more than base model {tiny_model_dir} can hold "
                        f"({context} tokens of context); lower the agent's max tokens"]
    # max_tokens equal to the context is refused too, now for the prompt it leaves no room for
    # (tests/training/test_prompt_budget.py); a max_tokens that leaves the prompt its room passes.
    assert preflight(_config(tiny_model_dir, sampling={"max_tokens": context}))[0].startswith(
        "the prompt does not fit the model")
    assert preflight(_config(tiny_model_dir, sampling={"max_tokens": context // 2})) == []


def test_a_model_that_does_not_generate_text_is_refused(tmp_path, tiny_model_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    from transformers import T5Config

    T5Config(vocab_size=512, d_model=32, num_layers=1, num_heads=2, d_ff=64).save_pretrained(model)
    problems = preflight(_config(model))
    assert problems == [f"base model {model}: a t5 model does not generate text "
                        "(training needs a causal language model)"]


def test_the_cli_fails_fast_with_the_same_message(tmp_path, capsys):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"base_model": str(tmp_path / "gone"), "output_dir": str(tmp_path / "out"),
                                  "scenarios": [{"id": "s1", "user_message": "Hi?"}]}))
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"error: base model {tmp_path / 'gone'}: no such directory on this machine" in err
    assert not (tmp_path / "out").exists()  # nothing started
