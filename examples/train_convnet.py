"""Train a small conv net on synthetic 16x16 images: is the bright bar horizontal or vertical?

Conv2d, BatchNorm2d, MaxPool2d, AdaptiveAvgPool2d, Flatten, Dropout; SGD with
momentum, StepLR, gradient clipping.

    python examples/train_convnet.py        # 60 steps, a few seconds
    TALLOW_EXAMPLE_STEPS=3 python examples/train_convnet.py
"""

import numpy as np

import tallow as tl
from _steps import steps


def make_images(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Noise images with one bright bar; label 0 = horizontal, 1 = vertical."""
    images = rng.standard_normal((n, 1, 16, 16)).astype(np.float32) * 0.5
    labels = rng.integers(0, 2, n)
    where = rng.integers(2, 14, n)
    for i in range(n):
        if labels[i] == 0:
            images[i, 0, where[i], :] += 2.0
        else:
            images[i, 0, :, where[i]] += 2.0
    return images, labels


rng = np.random.default_rng(0)
train_x, train_y = make_images(256, rng)
test_x, test_y = make_images(128, rng)

model = tl.nn.Sequential(
    tl.nn.Conv2d(1, 8, kernel_size=3, padding=1), tl.nn.BatchNorm2d(8), tl.nn.ReLU(),
    tl.nn.MaxPool2d(2),                                  # 16x16 -> 8x8 (stride = kernel, as in PyTorch)
    tl.nn.Conv2d(8, 16, kernel_size=3, padding=1), tl.nn.ReLU(),
    tl.nn.AdaptiveAvgPool2d(1), tl.nn.Flatten(),         # (N, 16)
    tl.nn.Dropout(0.1),
    tl.nn.Linear(16, 2),
)
n_steps = steps(60)
opt = tl.nn.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = tl.nn.lr_scheduler.StepLR(opt, step_size=max(1, n_steps // 2), gamma=0.3)

model.train()
batch = 64
for step in range(n_steps):
    idx = rng.integers(0, len(train_x), batch)
    xb, yb = tl.Tensor(train_x[idx]), tl.Tensor(train_y[idx])
    loss = tl.nn.loss.cross_entropy(model(xb), yb)
    grads = loss.backward()
    tl.nn.clip_grad_norm_(grads, max_norm=5.0)
    opt.step(grads)
    sched.step()
    if step % 20 == 0 or step == n_steps - 1:
        print(f"step {step:3d}  loss {loss.to_scalar():.4f}")

model.eval()                                             # BatchNorm uses its running statistics
model.requires_grad_(False)
predicted = model(tl.Tensor(test_x)).argmax_keepdim(-1).squeeze(-1).numpy()
print(f"test accuracy {(predicted == test_y).mean():.3f}")
