"""Probe a warm-up recipe for the tiny mailbox model, outside the RL loop (a measurement, not a test).

    python -m bench.mailbox_recipe_probe --seeds 120 --phase notools:900:16:3e-3 --phase mix0.5:300:16:1e-3:keep

Each --phase is PROMPT:STEPS:BATCH:LR[:keep]: PROMPT is `notools`, `tools` or `mixF` (a share F of each batch
with the tool list in the prompt); `keep` keeps the previous phase's optimiser. After every phase (and every
--eval-every steps) it prints, with the tool list in the prompt as the agent sees it, on the served mailbox's 20
held-out scenarios and its train scenarios (12 of them for the turns, all 80 for the success): per assistant
turn the share of greedy-exact turns and the mean probability of the turn (teacher-forced), and the success rate
of sampled episodes at temperature 1 (the mailbox in-process, 4 turns of at most 56 tokens; success: the answer
contains the reference).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

from training.environments.mailbox_server.mailbox import Mailbox, generate
from training.fixtures.tiny_mailbox_model import MODEL_SHAPE, OTHER_SEEDS, _tokenizer_for, episode, warmup_episodes
from training.model.chat_format import encode_conversation, pad_token_id, render
from training.sft.whole_model import pad_batch

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def words(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def turn_stats(model, tokenizer, episodes, tools, device):
    """Per assistant turn: (greedy-exact share, mean probability), teacher-forced."""
    import torch
    exact, prob = [[], [], []], [[], [], []]
    for ep in episodes:
        ids, mask = encode_conversation(tokenizer, ep, tools)
        x = torch.tensor([ids], device=device)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), -1)
        tgt = x[0, 1:]
        m = torch.tensor(mask[1:], device=device).bool()
        lp = logp.gather(1, tgt[:, None])[:, 0]
        hit = logp.argmax(-1) == tgt
        # split the masked positions into runs: one run per assistant turn
        pos = m.nonzero()[:, 0].tolist()
        runs, cur = [], [pos[0]]
        for p in pos[1:]:
            if p == cur[-1] + 1:
                cur.append(p)
            else:
                runs.append(cur)
                cur = [p]
        runs.append(cur)
        for k, run in enumerate(runs[:3]):
            exact[k].append(float(hit[run].all()))
            prob[k].append(float(lp[run].sum().exp()))
    return [(sum(e) / len(e), sum(p) / len(p)) for e, p in zip(exact, prob)]


def rollout(model, tokenizer, scenario, mailbox, tools, system_prompt, device, rng_seed):
    import torch
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": scenario.question}]
    eos = tokenizer.eos_token_id
    torch.manual_seed(rng_seed)
    for turn in range(4):
        prompt = render(tokenizer, messages, tools, generation_prompt=True)
        x = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
        with torch.no_grad():
            out = model.generate(x, max_new_tokens=56, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, x.shape[1]:], skip_special_tokens=True)
        calls = []
        for raw in TOOL_CALL.findall(text):
            try:
                p = json.loads(raw)
                calls.append((str(p["name"]), p.get("arguments", {})))
            except (ValueError, KeyError, TypeError):
                pass
        if not calls:
            return 0.0
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{turn}{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)]})
        for i, (name, args) in enumerate(calls):
            if not isinstance(args, dict):
                args = {}
            if name == "answer":
                text = str(args.get("text", ""))
                ok = words(scenario.answer) and f" {words(scenario.answer)} " in f" {words(text)} "
                return 1.0 if ok else 0.0
            try:
                if name == "search_inbox":
                    res = mailbox.search(keywords=str(args.get("keywords", "")))
                elif name == "read_email":
                    res = mailbox.read(str(args.get("id", "")))
                else:
                    res = {"error": "unknown tool"}
            except Exception as e:  # noqa: BLE001
                res = {"error": str(e)}
            messages.append({"role": "tool", "tool_call_id": f"c{turn}{i}", "content": json.dumps(res)})
    return 0.0


def evaluate(model, tokenizer, tools, system_prompt, device, samples):
    emails, scenarios = generate(0)
    mailbox = Mailbox(emails)
    held = [s for s in scenarios if s.split == "held_out"]
    train = [s for s in scenarios if s.split == "train"]
    model.eval()
    out = {}
    for name, group in (("held", held), ("train", train[:12])):
        eps = [episode(s, mailbox, system_prompt) for s in group]
        out[name + "_turns"] = turn_stats(model, tokenizer, eps, tools, device)
    for name, group, n in (("held", held, samples), ("train", train, 1)):
        rewards = [rollout(model, tokenizer, s, mailbox, tools, system_prompt, device, 1000 * k + j)
                   for j, s in enumerate(group) for k in range(n)]
        out[name + "_success"] = sum(rewards) / len(rewards)
    model.train()
    return out


def main(argv=None):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.fixtures.tiny_mailbox_model import MAILBOX_SYSTEM_PROMPT
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=len(OTHER_SEEDS))
    ap.add_argument("--phase", action="append", default=[])
    ap.add_argument("--load", help="evaluate this built model instead (no --phase)")
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tools-json")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save")
    args = ap.parse_args(argv)
    t0 = time.time()
    fmt = lambda ts: " ".join(f"{e:.2f}/{p:.3f}" for e, p in ts)  # noqa: E731
    if args.tools_json:
        tools = json.loads(Path(args.tools_json).read_text())
    else:
        from training.fixtures.tiny_mailbox_model import mailbox_tools
        tools = mailbox_tools()
    if args.load:
        from transformers import AutoTokenizer
        model = Qwen2ForCausalLM.from_pretrained(args.load).to(args.device)
        r = evaluate(model, AutoTokenizer.from_pretrained(args.load), tools, MAILBOX_SYSTEM_PROMPT, args.device,
                     args.samples)
        print(f"[probe] EVAL {args.load}: held turns {fmt(r['held_turns'])} success {r['held_success']:.3f} | "
              f"train turns {fmt(r['train_turns'])} success {r['train_success']:.3f}", flush=True)
        return 0
    episodes = warmup_episodes(range(1, args.seeds + 1))
    tokenizer = _tokenizer_for(episodes, tools)
    torch.manual_seed(args.seed)
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **MODEL_SHAPE)
    model = Qwen2ForCausalLM(config).to(args.device)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    plain = [encode_conversation(tokenizer, e, None) for e in episodes]
    with_tools = [encode_conversation(tokenizer, e, tools) for e in episodes]
    print(f"[probe] {len(episodes)} episodes, prompt tokens without/with tools "
          f"{len(plain[0][0])}/{len(with_tools[0][0])}, setup {time.time() - t0:.0f}s", flush=True)
    rng = random.Random(args.seed)
    pad = pad_token_id(tokenizer)
    optimizer = None
    done = 0
    for spec in args.phase:
        parts = spec.split(":")
        prompt, steps, batch, lr = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
        share = 0.0 if prompt == "notools" else 1.0 if prompt == "tools" else float(prompt[3:])
        if optimizer is None or "keep" not in parts[4:]:
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        for g in optimizer.param_groups:
            g["lr"] = lr
        losses = []
        for step in range(steps):
            picks = rng.sample(range(len(episodes)), batch)
            n_tools = round(share * batch)
            rows = [with_tools[i] if k < n_tools else plain[i] for k, i in enumerate(picks)]
            input_ids, loss_mask, attention = (t.to(args.device) for t in pad_batch(rows, pad))
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
            targets, mask = input_ids[:, 1:], loss_mask[:, 1:]
            tl = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                                                   reduction="none").view_as(mask)
            loss = (tl * mask).sum() / mask.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            done += 1
            if (step + 1) % 100 == 0:
                print(f"[probe] {spec} step {step + 1} loss {sum(losses[-100:]) / 100:.3f} "
                      f"({time.time() - t0:.0f}s)", flush=True)
            if (step + 1) % args.eval_every == 0 or step + 1 == steps:
                r = evaluate(model, tokenizer, tools, MAILBOX_SYSTEM_PROMPT, args.device, args.samples)
                print(f"[probe] EVAL {spec} step {step + 1} (total {done}): held turns {fmt(r['held_turns'])} "
                      f"success {r['held_success']:.3f} | train turns {fmt(r['train_turns'])} "
                      f"success {r['train_success']:.3f} ({time.time() - t0:.0f}s)", flush=True)
    if args.save:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
