"""The tiny offline model's mailbox variant: the same 4-layer Qwen2 family with room for the mailbox's tools.

The tiny 2048 model (training/tiny_model.py) has a 1024-token context and a 512-token vocabulary: the mailbox's
three tool schemas alone take about 1300 of its tokens. This variant has a 4096-token context and its own
byte-level BPE tokenizer (2048 tokens, every email id one token) trained on the warm-up episodes as the chat
template renders them, so a whole episode (system prompt, tools, question, three tool calls and their results)
takes under 800 tokens.

The warm-up is SFT on synthetic solved episodes in the real chat format with tools. Everything the agent must
write that depends on the task is a copy of what it has just seen, each token after the token it follows there:
a model this small can learn to copy, it cannot recall a project's facts from nowhere:
- search_inbox keywords: the question from the word before the project on ("the Iris site visit"), words that
  the fact email holds and no other email holds all of;
- read_email: the id of the hit, as the search result shows it;
- answer: the fact email's first sentence as `text` (it states the answer), its id as `sources`.
Tool results are exactly what the server returns (the same `Mailbox` code). The episodes are the served
mailbox's (seed 0) train scenarios and every scenario of 120 other seeds' mailboxes (other emails, other
answers) except one repeating a held-out question or answer of the served mailbox: the held-out projects' names
are known words, but no held-out task, answer or email is ever shown (a test checks it). With 1,200 episodes the
model learnt the train answers by heart; with about 12,000 it copies, on held-out questions too (docs/mcp.md).

The SFT runs first without the tool list in the prompt (a third of the tokens, where the copying is learnt), then
with it in half of each batch (`_passes`). Deterministic for a seed; about 6 minutes on two quiet CPU cores
(`SFT_STEPS`); tests build a quicker variant with fewer steps. No weights are downloaded.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from training.environments.mailbox_server.mailbox import PROJECTS, Mailbox, MailScenario, generate
from training.sft import SFTConfig, sft_train
from training.tiny_model import built_with, save_built

MAILBOX_SYSTEM_PROMPT = ("Answer the question from the mailbox: search_inbox, read_email, then answer with the "
                         "answer and the ids of the emails it comes from.")
SERVED_SEED = 0  # the mailbox the demo's server serves (its default --seed)
BUILD_VERSION = 5  # bump when the recipe changes: cached builds are keyed by it
MODEL_SHAPE = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, initializer_range=0.1, tie_word_embeddings=True, rope_theta=10000.0,
)
VOCAB_SIZE = 2048
SFT_STEPS = 450
BATCH_SIZE = 16
LEARNING_RATE = 3e-3
EMAILS = 300  # mailbox.generate's default count: ids m0000 to m0299
OTHER_SEEDS = range(1, 121)  # 100 scenarios each (mailbox.generate)


def held_out_projects(seed: int = SERVED_SEED) -> set[str]:
    """The projects the served mailbox's held-out scenarios ask about."""
    return {_project(s) for s in generate(seed)[1] if s.split == "held_out"}


def _project(scenario: MailScenario) -> str:
    return next(w for w in scenario.question.rstrip("?").split() if w in PROJECTS)


def search_keywords(scenario: MailScenario) -> str:
    """The question from the word before its project to its end ("the Iris site visit"): words the fact email
    holds, so the search finds it; the model copies them from the question, each after the word it follows there."""
    words = scenario.question.rstrip("?").split()
    return " ".join(words[words.index(_project(scenario)) - 1:])


def answer_text(email: dict[str, str]) -> str:
    """The body's first sentence, which states the fact (mailbox.FACTS): the answer copies it from the email."""
    return email["body"].split(". ")[0].rstrip(".")


def _call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def episode(scenario: MailScenario, mailbox: Mailbox, system_prompt: str = MAILBOX_SYSTEM_PROMPT) -> list[dict]:
    """One solved episode in the chat format with tools; tool results are the server's own (same code)."""
    keywords = search_keywords(scenario)
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
         "tool_calls": [_call("answer", {"text": answer_text(email), "sources": [source]}, 2)]},
    ]


