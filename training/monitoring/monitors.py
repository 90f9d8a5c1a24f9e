"""Reward-hacking and health monitors, computed after every step.

A policy can raise a judge's scores without getting better: by writing longer answers, repeating itself, or
finding what the judge likes that the task does not reward. Each step yields signals (prefixed `mon_` in the
step metrics so they are charted with the rest) and, when a signal crosses its run's threshold, a MonitorAlert. An
alert fires when the signal crosses and again only after it has recovered. Alerts whose monitor is listed in
`pause_on` ask the watcher to pause the run (the web app does, as for a spent judge budget).
"""
from __future__ import annotations

import statistics

from training.config.monitors import MonitorConfig
from training.events import MonitorAlert
from training.monitoring.health import sampled_entropy, truncated_share, zero_variance_share
from training.types import Trajectory, TrajectoryGroup

def answers(t: Trajectory) -> list[str]:
    """The assistant messages of a trajectory: lengths are per message, so a longer game is not a longer answer.
    A message's text is its content and its tool calls (name and arguments): one that only calls a tool wrote
    something, it is not an empty answer."""
    return [" ".join([str(m.get("content") or ""), *(_call_text(c) for c in m.get("tool_calls") or [])]).strip()
            for m in t.messages if m.get("role") == "assistant"]


def _call_text(call: dict) -> str:
    function = call.get("function") or {}
    return f"{function.get('name', '')} {function.get('arguments', '')}"


def repeat_rate(text: str, n: int) -> float:
    """Share of the text's word n-grams that repeat an earlier one: 0 for fresh text, near 1 for a loop."""
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def step_signals(groups: list[TrajectoryGroup], train_metrics: dict, ngram: int) -> dict[str, float | None]:
    texts = [a for g in groups for t in g.trajectories if t.error is None for a in answers(t)]
    judge = [t.judge_score for g in groups for t in g.trajectories if t.judge_score is not None]
    env = [t.env_reward for g in groups for t in g.trajectories if t.env_reward is not None]
    return {
        "mon_length_chars": statistics.fmean(len(a) for a in texts) if texts else None,
        "mon_repeat_rate": statistics.fmean(repeat_rate(a, ngram) for a in texts) if texts else None,
        "mon_empty_rate": statistics.fmean(not a.strip() for a in texts) if texts else None,
        "mon_zero_variance": zero_variance_share(groups),
        "mon_entropy": sampled_entropy(groups),
        "mon_truncated": truncated_share(groups),
        "mon_kl": train_metrics.get("kl"),
        "mon_judge_mean": statistics.fmean(judge) if judge else None,
        "mon_env_mean": statistics.fmean(env) if env else None,
    }


def _window_means(series: list[float], window: int) -> tuple[float, float] | None:
    """(mean of the previous `window`, mean of the last `window`), once there are 2 × window values."""
    if len(series) < 2 * window:
        return None
    return statistics.fmean(series[-2 * window:-window]), statistics.fmean(series[-window:])


