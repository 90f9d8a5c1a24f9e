"""The tiny offline model's mailbox variant: the same 4-layer Qwen2 family with room for the mailbox's tools.

The tiny 2048 model (training/tiny_model.py) has a 1024-token context and a 512-token vocabulary: the mailbox's
three tool schemas alone take about 1300 of its tokens. This variant has a 4096-token context and its own
byte-level BPE tokenizer (2048 tokens) trained on the mailbox's tool list and warm-up episodes, so a whole
episode (system prompt, tools, question, three tool calls and their results) takes well under 1000 tokens.

The warm-up is a short SFT pass on synthetic episodes in the real chat format with tools: search_inbox with the
question's project and topic word, read_email of the hit, answer(text, sources). The episodes come from the
train scenarios of the served mailbox (seed 0) and from mailboxes of other seeds, leaving out every scenario
about a project that a held-out scenario of the served mailbox asks about: the held-out tasks, their projects
and their emails never appear in the warm-up. Tool results are exactly what the server returns (the same
`Mailbox` code). Deterministic for a seed; well under a minute on two CPU cores. No weights are downloaded.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from training.chat_format import CHAT_TEMPLATE, END_OF_TURN
from training.environments.mailbox_server.mailbox import PROJECTS, Mailbox, MailScenario, generate
from training.sft import SFTConfig, sft_train

MAILBOX_SYSTEM_PROMPT = ("Answer the question from the mailbox: search_inbox, read_email, then answer with the "
                         "answer and the ids of the emails it comes from.")
SERVED_SEED = 0  # the mailbox the demo's server serves (its default --seed)
BUILD_VERSION = 1  # bump when the recipe changes: cached builds are keyed by it
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", END_OF_TURN]
MODEL_SHAPE = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, initializer_range=0.1, tie_word_embeddings=True, rope_theta=10000.0,
)
VOCAB_SIZE = 2048
SFT_STEPS = 60
OTHER_SEEDS = range(1, 41)
# The topic word of each question template (mailbox.FACTS): with the project it finds the fact email alone.
TOPIC_WORDS = ("budget", "room", "flight", "deadline")


def held_out_projects(seed: int = SERVED_SEED) -> set[str]:
    """The projects the served mailbox's held-out scenarios ask about: kept out of the warm-up entirely."""
    return {_project(s) for s in generate(seed)[1] if s.split == "held_out"}


def _project(scenario: MailScenario) -> str:
    return next(w for w in scenario.question.rstrip("?").split() if w in PROJECTS)


def _keywords(scenario: MailScenario) -> str:
    words = scenario.question.lower().rstrip("?").split()
    topic = next(w for w in TOPIC_WORDS if w in words)
    return f"{_project(scenario)} {topic}"


def _call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def episode(scenario: MailScenario, mailbox: Mailbox, system_prompt: str = MAILBOX_SYSTEM_PROMPT) -> list[dict]:
    """One solved episode in the chat format with tools; tool results are the server's own (same code)."""
    keywords = _keywords(scenario)
    hits = mailbox.search(keywords=keywords)
    (source,) = scenario.source_ids
    email = mailbox.read(source)
    return [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": scenario.question},
        {"role": "assistant", "content": "", "tool_calls": [_call("search_inbox", {"keywords": keywords}, 0)]},
        {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(hits)},
        {"role": "assistant", "content": "", "tool_calls": [_call("read_email", {"id": source}, 1)]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(email)},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("answer", {"text": scenario.answer, "sources": [source]}, 2)]},
    ]


def warmup_episodes(seeds: list[int] | range = OTHER_SEEDS) -> list[list[dict]]:
    """Train episodes: the served mailbox's train scenarios and other seeds' scenarios, none about a held-out
    project of the served mailbox."""
    excluded = held_out_projects()
    episodes = []
    for seed in [SERVED_SEED, *seeds]:
        emails, scenarios = generate(seed)
        mailbox = Mailbox(emails)
        for s in scenarios:
            if _project(s) in excluded or (seed == SERVED_SEED and s.split != "train"):
                continue
            episodes.append(episode(s, mailbox))
    return episodes


def mailbox_tools() -> list[dict[str, Any]]:
    """The mailbox server's tools in the OpenAI format, as the `mcp` environment lists them (no process)."""
    import anyio

    from training.environments.mailbox_server.server import build_server
    from training.environments.mcp_session import openai_tools

    async def listed() -> list:
        return await build_server(seed=SERVED_SEED).list_tools()

    return openai_tools(anyio.run(listed))


def build_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=None, eos_token=END_OF_TURN, pad_token="<|endoftext|>",
        unk_token=None, model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_mailbox_model(out_dir: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS,
                             quiet: bool = False) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    tools = mailbox_tools()
    episodes = warmup_episodes()
    rendered = [json.dumps(tools)] * 20 + [m["content"] + json.dumps(m.get("tool_calls", []))
                                           for e in episodes for m in e]
    # The generator's project names are vocabulary (not tasks): whole-word tokens for every one of them.
    rendered += [" ".join(PROJECTS)] * 20
    tokenizer = build_tokenizer(rendered)
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **MODEL_SHAPE)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    sft_train(model, tokenizer, episodes, SFTConfig(steps=sft_steps, seed=seed, batch_size=8,
                                                    max_length=MODEL_SHAPE["max_position_embeddings"],
                                                    log_every=0 if quiet else 10), tools=tools)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "rubric_studio.json").write_text(json.dumps({"variant": "mailbox", "build_version": BUILD_VERSION,
                                                        "seed": seed, "sft_steps": sft_steps}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # a crash mid-build never leaves a half-written model behind
    if not quiet:
        print(f"tiny mailbox model saved to {out} ({sum(p.numel() for p in model.parameters())} parameters, "
              f"{len(episodes)} warm-up episodes)", file=sys.stderr)
    return out


def ensure_tiny_mailbox_model(path: str | Path, *, seed: int = 0) -> Path:
    """The tiny mailbox model at `path`, built first if it is missing or from an older recipe."""
    p = Path(path)
    meta = p / "rubric_studio.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        if info.get("variant") == "mailbox" and info.get("build_version") == BUILD_VERSION \
                and info.get("seed") == seed:
            return p
    return build_tiny_mailbox_model(p, seed=seed)


__all__ = ["build_tiny_mailbox_model", "ensure_tiny_mailbox_model", "episode", "warmup_episodes",
           "held_out_projects", "mailbox_tools", "MAILBOX_SYSTEM_PROMPT"]