def warmup_episodes(seeds: list[int] | range = OTHER_SEEDS) -> list[list[dict]]:
    """Train episodes: the served mailbox's train scenarios and other seeds' scenarios. Other seeds' mailboxes
    are other emails with other answers; only a scenario that repeats a held-out question of the served mailbox
    is left out, so the held-out projects' names are known words, but no held-out task, answer or email is seen."""
    served = generate(SERVED_SEED)
    held = [s for s in served[1] if s.split == "held_out"]
    questions, answers = {s.question for s in held}, {s.answer for s in held}
    episodes = []
    for seed in [SERVED_SEED, *seeds]:
        emails, scenarios = served if seed == SERVED_SEED else generate(seed)
        mailbox = Mailbox(emails)
        for s in scenarios:
            if (seed == SERVED_SEED and s.split != "train") or s.question in questions or s.answer in answers:
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


def email_ids(count: int = EMAILS) -> list[str]:
    return [f"m{i:04d}" for i in range(count)]


def build_tokenizer(corpus: list[str]):
    """A byte-level BPE over `corpus` (split as Qwen2's), with every email id one token (copying an id is
    copying one token)."""
    from training.tiny_model import build_tokenizer as bpe

    return bpe(corpus, vocab_size=VOCAB_SIZE, whole_tokens=email_ids(),
               max_length=MODEL_SHAPE["max_position_embeddings"])


def _tokenizer_for(episodes: list[list[dict]], tools: list[dict]):
    # Trained on the episodes as the chat template renders them (tool-call markup and JSON keys become whole
    # tokens); a first tokenizer only renders them. Project names are vocabulary, not tasks: whole words each.
    plain = [m["content"] + json.dumps(m.get("tool_calls", [])) for e in episodes for m in e]
    renderer = build_tokenizer(plain + [json.dumps(tools), " ".join(PROJECTS)])
    rendered = [renderer.apply_chat_template(e, tools=tools if k < 20 else None, tokenize=False)
                for k, e in enumerate(episodes)]
    return build_tokenizer(rendered + [" ".join(PROJECTS)] * 20)


def _passes(sft_steps: int, seed: int) -> list[SFTConfig]:
    """The copying is learnt without the tool list in the prompt (a third of the tokens): `sft_steps` at
    LEARNING_RATE. Then a third as many steps at a third of the rate, the same optimiser, half of each batch with
    the tool list, carry it over to the prompt the agent sees. (A pass with the tools alone, or a fresh optimiser,
    undid the copy: docs/mcp.md.)"""
    return [SFTConfig(steps=sft_steps, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE, seed=seed,
                      tools_share=0.0),
            SFTConfig(steps=max(1, sft_steps // 3), batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE / 3,
                      seed=seed + 1, tools_share=0.5)]


def build_tiny_mailbox_model(out_dir: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS,
                             quiet: bool = False) -> Path:
    """Warm-up: `sft_steps` on the episodes without the tool list in the prompt, then a third as many with it in
    half of each batch (`_passes`)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    tools = mailbox_tools()
    episodes = warmup_episodes()
    tokenizer = _tokenizer_for(episodes, tools)
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **MODEL_SHAPE)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    for sft in _passes(sft_steps, seed):
        sft.max_length, sft.log_every = MODEL_SHAPE["max_position_embeddings"], 0 if quiet else 50
        sft_train(model, tokenizer, episodes, sft, tools=tools, optimizer=optimizer)
    save_built(model, tokenizer, out, **_recipe(seed, sft_steps))
    if not quiet:
        print(f"tiny mailbox model saved to {out} ({sum(p.numel() for p in model.parameters())} parameters, "
              f"{len(episodes)} warm-up episodes)", file=sys.stderr)
    return out


def ensure_tiny_mailbox_model(path: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS) -> Path:
    """The tiny mailbox model at `path`, built first if it is missing or from another recipe. Tests pass fewer
    `sft_steps`: a quicker build that has the episode's shape but has not learnt to copy yet."""
    p = Path(path)
    if built_with(p, **_recipe(seed, sft_steps)):
        return p
    return build_tiny_mailbox_model(p, seed=seed, sft_steps=sft_steps)


def _recipe(seed: int, sft_steps: int) -> dict[str, Any]:
    return {"variant": "mailbox", "build_version": BUILD_VERSION, "seed": seed, "sft_steps": sft_steps}


__all__ = ["build_tiny_mailbox_model", "ensure_tiny_mailbox_model", "episode", "warmup_episodes",
           "held_out_projects", "mailbox_tools", "MAILBOX_SYSTEM_PROMPT"]
