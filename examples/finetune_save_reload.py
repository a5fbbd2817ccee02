"""Fine-tune the head of a model, save it as safetensors, reload it and check it.

A base model is trained on one task and saved; a new model is loaded from the file,
its body frozen (plain tensors: nothing recorded, no gradients), its head unfrozen
and trained on a second task; the fine-tuned weights are saved and reloaded.

    python examples/finetune_save_reload.py
    TALLOW_EXAMPLE_STEPS=3 python examples/finetune_save_reload.py
"""

import os
import tempfile

import numpy as np

import tallow as tl
from _steps import steps


def make_model() -> tl.nn.Sequential:
    return tl.nn.Sequential(tl.nn.Linear(4, 32), tl.nn.Tanh(), tl.nn.Linear(32, 1))


def train(model, x, y, n_steps):
    opt = tl.nn.Adam([p for p in model.parameters() if isinstance(p, tl.Var)], lr=1e-2)
    for _ in range(n_steps):
        loss = tl.nn.loss.mse(model(x), y)
        opt.backward_step(loss)
    return loss.to_scalar()


rng = np.random.default_rng(0)
x = tl.Tensor(rng.standard_normal((256, 4)).astype(np.float32))
y_base = x.sum_keepdim(-1).tanh()                     # task 1
y_new = x.sum_keepdim(-1).tanh() * 2.0 + 0.5         # task 2: same features, a new head

folder = tempfile.mkdtemp()
base_path = os.path.join(folder, "base.safetensors")

base = make_model()
print(f"base model trained, loss {train(base, x, y_base, steps(200)):.4f}")
tl.utils.save_safetensors(base_path, base.state_dict())

# Load: a new model takes the file's values; freezing makes every parameter a plain tensor.
model = make_model()
model.load_state_dict(tl.utils.load_safetensors(base_path))
model.requires_grad_(False)
model[2].requires_grad_(True)                  # unfreeze only the head
trainable = [name for name, p in model.named_parameters() if isinstance(p, tl.Var)]
print("trainable:", trainable)                 # ['2.weight', '2.bias']
print(f"fine-tuned, loss {train(model, x, y_new, steps(200)):.4f}")

tuned_path = os.path.join(folder, "tuned.safetensors")
tl.utils.save_safetensors(tuned_path, model.state_dict())
reloaded = make_model()
reloaded.load_state_dict(tl.utils.load_safetensors(tuned_path))
reloaded.requires_grad_(False)
difference = float(np.abs(reloaded(x).numpy() - model(x).numpy()).max())
print(f"reloaded model matches: max |difference| = {difference}")
assert difference == 0.0
