"""tl.utils.data against torch.utils.data: the same batches, collation and lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import tallow as tl
from tallow.data import (
    ConcatDataset, DataLoader, Dataset, IterableDataset, TensorDataset, default_collate, random_split,
)


def _np(x):
    if isinstance(x, torch.Tensor):
        return x.numpy()
    return np.asarray(x.numpy())


def _same_batch(ours, theirs):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tl.Tensor) and ours.shape == tuple(theirs.shape)
        assert np.asarray(_np(ours)).dtype == theirs.numpy().dtype
        np.testing.assert_array_equal(_np(ours), theirs.numpy())
    elif isinstance(theirs, dict):
        assert ours.keys() == theirs.keys()
        for k in theirs:
            _same_batch(ours[k], theirs[k])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same_batch(a, b)
    else:
        assert ours == theirs


class Pairs(Dataset):
    """Samples of every kind default_collate handles."""

    def __init__(self, n, torch_side):
        self.n, self.t = n, torch_side

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        arr = np.arange(3, dtype=np.float32) + i
        x = torch.from_numpy(arr) if self.t else tl.tensor(arr)
        return {"x": x, "y": i % 3, "w": 0.5 * i, "flag": i % 2 == 0, "name": f"s{i}",
                "arr": arr * 2, "pair": (i, float(i))}


class PairsTorch(tud.Dataset):
    def __init__(self, n):
        self.inner = Pairs(n, True)

    def __len__(self):
        return self.inner.n

    def __getitem__(self, i):
        return self.inner[i]


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (10, False), (16, False)])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_and_collation_equal_pytorch(batch_size, drop_last, workers):
    ours = DataLoader(Pairs(10, False), batch_size=batch_size, drop_last=drop_last, num_workers=workers)
    theirs = tud.DataLoader(PairsTorch(10), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    got, want = list(ours), list(theirs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        _same_batch(a, b)


def test_tensor_dataset_and_shuffle_with_a_seed():
    x = tl.arange(0, 20).reshape((10, 2))
    y = tl.arange(0, 10)
    ds = TensorDataset(x, y)
    assert len(ds) == 10
    run = lambda seed: [b[1].numpy().tolist() for b in DataLoader(ds, batch_size=3, shuffle=True, generator=seed)]
    first = run(0)
    assert first == run(0) != run(1)
    assert sorted(sum(first, [])) == list(range(10))
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=np.random.default_rng(5))
    epochs = [sum((b[1].numpy().tolist() for b in loader), []) for _ in range(2)]
    assert epochs[0] != epochs[1] and sorted(epochs[0]) == sorted(epochs[1]) == list(range(10))
    for xb, yb in DataLoader(ds, batch_size=4):
        np.testing.assert_array_equal(xb.numpy()[:, 0], yb.numpy() * 2)
    tl.manual_seed(3)
    a = [b[1].numpy().tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    tl.manual_seed(3)
    assert a == [b[1].numpy().tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]


def test_iterable_dataset_and_batch_size_none():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter([np.float32(i) for i in range(7)])

    class TorchStream(tud.IterableDataset):
        def __iter__(self):
            return iter([np.float32(i) for i in range(7)])

    for kw in ({"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        got = list(DataLoader(Stream(), **kw))
        want = list(tud.DataLoader(TorchStream(), **kw))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a.numpy() if isinstance(a, tl.Tensor) else a), np.asarray(b))


def test_random_split_concat_and_errors():
    ds = TensorDataset(tl.arange(0, 10))
    a, b = random_split(ds, [0.7, 0.3], generator=0)
    assert (len(a), len(b)) == (7, 3)
    assert sorted(int(a[i][0].item()) for i in range(7)) + [] != [] and \
        sorted([int(a[i][0].item()) for i in range(7)] + [int(b[i][0].item()) for i in range(3)]) == list(range(10))
    assert [len(p) for p in random_split(ds, [0.34, 0.33, 0.33], generator=0)] == \
        [len(p) for p in tud.random_split(range(10), [0.34, 0.33, 0.33])]
    both = ConcatDataset([ds, TensorDataset(tl.arange(100, 103))])
    assert len(both) == 13 and int(both[11][0].item()) == 101 and int(both[-1][0].item()) == 102
    with pytest.raises(IndexError):
        both[13]
    with pytest.raises(tl.InvalidArgumentError, match="do not add up"):
        random_split(ds, [3, 3])
    with pytest.raises(tl.InvalidArgumentError, match="first dimension"):
        TensorDataset(tl.zeros((3,)), tl.zeros((4,)))
    with pytest.raises(tl.InvalidArgumentError, match="exclusive"):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(tl.InvalidArgumentError, match="batch_size"):
        DataLoader(ds, batch_size=0)


def test_a_failing_sample_raises_in_order_with_workers():
    class Bad(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            if i == 5:
                raise ValueError("sample 5 is broken")
            return np.float32(i)

    it = iter(DataLoader(Bad(), batch_size=2, num_workers=2))
    assert next(it).numpy().tolist() == [0.0, 1.0]
    assert next(it).numpy().tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="sample 5"):
        next(it)


def test_default_collate_refuses_what_it_cannot_batch():
    with pytest.raises(tl.InvalidArgumentError, match="collate_fn"):
        default_collate([object(), object()])
    with pytest.raises(tl.InvalidArgumentError, match="different lengths"):
        default_collate([(1, 2), (1,)])
