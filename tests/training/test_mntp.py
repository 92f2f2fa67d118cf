"""MNTP (LLM2Vec's masked next-token prediction) against the official loss: LLM2Vec's MNTP model is the
family's ``*ForCausalLM`` with bidirectional attention, whose causal-LM loss on the masked ids and labels is the
objective (experiments/run_mntp.py + llm2vec/models/bidirectional_llama.py: ``LlamaBiForMNTP(LlamaForCausalLM)``).
The oracle here is transformers' own ``*ForCausalLM`` loss, not this library's code."""
from __future__ import annotations

import pytest
import torch

from decoder_models import make_tiny_decoder


def _setup(folder, p=0.3):
    from transformers import AutoConfig

    from simcse.models.decoder import set_bidirectional
    from simcse.models.modeling import SimCSEModel
    from simcse.training.objectives.base import LossContext
    from simcse.training.objectives.mntp import MNTP

    cfg = set_bidirectional(AutoConfig.from_pretrained(folder), True)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="avg", config=cfg)
    obj = MNTP(mlm_probability=p)
    obj.setup(model, None)
    enc = model.tokenizer(["a man plays the guitar in the park .", "the dog runs", "an old woman sings music ."],
                          padding=True, return_tensors="pt")
    batch = {k: v.unsqueeze(1) for k, v in enc.items()}  # (B, 1, L)
    ctx = LossContext(model=model, seed=0, global_step=3)
    batch = obj.prepare_batch(batch, ctx)
    ctx.full_batch = batch
    return cfg, model, obj, batch, ctx


@pytest.mark.parametrize("family", ["llama", "gemma"], ids=["untied_head", "tied_head"])
def test_mntp_equals_the_official_causal_lm_loss_and_gradients(tmp_path, family):
    from transformers import AutoModelForCausalLM

    folder = make_tiny_decoder(tmp_path / family, family, dropout=0.0)
    cfg, model, obj, batch, ctx = _setup(folder)
    model.eval()
    assert (batch["mntp_labels"][:, 1:] != -100).any()
    ours = obj.chunk_loss(torch.zeros(3, 1, 32), batch, ctx)["mntp"]
    ours.backward()
    ref = AutoModelForCausalLM.from_pretrained(folder, config=cfg).eval()
    theirs = ref(input_ids=batch["mntp_input_ids"], attention_mask=batch["attention_mask"][:, 0],
                 labels=batch["mntp_labels"]).loss
    theirs.backward()
    assert abs(ours.item() - theirs.item()) < 1e-6
    base = ref.get_decoder() if hasattr(ref, "get_decoder") else ref.model
    ref_grads = dict(base.named_parameters())
    n = 0
    for name, p in model.encoder.named_parameters():
        if p.grad is None:
            continue
        g = ref_grads[name].grad
        torch.testing.assert_close(p.grad, g, rtol=2e-5, atol=1e-7)
        n += 1
    assert n > 5


def test_mntp_masks_the_asked_fraction(tmp_path):
    """mlm_probability is the fraction of maskable tokens chosen (the key hyperparameter)."""
    from simcse.training.objectives.base import LossContext

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    for p in (0.15, 0.5):
        _, model, obj, _, _ = _setup(folder, p)
        ids = torch.randint(5, len(model.tokenizer), (400, 1, 12))
        batch = obj.prepare_batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                  LossContext(model=model, seed=1))
        frac = (batch["mntp_labels"] != -100).float().mean().item()
        assert abs(frac - p) < 0.04, (p, frac)  # 4800 draws: std 0.007


def test_mntp_refuses_an_encoder_and_bad_arguments(tiny_bert_dir):
    from simcse.models.modeling import SimCSEModel
    from simcse.training.objectives.mntp import MNTP

    with pytest.raises(ValueError, match="decoder LLMs"):
        MNTP().setup(SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg"), None)
    with pytest.raises(ValueError, match="mlm_probability"):
        MNTP(mlm_probability=1.5)
    with pytest.raises(ValueError, match="mask_token_type"):
        MNTP(mask_token_type="star")


@pytest.mark.slow
def test_llm2vec_three_steps_on_a_tiny_decoder(tmp_path, train_txt):
    """Bidirectional switch + MNTP, then unsupervised SimCSE from the MNTP model: two commands; the result
    encodes the same in SimCSE(...) and sentence-transformers."""
    import json

    from conftest import run_training
    from sentence_transformers import SentenceTransformer

    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    common = ["--train_file", str(train_txt), "--per_device_train_batch_size", "8", "--max_steps", "3",
              "--learning_rate", "1e-3", "--use_cpu", "true", "--eval_strategy", "no", "--save_strategy", "no",
              "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
              "--dataloader_pin_memory", "false", "--seed", "0", "--pooler_type", "avg"]
    mntp = run_training(["--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "mntp"),
                         "--bidirectional", "true", "--loss", "mntp", "--logging_steps", "1", *common])
    logs = [h for h in mntp.state.log_history if "loss" in h]
    assert logs and all("loss_mntp" in h for h in logs)
    assert not (tmp_path / "mntp" / "objective_state.pt").exists()
    run_training(["--model_name_or_path", str(tmp_path / "mntp"), "--output_dir", str(tmp_path / "simcse"), *common])
    out = tmp_path / "simcse"
    assert json.loads((out / "simcse_config.json").read_text())["bidirectional"] is True
    sentences = ["a man plays music .", "the dog runs in the park ."]
    ours = SimCSE(str(out)).encode(sentences, normalize_to_unit=False)
    ours = ours.numpy() if hasattr(ours, "numpy") else ours
    theirs = SentenceTransformer(str(out), device="cpu").encode(sentences)
    assert abs(ours - theirs).max() < 1e-5
