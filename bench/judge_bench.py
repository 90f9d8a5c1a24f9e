"""Judge benchmark: prompt size with the shared prefix, and throughput under a concurrency limit.

    python -m bench.judge_bench            (about 20 s; no network, no GPU)

1. Prompt tokens per group when the messages common to every trajectory are sent once (what the judge does)
   versus every trajectory sent whole, for groups of 4, 8 and 16 multi-turn trajectories. Tokens are counted
   with tiktoken's cl100k_base encoding, loaded offline from the copy bundled with litellm; only message
   contents are counted (per-message framing tokens are the same few in both layouts).
2. Judge throughput in groups/s against the HTTP judge double with a fixed 50 ms latency per request:
   one group at a time versus a concurrency limit of 8, through real litellm and real HTTP; best of 3 rounds.
   The ideal concurrent ratio is 8x; the gap is the client's CPU cost per call (litellm's request building,
   logging and cost lookup, ~10-15 ms) which concurrency cannot overlap on a busy 2-core machine.
3. Our judge request against OpenPipe ART's RULER request for the same groups (G = 4, 8, 16; shared system +
   user prefix, 3 assistant turns): both requests are captured as HTTP bodies at the judge double, and counted
   with cl100k_base as message contents plus the JSON of `response_format` (the schema the judge must read).
   ART's side is ART's own code: `ruler()` from `art/rewards/ruler.py` of openpipe-art 0.5.23, installed
   without dependencies into `.venv-art` (`make art-venv`). ART needs Python >= 3.12 for the whole package;
   its ruler module runs on ours, so the module file is loaded alone (with litellm, openai, pydantic and rich
   from our venv) and the package's heavy `__init__` (trainer, torch) is replaced by the three names the
   module reads (its annotations' types and the metrics builder it looks up after each call). Without
   `.venv-art` this section says so and is skipped.
4. The cacheable prefix per judge request: the tokens of the run-constant part of the request (reply schema and
   system message: instructions, rubric, tools), as each call records them (`JudgeCall.prefix_tokens` /
   `counted_tokens`, litellm's tokenizer), for three workloads: the demo's 2048 groups (G = 8, 6 moves, the demo
   rubric), groups of the MCP mailbox played for real over stdio by a scripted agent (G = 4, with its 3 tools),
   and the RULER comparison's groups above (G = 4, 8, 16). "before" is the part that was shared before the
   prompt was reordered for caching (schema, instructions, rubric and the count of scores, which ended the
   system message; the tools sat after the per-group context), at its best: for groups of equal size.
Both are printed as ratios against the baseline measured in the same run.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]

from judging import score_group, score_groups  # noqa: E402
from judging.prompt import DEFAULT_RUBRIC, build_messages, common_prefix_length  # noqa: E402
from tests.judge_double import JudgeDouble  # noqa: E402

CONTEXT = (
    "Retrieved context:\n"
    "[1] Refunds are available within 30 days of purchase for physical products in their original condition.\n"
    "[2] Digital products are non-refundable once downloaded or streamed.\n"
    "[3] To start a refund, email support@example.com with the order number; refunds reach the original "
    "payment method within 5-10 business days.\n"
    "[4] Shipping costs are refunded only when the item arrived damaged or was not what was ordered.\n"
    "[5] Store credit may be offered instead of a refund for orders paid with gift cards.\n"
)
SYSTEM = ("You are the support agent of an online shop. Answer using only the retrieved context. If the context "
          "does not answer the question, say so and offer to connect the customer with a human.\n\n" + CONTEXT)
USER = "Hi, I bought a course video last week and a lamp three weeks ago. Can I get my money back for both?"


def trajectory(i: int, turns: int = 3) -> list[dict[str, Any]]:
    """A multi-turn conversation: shared system + first user message, then turns that differ per attempt."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": (
            f"(attempt {i}, turn {t}) The lamp was bought three weeks ago, within the 30-day window, so it can "
            "be refunded if it is in its original condition. The course video is a digital product; if you "
            "have downloaded or streamed it, it is not refundable. Email support@example.com with your order "
            f"number to start the lamp refund. {'Anything else I can help with?' if i % 2 else ''}")})
        if t < turns - 1:
            msgs.append({"role": "user", "content": f"Thanks. Follow-up {t}: how long does the refund take?"})
    return msgs


