"""A model name that is neither a local folder nor loadable from the hub fails at once, saying what was looked for."""
import time

import pytest

from simcse.models.modeling import SimCSEModel


def _load_error(name) -> tuple[str, float]:
    from transformers import AutoModel, AutoTokenizer  # noqa: F401  (import time is not what is measured)

    t0 = time.monotonic()
    with pytest.raises(FileNotFoundError) as e:
        SimCSEModel.from_pretrained(name)
    return str(e.value), time.monotonic() - t0


def test_offline_hub_name_fails_at_once(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    msg, seconds = _load_error("MINILM")
    assert "'MINILM' is not a local folder" in msg and "HF_HUB_OFFLINE" in msg and "not in the HF cache" in msg
    assert seconds < 5


def test_unreachable_hub_fails_at_once(monkeypatch):
    import socket

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def no_route(*a, **k):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_route)
    msg, seconds = _load_error("princeton-nlp/not-a-model-here")
    assert "cannot be reached from this machine" in msg and "huggingface.co" in msg
    assert seconds < 5


def test_invalid_name_is_not_a_hub_id():
    msg, _ = _load_error("no such model!")
    assert "not a valid hub model id" in msg
