from __future__ import annotations

import pytest
import torch

from training.config import GRPOConfig, LoraConfig
from training.fixtures.tiny_model import synthetic_games
from training.rl.trainer import Trainer
from training.types import Scenario, Trajectory, TrajectoryGroup


def groups(count: int = 2, size: int = 4) -> list[TrajectoryGroup]:
    games = synthetic_games(count * size, seed=5)
    out = []
    for g in range(count):
        trajectories = [Trajectory(scenario_id=f"s{g}", messages=games[g * size + i],
                                   advantage=(-1.0) ** i * (1 + i)) for i in range(size)]
        out.append(TrajectoryGroup(scenario=Scenario(id=f"s{g}", user_message="x"), trajectories=trajectories))
    return out


def adapter_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def make(tiny_model_dir, **grpo) -> Trainer:
    return Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(learning_rate=1e-2, **grpo), seed=1)


def test_micro_batching_bounds_memory_without_changing_the_update(tiny_model_dir):
    whole, micro = make(tiny_model_dir, micro_batch_size=8), make(tiny_model_dir, micro_batch_size=2)
    m_whole, m_micro = whole.train_step(groups()), micro.train_step(groups())
    assert m_whole["trained_sequences"] == m_micro["trained_sequences"] == 8
    assert m_whole["loss"] == pytest.approx(m_micro["loss"], rel=1e-4)
    assert m_whole["grad_norm"] == pytest.approx(m_micro["grad_norm"], rel=1e-4)
    # Adam's first step is about lr * sign(gradient), so float noise in a near-zero gradient can move one weight
    # by a fraction of lr; a real difference in the update would move many weights by ~lr (1e-2).
    a, b = adapter_weights(whole), adapter_weights(micro)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-3


def test_a_step_moves_the_adapter_and_only_the_adapter(tiny_model_dir):
    trainer = make(tiny_model_dir)
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    before = adapter_weights(trainer)
    trainer.train_step(groups())
    after = adapter_weights(trainer)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(p, frozen[n]) for n, p in trainer.model.named_parameters() if not p.requires_grad)


def test_kl_to_the_base_model_is_measured_once_the_adapter_has_moved(tiny_model_dir):
    trainer = make(tiny_model_dir, beta=0.1)
    first = trainer.train_step(groups())
    second = trainer.train_step(groups())
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # LoRA starts as the identity: policy == base
    assert second["kl"] > 0.0


def test_skipped_groups_and_failed_trajectories_are_not_trained(tiny_model_dir):
    trainer = make(tiny_model_dir)
    data = groups()
    data[0].skipped = True
    data[1].trajectories[0].error = "boom"
    assert trainer.train_step(data)["trained_sequences"] == 3


def test_a_saved_checkpoint_restores_adapter_and_optimizer(tiny_model_dir, tmp_path):
    trainer = make(tiny_model_dir)
    trainer.train_step(groups())
    trainer.save(tmp_path / "ck", {"step": 1, "adapter_name": "r@1"})
    restored = make(tiny_model_dir)
    restored.load(tmp_path / "ck")
    a, b = adapter_weights(trainer), adapter_weights(restored)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert restored.optimizer.state_dict()["state"].keys() == trainer.optimizer.state_dict()["state"].keys()


def count_forwards(trainer: Trainer) -> list[int]:
    """Counts forward passes through the transformer body (a hook on the real module, nothing replaced)."""
    calls = [0]
    trainer.model.get_base_model().get_decoder().register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_one_epoch_per_step_skips_the_old_logprob_pass_and_reports_no_clip_metrics(tiny_model_dir):
    trainer = make(tiny_model_dir, micro_batch_size=8)
    calls = count_forwards(trainer)
    metrics = trainer.train_step(groups())  # 8 sequences: one micro-batch
    assert calls[0] == 1  # the training forward only: with one epoch the "old" policy is the current one
    assert metrics["clip_fraction"] is None and metrics["ratio_mean"] is None
    assert metrics["loss"] is not None


def test_several_epochs_measure_the_old_policy_and_report_clip_metrics(tiny_model_dir):
    trainer = make(tiny_model_dir, micro_batch_size=8, epochs_per_step=2)
    calls = count_forwards(trainer)
    metrics = trainer.train_step(groups())
    assert calls[0] == 3  # one pass for the old log-probs, one per epoch
    assert metrics["clip_fraction"] is not None and metrics["ratio_mean"] is not None


