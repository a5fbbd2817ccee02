"""A character-level LSTM language model, written as a PyTorch program is.

An embedding, a 2-layer nn.LSTM (batch_first), a linear head; a DataLoader over
random windows of a text; Adam with a StepLR; gradient clipping; then a sample,
carrying the LSTM's (h, c) state from one character to the next.

    python examples/lstm_char.py [file.txt]    # this file's own text by default
    TALLOW_EXAMPLE_STEPS=3 python examples/lstm_char.py

The same source runs under PyTorch with its imports changed: see
tests/examples/test_pytorch_twins.py.
"""

import sys
from pathlib import Path

import numpy as np

import tallow as tl
from tallow import nn
from tallow.nn import functional as F
from tallow.utils.data import DataLoader, TensorDataset
from _steps import steps

device = "cpu"  # PyTorch's "cuda" is "gpu" in tallow


def random_windows(ids, block_size, n, seed=0):
    """``n`` windows at random places (seeded): inputs and the next characters."""
    starts = np.random.default_rng(seed).integers(0, len(ids) - block_size - 1, n)
    windows = np.stack([ids[s:s + block_size + 1] for s in starts])
    return TensorDataset(tl.from_numpy(windows[:, :-1]), tl.from_numpy(windows[:, 1:]))


class CharLSTM(nn.Module):
    def __init__(self, vocab_size, n_embd=64, hidden=128, num_layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, n_embd)
        self.lstm = nn.LSTM(n_embd, hidden, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, idx, state=None):
        out, state = self.lstm(self.emb(idx), state)
        return self.head(out), state

    @tl.no_grad()
    def generate(self, idx, new_tokens):
        logits, state = self(idx)
        for _ in range(new_tokens):
            probs = F.softmax(logits[:, -1, :], dim=-1)
            nxt = tl.multinomial(probs, num_samples=1)
            idx = tl.cat([idx, nxt], dim=1)
            logits, state = self(nxt, state)
        return idx


def train(model, loader, n_steps, log_every=0):
    """``n_steps`` steps over ``loader`` (again from its start when it runs out);
    returns the losses."""
    opt = tl.optim.Adam(model.parameters(), lr=5e-3)
    sched = tl.optim.lr_scheduler.StepLR(opt, step_size=max(1, n_steps // 3), gamma=0.5)
    model.train()
    losses = []
    while len(losses) < n_steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits, _ = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if log_every and (len(losses) % log_every == 0 or len(losses) == 1):
                print(f"step {len(losses):4d}  loss {losses[-1]:.4f}")
            if len(losses) == n_steps:
                break
    return losses


def main():
    text = Path(sys.argv[1] if len(sys.argv) > 1 else __file__).read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.int64)
    block_size, batch_size, n_steps = 48, 32, steps(200)

    tl.manual_seed(0)
    model = CharLSTM(len(chars)).to(device)
    loader = DataLoader(random_windows(ids, block_size, n_steps * batch_size),
                        batch_size=batch_size)
    train(model, loader, n_steps, log_every=50)

    model.eval()
    start = tl.tensor([[stoi[text[0]]]], device=device)
    print("".join(chars[i] for i in model.generate(start, 200)[0].tolist()))


if __name__ == "__main__":
    main()