def prompt_tokens(message_lists: list[list[dict[str, Any]]], *, share_prefix: bool, encode: Any) -> int:
    prefix = common_prefix_length(message_lists) if share_prefix else 0
    messages, _ = build_messages(rubric=DEFAULT_RUBRIC, criteria=None, shared=message_lists[0][:prefix],
                                 remainders=[m[prefix:] for m in message_lists], tools=None, reference=None)
    return sum(len(encode(m["content"])) for m in messages)


def bench_prompt_tokens() -> list[tuple[int, int, int]]:
    from litellm.litellm_core_utils.default_encoding import encoding  # cl100k_base, bundled: works offline

    rows = []
    for n in (4, 8, 16):
        group = [trajectory(i) for i in range(n)]
        rows.append((n, prompt_tokens(group, share_prefix=True, encode=encoding.encode),
                     prompt_tokens(group, share_prefix=False, encode=encoding.encode)))
    return rows


def art_ruler() -> Any | None:
    """ART's real `ruler` function, loaded from `.venv-art` (see the module docstring); None if not installed."""
    found = sorted(ROOT.glob(".venv-art/lib/python*/site-packages/art/rewards/ruler.py"))
    if not found:
        return None
    if "art" not in sys.modules:  # stands in for the package __init__ only
        shim = types.ModuleType("art")
        shim.Tools = list  # type: ignore[attr-defined]
        shim.Trajectory = shim.TrajectoryGroup = object  # type: ignore[attr-defined]
        metrics = types.ModuleType("art.metrics")  # ruler looks up an active metrics builder after each call;

        class MetricsBuilder:  # outside ART's training loop there is none, which it handles as LookupError
            @staticmethod
            def get_active() -> Any:
                raise LookupError("no active metrics builder")

        metrics.MetricsBuilder = MetricsBuilder  # type: ignore[attr-defined]
        shim.metrics = metrics  # type: ignore[attr-defined]
        sys.modules["art"], sys.modules["art.metrics"] = shim, metrics
    spec = importlib.util.spec_from_file_location("art_rewards_ruler", found[0])
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.ruler


def request_tokens(body: dict[str, Any], encode: Any) -> int:
    """What the judge reads: every message's content plus the response schema, as sent over HTTP."""
    contents = sum(len(encode(str(m.get("content") or ""))) for m in body["messages"])
    return contents + len(encode(json.dumps(body.get("response_format") or {})))


async def bench_vs_ruler(ruler: Any) -> list[tuple[int, int, int]]:
    """(G, our tokens, RULER tokens) per group size, each side's first request captured at the double."""
    from litellm.litellm_core_utils.default_encoding import encoding

    rows = []
    with JudgeDouble(responder=JudgeDouble.score_by(lambda text: min(1.0, len(text) / 5000))) as double:
        for n in (4, 8, 16):
            group = [trajectory(i) for i in range(n)]
            double.requests.clear()
            await score_group(group, double.model, extra_litellm_params=double.litellm_params, cache=False)
            ours = request_tokens(double.requests[0].body, encoding.encode)
            double.requests.clear()
            await ruler(group, double.model, extra_litellm_params=double.litellm_params)
            theirs = request_tokens(double.requests[0].body, encoding.encode)
            rows.append((n, ours, theirs))
    return rows


