"""The tiny offline model's mailbox variant: the same 4-layer Qwen2 family with room for the mailbox's tools.

The tiny 2048 model (training/tiny_model.py) has a 1024-token context and a 512-token vocabulary: the mailbox's
three tool schemas alone take about 1300 of its tokens. This variant has a 4096-token context and its own
byte-level BPE tokenizer (at most 2048 tokens; digits one by one, as Qwen2 splits them) trained on the warm-up
episodes as the chat template renders them, project names left out (a name is a few pieces other words share),
so a whole episode (system prompt, tools, question, three tool calls and their results) takes at most about 820
tokens.

The warm-up is SFT on synthetic solved episodes in the real chat format with tools. Everything the agent must
write that depends on the task is a copy of what it has just seen, each token after the token it follows there:
a model this small can learn to copy, it cannot recall a project's facts from nowhere:
- search_inbox keywords: the question from the word before the project on ("the Iris site visit"), words that
  the fact email holds and no other email holds all of;
- read_email: the id of the hit, as the search result shows it;
- answer: the fact email's first sentence as `text` (it states the answer), its id as `sources`.
Tool results are exactly what the server returns (the same `Mailbox` code). The episodes are every scenario of
120 other seeds' mailboxes, each talking about 30 names drawn from NAME_POOL (other emails, other names, other
answers), except one that gives an answer of the served mailbox (seed 0): no answer or fact email of the served
mailbox, train or held-out, is ever shown (a test checks it; its questions may be asked of other mailboxes, about
another email with another answer). Both splits are equally new to the warm-up, so what RL sharpens on the train
split is what the held-out split needs. With 1,200 episodes the model learnt the answers by heart; with about
10,000 it copies (docs/mcp.md).

The SFT runs first without the tool list in the prompt (a third of the tokens, where the copying is learnt), then
with it in half of each batch (`_passes`). Deterministic for a seed; about 8 minutes on two quiet CPU cores
(`SFT_STEPS`); tests build a quicker variant with fewer steps. No weights are downloaded.
"""
from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

from training.environments.mailbox_server.mailbox import PROJECTS, Mailbox, MailScenario, generate
from training.sft import SFTConfig, sft_train
from training.tiny_model import built_with, save_built

MAILBOX_SYSTEM_PROMPT = ("Answer the question from the mailbox: search_inbox, read_email, then answer with the "
                         "answer and the ids of the emails it comes from.")
SERVED_SEED = 0  # the mailbox the demo's server serves (its default --seed)
BUILD_VERSION = 7  # bump when the recipe changes: cached builds are keyed by it
MODEL_SHAPE = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=4096, initializer_range=0.1, tie_word_embeddings=True, rope_theta=10000.0,
)
VOCAB_SIZE = 2048
SFT_STEPS = 600
BATCH_SIZE = 16
LEARNING_RATE = 3e-3
OTHER_SEEDS = range(1, 121)  # 100 scenarios each (mailbox.generate), about 86 of them in the warm-up
# The other seeds' mailboxes draw their 30 names from these: with the served mailbox's 30 names alone, its 100
# questions nearly exhausted the 120 that can be asked, and the warm-up learnt which name follows "project" by
# heart.
NAME_POOL = PROJECTS + """Acacia Agate Alder Alpine Amber Anchor Apex Arbor Arctic Argon Arrow Ash Aspen Azure Badger
Bamboo Banyan Barley Bison Bluebell Bolt Boreal Bramble Breeze Briar Bronze Brook Buckeye Cairn Canyon Cascade
Cedarwood Cinder Cirrus Citadel Clover Comet Condor Coral Cormorant Corvid Crane Crater Crest Cypress Dahlia Dawn
Drift Dusk Eagle Echo Egret Elm Emerald Equinox Falcon Fern Ferro Finch Flint Fox Galena Garnet Gecko Geyser Glacier
Glade Gorse Halcyon Hawthorn Hazel Heron Hickory Horizon Ibis Indigo Ivory Jade Jasper Jetty Kelp Kiln Koala Lagoon
Lark Laurel Lava Linden Lotus Lynx Magnet Mallow Mangrove Maple Marble Marlin Mesa Mica Mistral Monsoon Moraine Moss
Nebula Nectar Nettle Nova Oak Oasis Obsidian Ocelot Olive Opal Orbit Orchid Osprey Otter Paprika Pebble Pelican Pine
Plover Polar Poplar Prairie Prism Puffin Pulsar Quail Quill Rapids Reef Ridge Rowan Ruby Saffron Sage Sequoia Shale
Sparrow Spruce Summit Swift Talon Teal Thistle Thorn Tide Topaz Torrent Trillium Tulip Vale Violet Walnut Wren Yew
Zinc Zircon""".split()


