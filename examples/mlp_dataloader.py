"""An MLP classifier trained from a DataLoader, written as a PyTorch program is.

TensorDataset + DataLoader (batches of 32, shuffled in an order tl.manual_seed fixes), nn.Sequential
of Linear/ReLU, SGD with momentum and weight decay, MultiStepLR, an evaluation pass
under tl.no_grad().

    python examples/mlp_dataloader.py
    TALLOW_EXAMPLE_STEPS=3 python examples/mlp_dataloader.py

The same source runs under PyTorch with its imports changed: see
tests/examples/test_pytorch_twins.py.
"""

import numpy as np

import tallow as tl
from tallow import nn
from tallow.utils.data import DataLoader, TensorDataset
from _steps import steps

device = "cpu"  # PyTorch's "cuda" is "gpu" in tallow


def blobs(n, seed=0):
    """Three Gaussian blobs in 8 dimensions and their labels."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((3, 8)).astype(np.float32)
    labels = rng.integers(0, 3, n)
    x = centres[labels] + rng.standard_normal((n, 8)).astype(np.float32)
    return TensorDataset(tl.from_numpy(x), tl.from_numpy(labels))


def make_model():
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 3))


def train(model, loader, n_steps, log_every=0):
    opt = tl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    sched = tl.optim.lr_scheduler.MultiStepLR(opt, milestones=[n_steps // 2], gamma=0.1)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    losses = []
    while len(losses) < n_steps:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
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


def accuracy(model, loader):
    model.eval()
    right = total = 0
    with tl.no_grad():
        for x, y in loader:
            predicted = model(x.to(device)).argmax(dim=1)
            right += (predicted == y.to(device)).sum().item()
            total += y.shape[0]
    return right / total


def main():
    tl.manual_seed(0)
    model = make_model().to(device)
    data = blobs(1024)
    loader = DataLoader(data, batch_size=32, shuffle=True)
    train(model, loader, steps(200), log_every=50)
    print(f"accuracy {accuracy(model, DataLoader(data, batch_size=256)):.3f}")


if __name__ == "__main__":
    main()
