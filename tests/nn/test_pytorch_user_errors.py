"""The first errors a PyTorch user meets, met while porting the examples' PyTorch
programs (examples/gpt_char.py, lstm_char.py, mlp_dataloader.py, cnn_classifier.py):
each names what is wrong and the call to write instead."""

from __future__ import annotations

import numpy as np
import pytest

import tallow as tl
from tallow import nn
from tallow.nn.kv_cache import KvCache


def _model_and_loss():
    model = nn.Linear(3, 2)
    x = tl.tensor(np.ones((4, 3), np.float32))
    return model, (model(x) ** 2).mean()


def test_step_before_backward_says_to_call_backward_first():
    model, _ = _model_and_loss()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(nn.OptimizerVariablesError, match=r"call loss.backward\(\) before "
                                                         r"opt.step\(\)"):
        opt.step()


def test_model_cuda_says_to_use_gpu():
    model, _ = _model_and_loss()
    with pytest.raises(tl.TallowError, match=r"model.to\('gpu'\)"):
        model.cuda()


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "mps"])
def test_cuda_device_names_say_to_use_gpu(name):
    model, _ = _model_and_loss()
    with pytest.raises(tl.TallowError, match=r"'gpu'.*to\('gpu'\)"):
        model.to(name)
    with pytest.raises(tl.TallowError, match=r"to\('gpu'\)"):
        tl.zeros((2,), device=name)


def test_device_type_is_pytorchs_name():
    assert tl.zeros((2,)).device.type == "cpu"


def test_clip_grad_norm_with_both_forms_mixed_says_which_is_which():
    model, loss = _model_and_loss()
    loss.backward()
    with pytest.raises(TypeError, match=r"clip_grad_norm_\(model.parameters\(\), 1.0\)"):
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, parameters=model.parameters())


def test_param_group_without_params_names_the_key():
    model, _ = _model_and_loss()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="'params'"):
        opt.add_param_group([tl.Var([1.0])])


def test_reduce_lr_on_plateau_step_without_metric():
    model, _ = _model_and_loss()
    sched = tl.optim.lr_scheduler.ReduceLROnPlateau(tl.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match=r"scheduler.step\(val_loss\)"):
        sched.step()


def test_sequential_lr_refuses_a_plateau_scheduler_and_a_foreign_optimizer():
    model, _ = _model_and_loss()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    other = tl.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    S = tl.optim.lr_scheduler
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.SequentialLR(opt, [S.LinearLR(opt), S.ReduceLROnPlateau(opt)], milestones=[3])
    with pytest.raises(ValueError, match="another optimizer"):
        S.SequentialLR(opt, [S.LinearLR(opt), S.ExponentialLR(other, 0.9)], milestones=[3])
    with pytest.raises(ValueError, match="2 schedulers need 1 milestones"):
        S.SequentialLR(opt, [S.LinearLR(opt), S.ExponentialLR(opt, 0.9)], milestones=[])


def test_lambda_lr_with_the_wrong_number_of_functions():
    model, _ = _model_and_loss()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="one per group"):
        tl.optim.lr_scheduler.LambdaLR(opt, [lambda e: 1.0, lambda e: 0.5])


def test_scheduler_resume_with_last_epoch_says_to_load_state_dict():
    model, _ = _model_and_loss()
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(tl.nn.UnsupportedOptionError, match="load_state_dict"):
        tl.optim.lr_scheduler.StepLR(opt, 3, last_epoch=5)


def test_kv_cache_overflow_says_how_to_go_on():
    cache = KvCache(2, 4)
    k = tl.tensor(np.zeros((1, 1, 5, 2), np.float32))
    with pytest.raises(tl.ShapeMismatchError, match="RotatingKvCache"):
        cache.append(k, k)


def test_tensor_cuda_says_to_use_gpu():
    with pytest.raises(tl.TallowError, match=r"x.to\('gpu'\)"):
        tl.zeros((2,)).cuda()
    with pytest.raises(tl.TallowError, match=r"to\('gpu'\)"):
        tl.zeros((2,)).to("cuda")


def test_item_of_many_elements_says_how_to_read_them():
    _, loss = _model_and_loss()
    with pytest.raises(tl.ShapeMismatchError, match=r"\.sum\(\).*\.tolist\(\)"):
        tl.ones((2, 3)).item()
    assert isinstance(loss.item(), float)


def test_tl_save_load_and_tl_optim_are_attributes(tmp_path):
    """PyTorch's ``torch.save``/``torch.load`` and ``torch.optim`` without an import."""
    import subprocess
    import sys

    code = ("import tallow as tl; import numpy as np; "
            "tl.save({'w': tl.ones((2,))}, 'w.pt'); "
            "assert np.allclose(tl.load('w.pt')['w'].numpy(), 1); "
            "print(tl.optim.AdamW.__name__, tl.optim.lr_scheduler.StepLR.__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["AdamW", "StepLR"]


def test_index_select_and_gather_take_pytorchs_argument_order():
    import torch

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, t = tl.tensor(a), torch.from_numpy(a)
    ids = np.array([2, 0], dtype=np.int64)
    for dim in (0, 1):
        want = t.index_select(dim, torch.from_numpy(ids)).numpy()
        np.testing.assert_array_equal(x.index_select(dim, tl.tensor(ids)).numpy(), want)
        np.testing.assert_array_equal(x.index_select(tl.tensor(ids), dim).numpy(), want)
    g = np.array([[0, 2], [1, 1], [3, 0]], dtype=np.int64)
    want = t.gather(1, torch.from_numpy(g)).numpy()
    np.testing.assert_array_equal(x.gather(1, tl.tensor(g)).numpy(), want)
    np.testing.assert_array_equal(x.gather(tl.tensor(g), 1).numpy(), want)
