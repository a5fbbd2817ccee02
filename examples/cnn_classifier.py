"""A small CNN classifier, written as a PyTorch program is: is the bright bar in a
16x16 image horizontal or vertical?

nn.Module with Conv2d, BatchNorm2d, MaxPool2d, F.relu, flatten and Linear layers; a
DataLoader; AdamW with OneCycleLR; an evaluation pass in eval mode under tl.no_grad().

    python examples/cnn_classifier.py
    TALLOW_EXAMPLE_STEPS=3 python examples/cnn_classifier.py

The same source runs under PyTorch with its imports changed: see
tests/examples/test_pytorch_twins.py.
"""

import numpy as np

import tallow as tl
from tallow import nn
from tallow.nn import functional as F
from tallow.utils.data import DataLoader, TensorDataset
from _steps import steps

device = "cpu"  # PyTorch's "cuda" is "gpu" in tallow


def bars(n, seed=0):
    """Noise images with one bright bar; label 0 = horizontal, 1 = vertical."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((n, 1, 16, 16)).astype(np.float32) * 0.5
    labels = rng.integers(0, 2, n)
    where = rng.integers(2, 14, n)
    for i in range(n):
        if labels[i] == 0:
            images[i, 0, where[i], :] += 2.0
        else:
            images[i, 0, :, where[i]] += 2.0
    return TensorDataset(tl.from_numpy(images), tl.from_numpy(labels))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 4 * 4, 2)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))  # 16x16 -> 8x8
        x = self.pool(F.relu(self.conv2(x)))            # 8x8 -> 4x4
        return self.fc(x.flatten(1))


def train(model, loader, n_steps, log_every=0):
    opt = tl.optim.AdamW(model.parameters(), lr=1e-3)
    sched = tl.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=n_steps)
    model.train()
    losses = []
    while len(losses) < n_steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            if log_every and len(losses) % log_every == 0:
                print(f"step {len(losses):4d}  loss {losses[-1]:.4f}")
            if len(losses) == n_steps:
                break
    return losses


def main():
    tl.manual_seed(0)
    model = Net().to(device)
    loader = DataLoader(bars(512), batch_size=32, shuffle=True)
    train(model, loader, steps(100), log_every=25)
    model.eval()
    test = bars(256, seed=1)
    with tl.no_grad():
        x, y = test[:]
        accuracy = (model(x.to(device)).argmax(1) == y.to(device)).float().mean().item()
    print(f"test accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
