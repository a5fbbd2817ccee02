"""Train a small MLP on a synthetic classification task (tl.nn layers, AdamW, a scheduler).

    python examples/train_mlp.py            # 200 steps, a few seconds
    TALLOW_EXAMPLE_STEPS=5 python examples/train_mlp.py
"""

import numpy as np

import tallow as tl
from _steps import steps

# Three Gaussian blobs in 8 dimensions: a task an MLP solves to ~100% accuracy.
rng = np.random.default_rng(0)
centres = rng.standard_normal((3, 8)).astype(np.float32) * 1.0
labels_np = rng.integers(0, 3, 512)
x = tl.Tensor(centres[labels_np] + rng.standard_normal((512, 8)).astype(np.float32))
labels = tl.Tensor(labels_np)                    # i64 class indices

model = tl.nn.Sequential(
    tl.nn.Linear(8, 64), tl.nn.ReLU(),
    tl.nn.Linear(64, 64), tl.nn.ReLU(),
    tl.nn.Linear(64, 3),
)
n_steps = steps(200)
opt = tl.nn.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
sched = tl.nn.lr_scheduler.CosineAnnealingLR(opt, T_max=n_steps)

model.train()
for step in range(n_steps):
    logits = model(x)
    loss = tl.nn.loss.cross_entropy(logits, labels)
    opt.backward_step(loss)                      # loss.backward() + opt.step(grads)
    sched.step()
    if step % 100 == 0 or step == n_steps - 1:
        print(f"step {step:4d}  loss {loss.to_scalar():.4f}  lr {sched.get_last_lr()[0]:.5f}")

model.eval()
model.requires_grad_(False)                      # evaluate without recording a graph
predicted = model(x).argmax_keepdim(-1).squeeze(-1).numpy()
print(f"training accuracy {(predicted == labels_np).mean():.3f}")