def test_with_beta_rows_of_zero_advantage_still_pull_towards_the_reference(tiny_model_dir):
    trainer = make(tiny_model_dir, beta=0.5)
    trainer.train_step(groups())  # the adapter moves away from the base model
    flat = groups()
    for g in flat:
        for t in g.trajectories:
            t.advantage = 0.0
    before = adapter_weights(trainer)
    metrics = trainer.train_step(flat)
    assert metrics["trained_sequences"] == 8 and metrics["kl"] > 0.0
    assert metrics["loss"] == pytest.approx(0.5 * metrics["kl"], rel=1e-4)  # the surrogate is zero, KL is not
    after = adapter_weights(trainer)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_without_beta_rows_of_zero_advantage_are_skipped(tiny_model_dir):
    trainer = make(tiny_model_dir)
    data = groups()
    data[0].trajectories[0].advantage = 0.0
    assert trainer.train_step(data)["trained_sequences"] == 7


def full_vocabulary_logprobs(model, input_ids, temperature=1.0):
    """The textbook computation the trainer avoids: log_softmax over every position and the whole vocabulary."""
    logits = model(input_ids=input_ids).logits[:, :-1].float() / temperature
    picked = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trained_position_logprobs_match_the_full_vocabulary_computation(tiny_model_dir, temperature):
    from training.rl.grpo import token_logprobs

    trainer = make(tiny_model_dir)
    input_ids = torch.tensor([[3, 17, 40, 99, 7, 12, 5, 64]])
    mask = torch.tensor([[0, 0, 1, 1, 0, 1, 1, 1]])
    with torch.no_grad():
        want = full_vocabulary_logprobs(trainer.model, input_ids, temperature) * mask
        got = token_logprobs(trainer.model, input_ids, torch.ones_like(input_ids), mask, temperature=temperature,
                             chunk_tokens=2)  # several chunks
    assert torch.allclose(got, want, atol=1e-5)
    assert got[0, :2].tolist() == [0.0, 0.0] and got[0, 4].item() == 0.0  # untrained positions are not computed


def test_micro_batches_follow_the_token_budget_and_keep_the_update(tiny_model_dir):
    from training.model.batching import micro_batches

    loose, tight = make(tiny_model_dir, micro_batch_size=64), make(tiny_model_dir, micro_batch_size=64,
                                                                    micro_batch_tokens=600)
    rows = tight._rows(groups())
    batches = micro_batches(rows, max_tokens=600, max_rows=64)
    assert len(batches) > 1 and all(len(b) * max(len(r.input_ids) for r in b) <= 600 for b in batches)
    a, b = loose.train_step(groups()), tight.train_step(groups())
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-4) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


def test_a_trajectory_longer_than_the_token_budget_is_a_clear_error_before_any_update(tiny_model_dir):
    from training.types import TrainingError

    trainer = make(tiny_model_dir, micro_batch_tokens=20)
    before = adapter_weights(trainer)
    with pytest.raises(TrainingError, match="does not fit grpo.micro_batch_tokens=20"):
        trainer.train_step(groups())
    assert all(torch.equal(before[k], v) for k, v in adapter_weights(trainer).items())


def test_the_sampler_gap_is_reported_where_the_server_gave_logprobs(tiny_model_dir):
    from training.model.chat_format import encode_conversation

    trainer = make(tiny_model_dir)
    data = groups(count=1, size=2)
    for t in data[0].trajectories:
        ids, mask = encode_conversation(trainer.tokenizer, t.messages[:3])  # system, user, first reply
        t.messages = t.messages[:3]
        sampled = [i for i, m in zip(ids, mask) if m]
        t.turn_token_ids = [sampled]
        t.turn_logprobs = [[-0.5] * len(sampled)]
    with torch.no_grad():
        ids, mask = encode_conversation(trainer.tokenizer, data[0].trajectories[0].messages)
        own = full_vocabulary_logprobs(trainer.model, torch.tensor([ids]))[0]
    metrics = trainer.train_step(data)
    assert metrics["sampler_gap"] is not None and metrics["sampler_gap"] > 0.0
    assert groups()[0].trajectories[0].turn_logprobs == []
    assert make(tiny_model_dir).train_step(groups())["sampler_gap"] is None  # no server log-probs: no gap
    assert float(own[torch.tensor(mask) > 0].max()) < 0.0  # real log-probs, so the gap measures a real difference


def test_cuda_asked_without_cuda_and_cpu_on_a_gpu_worker_are_refused():
    from training.types import TrainingError
    from training.model.adapter import pick_device

    assert pick_device("cpu") == "cpu"
    with pytest.raises(TrainingError, match="requires a GPU"):
        pick_device("cpu", require_gpu=True)
    if not torch.cuda.is_available():
        with pytest.raises(TrainingError, match="no CUDA device"):
            pick_device("cuda")
        with pytest.raises(TrainingError, match="requires a GPU"):
            pick_device("auto", require_gpu=True)


