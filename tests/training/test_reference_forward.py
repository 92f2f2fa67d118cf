"""The full training path (simcse.training.train.build: padding-free forward, CPU dropout masks, SimCSETrainer.compute_loss)
gives the same loss and gradients as a plain re-implementation of the reference's ``cl_forward`` (HF
``BertModel`` with eager attention, [CLS] + MLP (dense + tanh), cosine / temp, cross-entropy over in-batch
candidates) for the same weights and batch, with dropout off (docs/reproduction.md)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from simcse.training.train import build, parse_args


def _reference_loss(encoder: nn.Module, mlp: nn.Module, batch: dict, temp: float) -> torch.Tensor:
    """Reference cl_forward, unsupervised: (bs, 2, L) -> one forward over bs*2 rows -> [CLS] -> MLP -> views ->
    cosine(z1_i, z2_j) / temp -> cross-entropy with label i."""
    ids = batch["input_ids"]
    bs, num_sent, length = ids.shape
    flat = {k: batch[k].reshape(bs * num_sent, length) for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    last = encoder(**flat).last_hidden_state  # (bs*2, L, H)
    pooled = mlp(last[:, 0]).view(bs, num_sent, -1)
    z1, z2 = pooled[:, 0], pooled[:, 1]
    cos = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / temp  # (bs, bs)
    return nn.CrossEntropyLoss()(cos, torch.arange(bs))


@pytest.fixture
def trainer_and_batch(tiny_bert_dir, train_txt, tmp_path):
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--pooler_type", "cls", "--mlp_only_train", "true", "--temp", "0.05", "--dropout", "0.0",
            "--per_device_train_batch_size", "16", "--max_seq_length", "32", "--use_cpu", "true", "--report_to", "none",
            "--save_strategy", "no", "--eval_before_training", "false", "--test_after_training", "false", "--seed", "3"]
    trainer = build(*parse_args(argv))
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer, batch


def test_training_path_equals_reference_forward(trainer_and_batch, tiny_bert_dir):
    from transformers import BertModel

    trainer, batch = trainer_and_batch
    model = trainer.model.train()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # spread the tiny random model's embeddings (else every cosine is about 1, loss ln 16)
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    assert model.unpadded, "the full training path runs the padding-free forward"
    assert batch["input_ids"].shape[:2] == (16, 2) and (batch["attention_mask"] == 0).any()  # padding present
    loss = trainer.compute_loss(model, batch)
    loss.backward()

    ref = BertModel.from_pretrained(str(tiny_bert_dir), attn_implementation="eager", add_pooling_layer=False,
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()
    ref.load_state_dict(model.encoder.state_dict())
    mlp = nn.Sequential(nn.Linear(model.hidden_size, model.hidden_size), nn.Tanh())
    mlp[0].load_state_dict(model.mlp.dense.state_dict())
    assert ref.config._attn_implementation == "eager"
    assert all(m.p == 0.0 for m in ref.modules() if isinstance(m, nn.Dropout))
    ref_loss = _reference_loss(ref, mlp, batch, temp=0.05)
    ref_loss.backward()

    loss, ref_loss = float(loss.detach()), float(ref_loss.detach())
    assert 0.05 < loss < 0.9 * torch.log(torch.tensor(16.0))  # a real contrastive loss: neither solved nor chance
    assert abs(loss - ref_loss) < 1e-6
    ours = {f"encoder.{k}": p.grad for k, p in ref.named_parameters()} | {"mlp.dense.weight": mlp[0].weight.grad,
                                                                         "mlp.dense.bias": mlp[0].bias.grad}
    grads = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert set(grads) == set(k for k, g in ours.items() if g is not None) and len(grads) > 20
    scale = max(float(g.norm()) for g in ours.values() if g is not None)
    for k, g in grads.items():
        if k.endswith("attention.self.key.bias"):  # softmax ignores a shift of every key: true gradient 0
            assert float(g.norm()) < 1e-5 * scale and float(ours[k].norm()) < 1e-5 * scale, k
            continue
        assert float((g - ours[k]).norm() / ours[k].norm()) < 2e-5, k
    # the comparison can tell a different forward apart: another temperature gives another loss
    assert abs(float(_reference_loss(ref, mlp, batch, temp=0.1).detach()) - ref_loss) > 1e-3
