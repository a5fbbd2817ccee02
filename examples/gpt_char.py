"""A character-level GPT trained on a text file, written as a PyTorch program is.

nanoGPT-sized: 4 layers, 4 heads, 128 dimensions, built from nn.TransformerEncoderLayer
with a causal mask; token + position embeddings; a DataLoader over random windows of
the text; AdamW with a linear warm-up then a cosine decay (SequentialLR); gradient
clipping; the weights saved with tl.save and loaded back; then a sample.

    python examples/gpt_char.py [file.txt]     # this file's own text by default
    TALLOW_EXAMPLE_STEPS=3 python examples/gpt_char.py

The same source runs under PyTorch with its imports changed (``import torch as tl``,
``from torch import nn``...): tests/examples/test_pytorch_twins.py checks that both
give the same losses from the same weights.
"""

import sys
from pathlib import Path

import numpy as np

import tallow as tl
from tallow import nn
from tallow.nn import functional as F
from tallow.utils.data import DataLoader, Dataset
from _steps import steps

device = "cpu"  # PyTorch's "cuda" is "gpu" in tallow


class CharWindows(Dataset):
    """``n`` windows of ``block_size + 1`` characters at random places (seeded): the
    first ``block_size`` are the input, the last ``block_size`` the targets."""

    def __init__(self, ids, block_size, n, seed=0):
        self.ids, self.block_size = ids, block_size
        self.starts = np.random.default_rng(seed).integers(0, len(ids) - block_size - 1, n)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        chunk = self.ids[self.starts[i]:self.starts[i] + self.block_size + 1]
        return tl.tensor(chunk[:-1]), tl.tensor(chunk[1:])


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=4, n_head=4, n_embd=128, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, dim_feedforward=4 * n_embd,
                                           dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.register_buffer("causal_mask",
                             nn.Transformer.generate_square_subsequent_mask(block_size),
                             persistent=False)

    def forward(self, idx, targets=None):
        b, t = idx.shape
        pos = tl.arange(t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        x = self.blocks(x, mask=self.causal_mask[:t, :t])
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @tl.no_grad()
    def generate(self, idx, new_tokens, temperature=1.0):
        for _ in range(new_tokens):
            logits, _ = self(idx[:, -self.block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = tl.cat([idx, tl.multinomial(probs, num_samples=1)], dim=1)
        return idx


def make_optimizer(model, n_steps, lr=3e-3, warmup=None):
    """AdamW, a linear warm-up over the first tenth of the steps, then a cosine."""
    opt = tl.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = warmup or max(1, n_steps // 10)
    sched = tl.optim.lr_scheduler.SequentialLR(
        opt, [tl.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=warmup),
              tl.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, n_steps - warmup))],
        milestones=[warmup])
    return opt, sched


def train(model, loader, n_steps, log_every=0):
    """``n_steps`` steps over ``loader`` (again from its start when it runs out);
    returns the losses."""
    opt, sched = make_optimizer(model, n_steps)
    model.train()
    losses = []
    while len(losses) < n_steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if log_every and (len(losses) % log_every == 0 or len(losses) == 1):
                print(f"step {len(losses):4d}  loss {losses[-1]:.4f}  "
                      f"lr {sched.get_last_lr()[0]:.5f}")
            if len(losses) == n_steps:
                break
    return losses


def main():
    text = Path(sys.argv[1] if len(sys.argv) > 1 else __file__).read_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.int64)
    block_size, batch_size, n_steps = 64, 16, steps(300)

    tl.manual_seed(0)
    model = GPT(len(chars), block_size).to(device)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
          f"{len(chars)} characters")
    loader = DataLoader(CharWindows(ids, block_size, n_steps * batch_size),
                        batch_size=batch_size, shuffle=False)
    train(model, loader, n_steps, log_every=50)

    tl.save(model.state_dict(), "gpt_char.pt")
    model = GPT(len(chars), block_size).to(device)
    model.load_state_dict(tl.load("gpt_char.pt"))
    model.eval()
    start = tl.tensor([[stoi[text[0]]]], device=device)
    out = model.generate(start, 200)[0].tolist()
    print("".join(chars[i] for i in out))


if __name__ == "__main__":
    main()