def test_dtype_auto_is_float32_on_cpu(tiny_model_dir):
    from training.model.adapter import resolve_dtype

    assert resolve_dtype("auto", "cpu") == torch.float32 and resolve_dtype("bfloat16", "cpu") == torch.bfloat16
    assert next(make(tiny_model_dir).model.parameters()).dtype == torch.float32


def test_a_4bit_base_without_bitsandbytes_is_a_clear_error(tiny_model_dir):
    import importlib.util

    from training.config import TrainerConfig
    from training.types import TrainingError

    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    with pytest.raises(TrainingError, match="needs the bitsandbytes package"):
        Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(), options=TrainerConfig(load_in_4bit=True))


def test_truncated_importance_sampling_caps_the_token_weights(tiny_model_dir):
    from training.model.chat_format import encode_conversation
    from training.config import TrainerConfig

    def sampled_groups():
        data = groups(count=1, size=2)
        tokenizer = make(tiny_model_dir).tokenizer
        for t in data[0].trajectories:
            t.messages = t.messages[:3]
            ids, mask = encode_conversation(tokenizer, t.messages)
            t.turn_token_ids = [[i for i, m in zip(ids, mask) if m]]
            t.turn_logprobs = [[-50.0] * len(t.turn_token_ids[0])]  # the sampler found these tokens very unlikely
        return data

    plain = make(tiny_model_dir).train_step(sampled_groups())
    capped = Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(learning_rate=1e-2), seed=1,
                     options=TrainerConfig(tis_cap=2.0)).train_step(sampled_groups())
    # p_trainer / p_sampler is astronomically large here, so every token's weight is the cap: twice the gradient.
    assert capped["grad_norm"] == pytest.approx(2.0 * plain["grad_norm"], rel=1e-4)
    assert capped["sampler_gap"] == pytest.approx(plain["sampler_gap"]) and plain["sampler_gap"] > 40


def test_a_gpu_worker_config_refuses_the_local_server(tiny_model_dir, tmp_path):
    from tests.training.configs import small_config
    from training.config import RunConfig

    config = small_config(tiny_model_dir, tmp_path, server={"kind": "local"}).model_dump()
    config["trainer"] = {"require_gpu": True}
    with pytest.raises(ValueError, match="require_gpu refuses server.kind 'local'"):
        RunConfig.model_validate(config)
    config["server"] = {"kind": "inprocess"}  # the same CPU sampler, inside the run's process
    with pytest.raises(ValueError, match="require_gpu refuses server.kind 'inprocess'"):
        RunConfig.model_validate(config)
    config["server"] = {"kind": "external", "url": "http://127.0.0.1:9/v1"}
    assert RunConfig.model_validate(config).trainer.require_gpu


def test_the_importance_metrics_say_what_the_correction_did(tiny_model_dir):
    from training.model.chat_format import encode_conversation
    from training.config import TrainerConfig

    def sampled_groups(sampler_logprob):
        data = groups(count=1, size=2)
        tokenizer = make(tiny_model_dir).tokenizer
        for t in data[0].trajectories:
            t.messages = t.messages[:3]
            ids, mask = encode_conversation(tokenizer, t.messages)
            t.turn_token_ids = [[i for i, m in zip(ids, mask) if m]]
            t.turn_logprobs = [[sampler_logprob] * len(t.turn_token_ids[0])]
        return data

    def capped():
        return Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(learning_rate=1e-2), seed=1,
                       options=TrainerConfig(tis_cap=2.0))

    # The sampler found every token very unlikely: p_trainer/p_sampler is huge, the cap truncates every token.
    unlikely = capped().train_step(sampled_groups(-50.0))
    assert unlikely["is_ratio_mean"] > 1e10
    assert unlikely["is_weight_mean"] == pytest.approx(2.0) and unlikely["is_truncated_fraction"] == 1.0
    # A sampler that was sure of every token (log-prob 0): ratios below 1, taken as they are, none truncated.
    sure = capped().train_step(sampled_groups(0.0))
    assert sure["is_ratio_mean"] < 1.0 and sure["is_weight_mean"] == pytest.approx(sure["is_ratio_mean"])
    assert sure["is_truncated_fraction"] == 0.0
    # Without a cap the ratio is still reported; the loss applied no weight (1) and nothing was truncated.
    plain = make(tiny_model_dir).train_step(sampled_groups(-50.0))
    assert plain["is_ratio_mean"] > 1e10 and plain["is_weight_mean"] == 1.0
    assert plain["is_truncated_fraction"] is None
    # No sampler log-probs at all: nothing to correct, nothing reported.
    assert make(tiny_model_dir).train_step(groups())["is_ratio_mean"] is None
