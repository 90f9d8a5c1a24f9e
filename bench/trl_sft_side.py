"""The TRL half of bench/sft_bench.py; runs in .venv-trl (TRL 1.16.0), imports nothing of this project.

    .venv-trl/bin/python bench/trl_sft_side.py --model DIR --data FILE.jsonl --steps N --lr LR --max-length T \
        --batch-size B

One JSON line per optimizer step on stdout: {"step", "end", "tokens", "loss"}: `end` a monotonic clock reading
at the step's end (the parent takes step times as differences), `tokens` the tokens TRL counted as seen so far
(its `num_input_tokens_seen`, no padding with packing), `loss` the step's training loss.
Settings match ours where they change the work: the same conversations (OpenAI chat format), the loss on the
assistant's tokens only (assistant_only_loss, with the model's chat template marked for it: the assistant's body
and its end-of-turn token), packing (TRL's best-fit decreasing into rows of `--max-length` tokens, padding-free,
position ids restarting per conversation) and `--batch-size` rows a step, so a step holds at most
max_length × batch_size tokens as ours holds at most batch_tokens; LoRA r=8 alpha 16 dropout 0 on all linear
layers; AdamW at a constant learning rate, no warm-up; gradient clipping at 1.0; no gradient checkpointing;
float32 on CPU.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

# The project's ChatML template (training/model/chat_format.py) with the assistant's body and its end-of-turn marker
# inside generation markers, which TRL's assistant_only_loss reads the mask from. Same text rendered.
MARKED_TEMPLATE = (
    "{% if tools or messages[0].role == 'system' %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}\n\n# Tools\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n"
    "<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (loop.first and message.role == 'system') %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'assistant' %}{% generation %}"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls or [] %}"
    "<tool_call>{\"name\": {{ call.function.name | tojson }}, \"arguments\": {{ call.function.arguments }}}</tool_call>"
    "{% endfor %}<|im_end|>{% endgeneration %}{{ '\\n' }}"  # a newline right after a tag: trim_blocks eats it
    "{% else %}"
    "{% if message.content %}{{ message.content }}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    with open(args.data) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.chat_template = MARKED_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = SFTConfig(
        output_dir=args.out, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=1,
        max_length=args.max_length, packing=True, packing_strategy="bfd", assistant_only_loss=True,
        max_grad_norm=1.0, weight_decay=0.0, gradient_checkpointing=False, use_cpu=True, bf16=False, fp16=False,
        report_to="none", logging_steps=1, save_strategy="no", seed=args.seed, dataloader_num_workers=0,
        disable_tqdm=True, include_num_input_tokens_seen="non_padding",
    )
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.loss: float | None = None

        def on_log(self, _args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.loss = float(logs["loss"])

        def on_step_end(self, _args, state, control, **kwargs):
            print(json.dumps({"step": state.global_step, "end": time.monotonic(),
                              "tokens": int(state.num_input_tokens_seen)}), flush=True)

    clock = Clock()
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=lora, callbacks=[clock])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(json.dumps({"losses": losses}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