async def bench_throughput(n_groups: int = 32, latency_s: float = 0.05, concurrency: int = 8,
                           repeats: int = 3) -> dict[str, float]:
    """groups/s, sequential vs concurrent. The double runs in its own process so that serving it does not
    compete with the judge client for this process's GIL (it would halve the concurrent figure)."""
    groups = [[trajectory(g * 10 + i, turns=1) for i in range(8)] for g in range(n_groups)]
    proc = subprocess.Popen([sys.executable, "-m", "tests.judge_double", "--latency", str(latency_s)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        api_base = proc.stdout.readline().strip()  # type: ignore[union-attr]
        kwargs: dict[str, Any] = {"extra_litellm_params": {"api_base": api_base, "api_key": "bench"},
                                  "cache": False}
        await score_groups(groups[:2], JudgeDouble.model, concurrency=2, **kwargs)  # warm up litellm's client
        results: dict[str, float] = {}
        for _round in range(repeats):  # best of `repeats`: the machine is shared, noise only ever slows
            for label, limit in (("sequential", 1), (f"concurrency {concurrency}", concurrency)):
                t0 = time.perf_counter()
                await score_groups(groups, JudgeDouble.model, concurrency=limit, **kwargs)
                results[label] = max(results.get(label, 0.0), n_groups / (time.perf_counter() - t0))
        return results
    finally:
        proc.terminate()
        proc.wait(timeout=10)


DEMO_RUBRIC = ("Score each attempt at the 2048 move. A legal move that keeps the board open beats an illegal or "
               "malformed one; answers must use the requested format and nothing else.")  # studio_demo's rubric


def demo_groups(n_groups: int = 3, size: int = 8, turns: int = 6) -> list[list[list[dict[str, Any]]]]:
    """Groups shaped like the demo's: one starting board per group (as the environment seeds it), each
    attempt a different sequence of legal moves, a board shown after each move."""
    from training.environments import game_2048_rules as rules
    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE

    groups = []
    for g in range(n_groups):
        group = []
        for t in range(size):
            rng, choose = random.Random(1000 + g), random.Random(f"{g}:{t}")
            board = rules.new_board(4, rng)
            msgs = [{"role": "system", "content": DEMO_SYSTEM_PROMPT},
                    {"role": "user", "content": f"{DEMO_USER_MESSAGE}\n{rules.render(board)}"}]
            for _ in range(turns):
                if not rules.legal_moves(board):
                    break
                move = choose.choice(rules.legal_moves(board))
                msgs.append({"role": "assistant", "content": f"<move>{move}</move>"})
                board, _ = rules.slide(board, move)
                rules.spawn(board, rng)
                msgs.append({"role": "user", "content": f"Board:\n{rules.render(board)}"})
            group.append(msgs)
        groups.append(group)
    return groups


async def mailbox_groups(n_groups: int = 3) -> list[tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]]:
    """(message lists, tools) per group: the mcp environment against the real mailbox server over stdio, driven
    by a scripted agent that answers right, answers wrong, answers without reading, or searches twice."""
    from tests.training.scripted_policy import MODEL, scripted_client
    from training.config import SamplingConfig
    from training.environments import RolloutConfig, get_environment, parse_options
    from training.environments.mailbox_server.mailbox import generate
    from training.types import Scenario

    env = get_environment("mcp")
    opts = parse_options(env, {"server": {"transport": "stdio", "command": sys.executable,
                                          "args": ["-m", "training.environments.mailbox_server"]},
                               "reward": "reference"})
    system = "You answer questions about the company's email. Use the tools; cite the emails you used."

    def variants(s: Any) -> list[list[Any]]:
        project = next(w for w in s.question.rstrip("?").split() if w[0].isupper() and w not in ("What", "In"))
        (source,) = s.source_ids
        search, read = [("search_inbox", {"keywords": project})], [("read_email", {"id": source})]
        return [[search, read, [("answer", {"text": f"It is {s.answer}.", "sources": [source]})]],
                [search, read, [("answer", {"text": "I could not find it.", "sources": []})]],
                [search, [("answer", {"text": f"Probably {s.answer}.", "sources": [source]})]],
                [[("search_inbox", {"keywords": "budget"})], search, read,
                 [("answer", {"text": f"{s.answer}.", "sources": [source]})]]]

    groups = []
    for s in generate(0)[1][:n_groups]:
        scenario = Scenario(id=s.id, user_message=s.question, reference=s.answer,
                            metadata={"source_ids": s.source_ids})
        trajectories = await asyncio.gather(*[
            env.rollout(scripted_client(replies), MODEL, scenario, RolloutConfig(system, SamplingConfig(), opts))
            for replies in variants(s)])
        groups.append(([t.messages for t in trajectories], trajectories[0].tools))
    return groups


async def bench_prefix_share() -> list[tuple[str, int, int, int, int]]:
    """(workload, G, prefix tokens before, prefix tokens now, request tokens) per request, from the calls'
    own records. "before": the schema and the old system message (instructions, rubric, then the count of
    scores; no tools), counted the same way: the old prefix at its best, for a run whose groups all show the
    judge the same number of distinct trajectories."""
    from judging.llm import count_prefix
    from judging.prompt import count_line, reply_model, response_format, system_message

    fmt = response_format(reply_model(None))
    workloads: list[tuple[str, list[list[dict[str, Any]]], list[dict[str, Any]] | None, str | None]] = []
    workloads += [("demo 2048", g, None, DEMO_RUBRIC) for g in demo_groups()]
    workloads += [("MCP mailbox", g, tools, None) for g, tools in await mailbox_groups()]
    workloads += [("anchor", [trajectory(i) for i in range(n)], None, None) for n in (4, 8, 16)]
    rows = []
    with JudgeDouble(responder=JudgeDouble.score_by(lambda text: min(1.0, len(text) / 5000))) as double:
        for name, group, tools, rubric in workloads:
            judgement = await score_group(group, double.model, rubric=rubric, tools=tools, cache=False,
                                          extra_litellm_params=double.litellm_params)
            call = judgement.calls[0]
            system = (system_message(rubric or DEFAULT_RUBRIC, judgement.distinct, None) + "\n\n"
                      + count_line(judgement.distinct))
            before, _ = count_prefix(double.model, [{"role": "system", "content": system}], fmt)
            rows.append((name, len(group), before or 0, call.prefix_tokens or 0, call.counted_tokens or 0))
    return rows


def main() -> None:
    print("Judge prompt tokens per group (cl100k_base, message contents), 3-turn trajectories")
    print(f"{'group size':>10} | {'shared prefix':>13} | {'sent whole':>10} | {'whole / shared':>14}")
    for n, shared, whole in bench_prompt_tokens():
        print(f"{n:>10} | {shared:>13} | {whole:>10} | {whole / shared:>13.2f}x")
    print()
    ruler = art_ruler()
    if ruler is None:
        print("ART's RULER: .venv-art not found (run `make art-venv`); request comparison skipped")
    else:
        print("Judge request tokens vs ART 0.5.23 RULER (cl100k_base, contents + response schema, HTTP bodies);"
              " target ours / RULER <= 0.85")
        print(f"{'G':>3} | {'ours':>6} | {'RULER':>6} | {'ours / RULER':>12}")
        for n, ours, theirs in asyncio.run(bench_vs_ruler(ruler)):
            print(f"{n:>3} | {ours:>6} | {theirs:>6} | {ours / theirs:>11.3f}x")
    print()
    print("Cacheable prefix per judge request (schema + system message, tokens as each call records them)")
    print(f"{'workload':>12} | {'G':>3} | {'request':>7} | {'prefix before':>13} | {'prefix now':>10} | "
          f"{'share before':>12} | {'share now':>9}")
    for name, n, before, now, total in asyncio.run(bench_prefix_share()):
        print(f"{name:>12} | {n:>3} | {total:>7} | {before:>13} | {now:>10} | {before / total:>11.1%} | "
              f"{now / total:>8.1%}")
    print("Providers cache a prefix only from 1,024 tokens (OpenAI; Anthropic Sonnet/Opus; 2,048 on Haiku): a prefix"
          " below that is cacheable by its place in the request, not yet by its length.")
    print()
    print("Judge throughput against the HTTP double (50 ms per request, own process), 32 groups of 8, best of 3")
    rates = asyncio.run(bench_throughput())
    base = rates["sequential"]
    print(f"{'mode':>14} | {'groups/s':>8} | {'vs sequential':>13}")
    for label, rate in rates.items():
        print(f"{label:>14} | {rate:>8.1f} | {rate / base:>12.2f}x")


if __name__ == "__main__":
    main()