class Monitors:
    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.history: dict[str, list[float]] = {}
        self.win_rates: list[float] = []
        self.firing: set[str] = set()
        self.streaks: dict[str, int] = {}  # steps in a row a stall signal has crossed

    def _check(self, step: int, name: str, value: float | None, threshold: float, crossed: bool,
               message: str) -> list[MonitorAlert]:
        if value is None or not crossed:
            self.firing.discard(name)
            return []
        if name in self.firing:
            return []
        self.firing.add(name)
        return [MonitorAlert(step=step, monitor=name, value=value, threshold=threshold, message=message,
                             pause=name in self.config.pause_on)]

    def observe_step(self, step: int, signals: dict[str, float | None]) -> list[MonitorAlert]:
        c = self.config
        for key, value in signals.items():
            if value is not None:
                self.history.setdefault(key, []).append(value)
        alerts: list[MonitorAlert] = []
        lengths = self.history.get("mon_length_chars", [])
        growth = None
        if len(lengths) >= 2 * c.window and statistics.fmean(lengths[:c.window]) > 0:
            growth = statistics.fmean(lengths[-c.window:]) / statistics.fmean(lengths[:c.window])
        alerts += self._check(step, "length", growth, c.max_length_growth, (growth or 0) > c.max_length_growth,
                              f"answer length grew {growth or 0:.1f}x since the first {c.window} steps "
                              f"(threshold {c.max_length_growth}x)")
        rep, empty = signals.get("mon_repeat_rate"), signals.get("mon_empty_rate")
        alerts += self._check(step, "repetition", rep, c.max_repeat_rate, (rep or 0) > c.max_repeat_rate,
                              f"{(rep or 0):.0%} of answer {c.ngram}-grams are repeats")
        alerts += self._check(step, "empty", empty, c.max_empty_rate, (empty or 0) > c.max_empty_rate,
                              f"{(empty or 0):.0%} of answers are empty")
        alerts += self._stalls(step, signals)
        kl = signals.get("mon_kl")
        if c.max_kl is not None:
            alerts += self._check(step, "kl", kl, c.max_kl, (kl or 0) > c.max_kl,
                                  f"KL to the base is {(kl or 0):.3f} (threshold {c.max_kl})")
        alerts += self._divergence(step)
        return alerts

    def _streak(self, name: str, crossed: bool) -> bool:
        self.streaks[name] = self.streaks.get(name, 0) + 1 if crossed else 0
        return self.streaks[name] >= self.config.stall_steps

    def _stalls(self, step: int, signals: dict[str, float | None]) -> list[MonitorAlert]:
        """Learning has stalled when, step after step, most groups have no reward spread, most answers are cut
        off, or the policy samples one answer; the zero-variance alert names the likely cause."""
        c, k = self.config, self.config.stall_steps
        zero, cut, entropy = (signals.get(key) for key in ("mon_zero_variance", "mon_truncated", "mon_entropy"))
        low = entropy is not None and c.min_entropy is not None and entropy < c.min_entropy
        many_cut = (cut or 0) > c.max_truncated
        why = "most answers were cut off at max_tokens" if many_cut else \
            "the policy samples nearly one answer (low entropy)" if low else "every answer of a group scored the same"
        span = f"for {k} steps" if k > 1 else "this step"
        alerts = self._check(step, "zero_variance", zero, c.max_zero_variance,
                             self._streak("zero_variance", (zero or 0) > c.max_zero_variance),
                             f"{(zero or 0):.0%} of groups had no reward spread {span} (nothing to learn from): {why}")
        alerts += self._check(step, "truncation", cut, c.max_truncated, self._streak("truncation", many_cut),
                              f"{(cut or 0):.0%} of answers were cut off at sampling.max_tokens {span}: raise "
                              "max_tokens or ask for shorter answers")
        if c.min_entropy is not None:
            alerts += self._check(step, "entropy", entropy, c.min_entropy, self._streak("entropy", low),
                                  f"the entropy on sampled tokens is {(entropy or 0):.3f} nats {span} (threshold "
                                  f"{c.min_entropy}): the policy has stopped exploring; raise the temperature")
        return alerts

    def observe_evaluation(self, step: int, win_rate: float | None) -> list[MonitorAlert]:
        if win_rate is not None:
            self.win_rates.append(win_rate)
        return self._divergence(step)

    def _divergence(self, step: int) -> list[MonitorAlert]:
        c = self.config
        judge = _window_means(self.history.get("mon_judge_mean", []), c.window)
        if judge is None or judge[1] - judge[0] < c.min_divergence:
            return self._check(step, "judge_divergence", None, c.min_divergence, False, "")
        falls = []
        env = _window_means(self.history.get("mon_env_mean", []), c.window)
        if env is not None and env[0] - env[1] >= c.min_divergence:
            falls.append(f"the env reward fell {env[0]:.3f} -> {env[1]:.3f}")
        if len(self.win_rates) >= 2 and self.win_rates[-2] - self.win_rates[-1] >= c.min_divergence:
            falls.append(f"the held-out win rate fell {self.win_rates[-2]:.0%} -> {self.win_rates[-1]:.0%}")
        rise = judge[1] - judge[0]
        return self._check(step, "judge_divergence", rise, c.min_divergence, bool(falls),
                           f"the judge score rose {judge[0]:.3f} -> {judge[1]:.3f} while " + " and ".join(falls))
