"""The examples written as PyTorch programs are run twice: as they are (tallow) and with
only their imports changed to PyTorch's (``import torch as tl``, ``from torch import
nn``...). From the same initial weights (tallow's, copied into the PyTorch model) the
two give the same losses over 20 steps, to 1e-4 relative."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from tallow.utils import gpu_is_available as tl_gpu_is_available

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 20


def _as_pytorch(source: str) -> str:
    """The example with its tallow imports turned into PyTorch's, and nothing else."""
    out = re.sub(r"^import tallow as tl$", "import torch as tl", source, flags=re.M)
    out = re.sub(r"^from tallow(\.| )", r"from torch\1", out, flags=re.M)
    assert out != source
    return out


def _load(name: str, pytorch: bool, device: str = "cpu"):
    path = EXAMPLES / f"{name}.py"
    source = path.read_text()
    if device != "cpu":
        assert source.count('device = "cpu"') == 1
        source = source.replace('device = "cpu"', f'device = "{device}"')
    module = types.ModuleType(f"{name}_{'torch' if pytorch else 'tallow'}")
    module.__file__ = str(path)
    sys.path.insert(0, str(EXAMPLES))
    try:
        exec(compile(_as_pytorch(source) if pytorch else source, str(path), "exec"),
             module.__dict__)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


def _copy_weights(ours, theirs):
    """The tallow model's parameters and buffers into the PyTorch model, by name."""
    state = {k: torch.from_numpy(np.ascontiguousarray(v.numpy()))
             for k, v in ours.state_dict().items()}
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert not [k for k in missing if "num_batches_tracked" not in k], missing


def _assert_same_losses(ours, theirs):
    assert len(ours) == len(theirs) == STEPS
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]  # it trained


def _text_ids():
    text = (EXAMPLES / "gpt_char.py").read_text()
    chars = sorted(set(text))
    return len(chars), np.array([chars.index(c) for c in text], dtype=np.int64)


@pytest.mark.slow
def test_gpt_char_matches_pytorch():
    ours, theirs = _load("gpt_char", False), _load("gpt_char", True)
    vocab, ids = _text_ids()
    block, batch = 64, 16
    model, tmodel = ours.GPT(vocab, block), theirs.GPT(vocab, block)
    _copy_weights(model, tmodel)
    losses = ours.train(model, ours.DataLoader(ours.CharWindows(ids, block, STEPS * batch),
                                               batch_size=batch), STEPS)
    tlosses = theirs.train(tmodel, theirs.DataLoader(
        theirs.CharWindows(ids, block, STEPS * batch), batch_size=batch), STEPS)
    _assert_same_losses(losses, tlosses)


@pytest.mark.slow
def test_lstm_char_matches_pytorch():
    ours, theirs = _load("lstm_char", False), _load("lstm_char", True)
    vocab, ids = _text_ids()
    model, tmodel = ours.CharLSTM(vocab), theirs.CharLSTM(vocab)
    _copy_weights(model, tmodel)
    losses = ours.train(model, ours.DataLoader(ours.random_windows(ids, 48, STEPS * 32),
                                               batch_size=32), STEPS)
    tlosses = theirs.train(tmodel, theirs.DataLoader(
        theirs.random_windows(ids, 48, STEPS * 32), batch_size=32), STEPS)
    _assert_same_losses(losses, tlosses)


def test_mlp_dataloader_matches_pytorch():
    ours, theirs = _load("mlp_dataloader", False), _load("mlp_dataloader", True)
    model, tmodel = ours.make_model(), theirs.make_model()
    _copy_weights(model, tmodel)
    # In order: the two libraries shuffle with different generators.
    losses = ours.train(model, ours.DataLoader(ours.blobs(640), batch_size=32), STEPS)
    tlosses = theirs.train(tmodel, theirs.DataLoader(theirs.blobs(640), batch_size=32), STEPS)
    _assert_same_losses(losses, tlosses)
    assert ours.accuracy(model, ours.DataLoader(ours.blobs(256, seed=1), batch_size=64)) == \
        theirs.accuracy(tmodel, theirs.DataLoader(theirs.blobs(256, seed=1), batch_size=64))


def test_cnn_classifier_matches_pytorch():
    ours, theirs = _load("cnn_classifier", False), _load("cnn_classifier", True)
    model, tmodel = ours.Net(), theirs.Net()
    _copy_weights(model, tmodel)
    losses = ours.train(model, ours.DataLoader(ours.bars(640), batch_size=32), STEPS)
    tlosses = theirs.train(tmodel, theirs.DataLoader(theirs.bars(640), batch_size=32), STEPS)
    _assert_same_losses(losses, tlosses)
    # conv1's bias is followed by BatchNorm, which takes the mean out: its true gradient
    # is zero, what both libraries compute is rounding noise, and Adam scales noise up
    # to full steps. It (and the running mean it shifts) is left out; the rest agrees,
    # BatchNorm's running variance included.
    for k, v in model.state_dict().items():
        if k in ("conv1.bias", "bn1.running_mean"):
            continue
        np.testing.assert_allclose(v.numpy(), tmodel.state_dict()[k].numpy(), rtol=1e-3,
                                   atol=1e-4, err_msg=k)


@pytest.mark.skipif(not tl_gpu_is_available(), reason="no GPU adapter")
def test_mlp_dataloader_on_the_gpu_matches_pytorch():
    """The device name is the one other change: ``device = "gpu"``."""
    ours, theirs = _load("mlp_dataloader", False, "gpu"), _load("mlp_dataloader", True)
    model, tmodel = ours.make_model(), theirs.make_model()
    _copy_weights(model, tmodel)
    model.to("gpu")
    losses = ours.train(model, ours.DataLoader(ours.blobs(640), batch_size=32), STEPS)
    tlosses = theirs.train(tmodel, theirs.DataLoader(theirs.blobs(640), batch_size=32), STEPS)
    _assert_same_losses(losses, tlosses)
    assert next(iter(model.parameters())).device.type == "gpu"
