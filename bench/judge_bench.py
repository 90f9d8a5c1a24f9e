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
Both are printed as ratios against the baseline measured in the same run.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
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
    print("Judge throughput against the HTTP double (50 ms per request, own process), 32 groups of 8, best of 3")
    rates = asyncio.run(bench_throughput())
    base = rates["sequential"]
    print(f"{'mode':>14} | {'groups/s':>8} | {'vs sequential':>13}")
    for label, rate in rates.items():
        print(f"{label:>14} | {rate:>8.1f} | {rate / base:>12.2f}x")


if __name__ == "__main__":
    main()
