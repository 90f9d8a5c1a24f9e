"""Packing: conversations share a forward pass without seeing each other, and how they are packed never
changes the loss or the update. Batches by token budget cover every conversation once per epoch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from training.config import LoraConfig  # noqa: E402
from training.config.sft import SFTOptions  # noqa: E402
from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, synthetic_games  # noqa: E402
from training.rl.grpo import token_logprobs  # noqa: E402
from training.sft.data import Conversation  # noqa: E402
from training.sft.packing import Encoded, check_lengths, epoch_steps, pack, plan_run  # noqa: E402
from training.types import TrainingError  # noqa: E402


def conversations(n: int, seed: int = 5) -> list[Conversation]:
    return [Conversation.model_validate({"messages": g}) for g in synthetic_games(n, seed=seed)]


def fake_rows(lengths: list[int]) -> list[Encoded]:
    return [Encoded([7] * n, [0] + [1] * (n - 1), i) for i, n in enumerate(lengths)]


@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    from training.sft.trainer import SFTTrainer

    return SFTTrainer(str(tiny_model_dir), LoraConfig(), SFTOptions(batch_tokens=4096, micro_batch_tokens=1024))


def test_a_packed_row_computes_what_each_conversation_computes_alone(trainer):
    rows = [trainer.encode(c, i) for i, c in enumerate(conversations(3))]
    (packed,) = pack(rows, micro_batch_tokens=1024)
    assert sorted(packed.sources) == [0, 1, 2]
    model = trainer.model
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([packed.input_ids])
        mask = torch.tensor([packed.mask], dtype=torch.float32)
        together = token_logprobs(model, ids, None, mask, position_ids=torch.tensor([packed.position_ids]))[0]
        # Positions that run on across the conversations: the later ones would attend to the earlier ones.
        leaky = token_logprobs(model, ids, None, mask, position_ids=torch.arange(len(packed))[None])[0]
        start = 0
        for source in packed.sources:
            row = rows[source]
            alone = token_logprobs(model, torch.tensor([row.input_ids]), torch.ones(1, len(row.input_ids)),
                                   torch.tensor([row.mask], dtype=torch.float32))[0]
            span = slice(start, start + len(row.input_ids))
            trained = torch.tensor(row.mask, dtype=torch.bool)
            assert torch.allclose(together[span][trained], alone[trained], atol=1e-5)
            if start:  # every conversation after the first would have been changed by the others
                assert not torch.allclose(leaky[span][trained], alone[trained], atol=1e-3)
            start += len(row.input_ids)
    model.train()


def test_the_first_token_of_a_packed_conversation_is_never_trained():
    packed = pack(fake_rows([4, 3]), micro_batch_tokens=10)[0]
    assert packed.position_ids == [0, 1, 2, 3, 0, 1, 2]
    assert packed.mask == [0, 1, 1, 1, 0, 1, 1]


def test_the_loss_and_the_update_do_not_depend_on_how_conversations_are_packed(tiny_model_dir):
    from training.sft.trainer import SFTTrainer

    rows = None
    results = []
    for micro in (1024, 160):  # one forward pass for the step, or one row per conversation or two
        trainer = SFTTrainer(str(tiny_model_dir), LoraConfig(), SFTOptions(batch_tokens=4096, micro_batch_tokens=micro),
                             seed=3)
        rows = [trainer.encode(c, i) for i, c in enumerate(conversations(6, seed=9))]
        metrics = trainer.sft_step(rows, 1e-2)
        # The gradients, not the weights: Adam's first update is ±lr wherever a gradient is not exactly 0, so
        # float noise on a zero gradient would show as a full-size difference in the weights.
        gradients = {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters() if p.requires_grad}
        results.append((metrics, gradients))
    (one, gradients_one), (many, gradients_many) = results
    assert one["packed_rows"] == 1 and many["packed_rows"] > 2
    assert one["trained_tokens"] == many["trained_tokens"] == sum(r.trained_tokens for r in rows)
    assert many["loss"] == pytest.approx(one["loss"], rel=1e-5)
    scale = max(float(g.abs().max()) for g in gradients_one.values())
    assert scale > 0
    for name, gradient in gradients_one.items():
        assert torch.allclose(gradient, gradients_many[name], atol=1e-5 * scale), name


def test_an_epoch_covers_every_conversation_once_within_the_token_budget():
    rows = fake_rows([30, 50, 20, 70, 10, 40, 60, 25])
    steps = epoch_steps(rows, batch_tokens=100, seed=1, epoch=1)
    assert sorted(r.source for s in steps for r in s) == list(range(8))
    assert all(sum(len(r.input_ids) for r in s) <= 100 for s in steps)
    again = epoch_steps(rows, batch_tokens=100, seed=1, epoch=1)
    assert [[r.source for r in s] for s in again] == [[r.source for r in s] for s in steps]  # resumable
    other = epoch_steps(rows, batch_tokens=100, seed=1, epoch=2)
    assert [r.source for s in other for r in s] != [r.source for s in steps for r in s]  # reshuffled per epoch
    for step in steps:
        assert all(len(p) <= 64 for p in pack([r for r in step if len(r.input_ids) <= 64], micro_batch_tokens=64))


def test_a_plan_counts_epochs_and_stops_at_max_steps():
    rows = fake_rows([30] * 10)
    full = plan_run(rows, epochs=3, batch_tokens=100, seed=0, max_steps=None)
    assert full.total == 3 * 4 and [e for e, _ in full.steps] == [1] * 4 + [2] * 4 + [3] * 4
    assert plan_run(rows, epochs=3, batch_tokens=100, seed=0, max_steps=5).total == 5
    with pytest.raises(TrainingError, match="no conversation to train on"):
        plan_run([], epochs=1, batch_tokens=100, seed=0, max_steps=None)


def test_a_conversation_longer_than_a_forward_pass_is_refused_by_name():
    with pytest.raises(TrainingError, match=r"conversation 2 \(90 tokens\).*raise sft.micro_batch_tokens"):
        check_lengths(fake_rows([10, 90, 20]), micro_batch_tokens=64, describe=lambda s: f"conversation {s + 1}")


def test_the_demo_system_prompt_is_context_not_trained(trainer):
    row = trainer.encode(conversations(1)[0], 0)
    text = trainer.tokenizer.decode([t for t, m in zip(row.input_ids, row.mask) if m])
    assert DEMO_SYSTEM_PROMPT not in text and "<move>" in text


def test_a_conversation_longer_than_the_models_context_is_refused_without_advice_that_cannot_help():
    with pytest.raises(TrainingError, match=r"conversation 2 \(1486 tokens\); no setting can train them") as refused:
        check_lengths(fake_rows([10, 1486, 20]), micro_batch_tokens=2048, context=1024,
                      describe=lambda s: f"conversation {s + 1}")
    assert "longer than the model's context of 1024 tokens" in str(refused.value)
    assert "micro_batch_tokens" not in str(refused.value)