def _project(scenario: MailScenario) -> str:
    return next(w for w in scenario.question.rstrip("?").split() if w in NAME_POOL)


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


def project_names(seed: int) -> list[str]:
    """The names another seed's mailbox talks about: as many as the served mailbox's, drawn from NAME_POOL."""
    return random.Random(f"names-{seed}").sample(NAME_POOL, len(PROJECTS))


def warmup_episodes(seeds: list[int] | range = OTHER_SEEDS) -> list[list[dict]]:
    """Train episodes: other seeds' mailboxes (other emails, names drawn from NAME_POOL, other answers), none of
    the served mailbox's. A scenario whose answer is one of the served mailbox's (train or held-out) is left out:
    the served train and held-out tasks are equally new to the warm-up. Their questions may be asked of other
    mailboxes (about the same project, with another answer, in another email): the answer is always copied."""
    served_answers = {s.answer for s in generate(SERVED_SEED)[1]}
    episodes = []
    for seed in seeds:
        emails, scenarios = generate(seed, projects=project_names(seed))
        mailbox = Mailbox(emails)
        episodes += [episode(s, mailbox) for s in scenarios if s.answer not in served_answers]
    return episodes


def mailbox_tools() -> list[dict[str, Any]]:
    """The mailbox server's tools in the OpenAI format, as the `mcp` environment lists them (no process)."""
    import anyio

    from training.environments.mailbox_server.server import build_server
    from training.environments.mcp_tools import openai_tools

    async def listed() -> list:
        return await build_server(seed=SERVED_SEED).list_tools()

    return openai_tools(anyio.run(listed))


def build_tokenizer(corpus: list[str]):
    """A byte-level BPE over `corpus`, split as Qwen2's: an email id is "m" and four digits, each its own token, so
    copying an id is copying digits, the same skill for every email (with every id one token, as before build 6,
    RL raised the train questions' ids and not the held-out ones': docs/mcp.md)."""
    from training.tiny_model import build_tokenizer as bpe

    return bpe(corpus, vocab_size=VOCAB_SIZE, max_length=MODEL_SHAPE["max_position_embeddings"])


def _tokenizer_for(episodes: list[list[dict]], tools: list[dict]):
    # Trained on the episodes as the chat template renders them (tool-call markup and JSON keys become whole
    # tokens); a first tokenizer only renders them (its vocabulary does not change the text). Project names are
    # left out of its corpus: a name is a few pieces that other words share, so copying a name is the same skill
    # for every name (with every name one token, as before build 7, RL raised the train questions' names in the
    # search turn and not the held-out ones').
    without_names = re.compile(r"\b(?:" + "|".join(NAME_POOL) + r")\b")
    renderer = build_tokenizer([json.dumps(tools)])
    rendered = [without_names.sub("", renderer.apply_chat_template(e, tools=tools if k < 20 else None, tokenize=False))
                for k, e in enumerate(episodes)]
    return build_tokenizer(rendered)


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
           "project_names", "mailbox_tools", "MAILBOX_SYSTEM_PROMPT"]
