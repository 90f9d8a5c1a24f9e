"""The TRL half of bench/peer_bench.py; runs in .venv-trl (TRL 1.16.0), imports nothing of this project.

    .venv-trl/bin/python bench/trl_side.py --model DIR --steps N --lr LR --prompt TEXT --target CHAR

One JSON line per optimizer step on stdout: {"step", "end", "generation_s", "reward_mean"}. `end` is a
monotonic clock reading at the step's end (the parent takes full-step times as differences between ends);
`generation_s` is the time TRL spent generating and scoring the step's completions.
Settings match ours where they change the work: 1 prompt x 8 completions, exactly 32 tokens each
(min_new_tokens), LoRA r=8 alpha 16 on all linear layers, beta 0, one update per generation, constant learning
rate, std-scaled group advantages, no gradient checkpointing (TRL turns it on by default; it only costs time
on a model this small), float32 on CPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    timing: dict[str, float] = {"generation_s": 0.0, "reward_mean": 0.0}

    def toy_reward(completions, **_: object) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [t.count(args.target) / max(len(t), 1) for t in texts]
        timing["reward_mean"] = sum(rewards) / len(rewards)
        return rewards

    config = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, per_device_train_batch_size=8, num_generations=8, gradient_accumulation_steps=1,
        max_completion_length=32, generation_kwargs={"min_new_tokens": 32}, temperature=1.0, top_p=1.0,
        beta=0.0, num_iterations=1, scale_rewards="group", loss_type="dapo", max_grad_norm=1.0,
        adam_beta2=0.99, weight_decay=0.0, gradient_checkpointing=False, use_cpu=True, bf16=False, fp16=False,
        report_to="none", logging_steps=1, save_strategy="no", seed=args.seed, dataloader_num_workers=0,
        disable_tqdm=True, log_completions=False,
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": args.prompt}]}] * (8 * args.steps))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    peft_config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=toy_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft_config)

    generate = trainer._generate_and_score_completions

    def timed_generate(*a: object, **kw: object) -> object:
        started = time.monotonic()
        result = generate(*a, **kw)
        timing["generation_s"] += time.monotonic() - started
        return result

    trainer._generate_and_score_completions = timed_generate  # measure, not change: the method runs as is

    class Report(TrainerCallback):
        def on_step_end(self, _args, state, _control, **_: object) -> None:
            print(json.dumps({"step": state.global_step, "end": time.monotonic(),
                              "generation_s": timing["generation_s"], "reward_mean": timing["reward_mean"]}),
                  flush=True)
            timing["generation_s"] = 0.0

    trainer.add_callback(Report())
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
