"""Datasets and the DataLoader, as ``torch.utils.data`` spells them
(``tl.utils.data``).

A map-style `Dataset` answers ``len(ds)`` and ``ds[i]``; an `IterableDataset`
yields samples. `DataLoader` draws indices from a sampler (in order, or shuffled by
its own generator, so a seed gives the same order in every run), groups them into
batches and merges each batch with ``collate_fn`` (`default_collate`: tensors and
arrays stacked, numbers into a tensor, dicts and sequences field by field, as
PyTorch's). With ``num_workers > 0`` batches are prepared ahead by worker threads
(tallow's kernels and NumPy release the GIL), at most ``prefetch_factor`` per
worker, and still come out in order.
"""

from __future__ import annotations

import bisect
import collections.abc
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .creation import randint
from .errors import InvalidArgumentError
from .tensor_base import TensorBase
from .tensor_class import Tensor


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and ``__len__``)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses define ``__iter__``."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Samples are the i-th rows of tensors that share their first dimension."""

    def __init__(self, *tensors):
        if not tensors:
            raise InvalidArgumentError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0] if tensors[0].rank else None
        if any(t.rank == 0 or t.shape[0] != n for t in tensors):
            raise InvalidArgumentError(
                "TensorDataset: tensors must share their first dimension, got shapes "
                + ", ".join(str(t.shape) for t in tensors))
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """Datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise InvalidArgumentError("ConcatDataset needs at least one dataset")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise InvalidArgumentError("ConcatDataset does not take an IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index):
        index = _index(index, len(self))
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def _index(index, n):
    if not isinstance(index, (int, np.integer)):
        raise InvalidArgumentError(f"dataset index must be an int, got {type(index).__name__}")
    index = int(index)
    if not -n <= index < n:
        raise IndexError(f"index {index} out of range for a dataset of {n} samples")
    return index % n


def _rng(generator):
    """A NumPy generator from ``generator``: an int seed, a NumPy Generator, or None
    (then seeded from tallow's generator, so ``tl.manual_seed`` fixes the order)."""
    if isinstance(generator, np.random.Generator):
        return generator
    if generator is None:
        generator = int(randint(0, 2**62, (1,)).numpy()[0])
    if isinstance(generator, (int, np.integer)):
        return np.random.default_rng(int(generator))
    raise InvalidArgumentError(
        f"generator must be an int seed or a numpy.random.Generator, got {type(generator).__name__}")


def random_split(dataset, lengths, generator=None):
    """``dataset`` split into non-overlapping `Subset`s of the given lengths (or
    fractions summing to 1, the remainder spread one by one as PyTorch does)."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1.0):
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n or any(int(x) != x or x < 0 for x in lengths):
        raise InvalidArgumentError(f"random_split: lengths {lengths} do not add up to the dataset's {n}")
    order = _rng(generator).permutation(n)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start:start + int(length)]))
        start += int(length)
    return out


class Sampler:
    """Yields dataset indices."""

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new permutation of the indices for each pass, drawn from ``generator``."""

    def __init__(self, data_source, generator=None):
        self.data_source = data_source
        self._rng = _rng(generator)

    def __iter__(self):
        return iter(self._rng.permutation(len(self.data_source)).tolist())

    def __len__(self):
        return len(self.data_source)


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def default_collate(batch):
    """One batch from a list of samples, as PyTorch's ``default_collate``: tensors and
    NumPy arrays stacked on a new first dim, Python ints into i64, floats into f64 and
    bools into bool tensors, strings kept as a list; dicts and named tuples collated
    field by field into their own type, other tuples and lists into lists."""
    first = batch[0]
    if isinstance(first, TensorBase):
        return Tensor.stack(list(batch), 0)
    if isinstance(first, np.ndarray):
        return Tensor.from_numpy(np.stack(batch))
    if isinstance(first, np.generic):
        return Tensor.from_numpy(np.array(batch))
    if isinstance(first, bool):
        return Tensor.from_numpy(np.array(batch, dtype=np.bool_))
    if isinstance(first, int):
        return Tensor.from_numpy(np.array(batch, dtype=np.int64))
    if isinstance(first, float):
        return Tensor.from_numpy(np.array(batch, dtype=np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a named tuple
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        if any(len(s) != len(first) for s in batch):
            raise InvalidArgumentError("default_collate: samples of one batch have different lengths")
        # a list for tuples too, as PyTorch's (``for x, y in loader`` unpacks either)
        return [default_collate(list(s)) for s in zip(*batch)]
    raise InvalidArgumentError(
        f"default_collate: cannot batch a {type(first).__name__}; pass collate_fn=")


class DataLoader:
    """Batches from a dataset, as ``torch.utils.data.DataLoader``.

    ``shuffle=True`` draws a new order each pass from ``generator`` (an int seed or
    a NumPy Generator; by default seeded from ``tl.manual_seed``'s generator).
    ``num_workers`` threads prepare up to ``prefetch_factor`` batches each ahead."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, drop_last=False, generator=None,
                 prefetch_factor=None, pin_memory=False, persistent_workers=False, timeout=0):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise InvalidArgumentError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if prefetch_factor is not None and num_workers == 0:
            raise InvalidArgumentError("prefetch_factor needs num_workers > 0 (as in PyTorch)")
        self.dataset, self.num_workers = dataset, num_workers
        self.prefetch_factor = 2 if prefetch_factor is None else int(prefetch_factor)
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.batch_size, self.drop_last = batch_size, drop_last
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise InvalidArgumentError("an IterableDataset takes no shuffle, sampler or batch_sampler")
            self.batch_sampler = None
            return
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise InvalidArgumentError(
                    "batch_sampler is exclusive with batch_size, shuffle, sampler and drop_last")
            self.batch_sampler = batch_sampler
            return
        if sampler is not None and shuffle:
            raise InvalidArgumentError("sampler is exclusive with shuffle")
        if sampler is None:
            sampler = RandomSampler(dataset, generator) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        self.batch_sampler = None if batch_size is None else BatchSampler(sampler, batch_size, drop_last)

    def __len__(self):
        if self._iterable:
            raise TypeError("a DataLoader over an IterableDataset has no length")
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)

    def _batches(self):
        """Callables, one per batch, each returning the collated batch."""
        if self._iterable:
            it = iter(self.dataset)
            if self.batch_size is None:
                for sample in it:
                    yield lambda s=sample: s
                return
            while True:
                chunk = [s for _, s in zip(range(self.batch_size), it)]
                if not chunk or (self.drop_last and len(chunk) < self.batch_size):
                    return
                yield lambda c=chunk: self.collate_fn(c)
        elif self.batch_sampler is None:  # batch_size=None: samples one by one
            for i in self.sampler:
                yield lambda i=i: self.dataset[i]
        else:
            for indices in self.batch_sampler:
                yield lambda ix=indices: self.collate_fn([self.dataset[i] for i in ix])

    def __iter__(self):
        if self.num_workers == 0:
            for make in self._batches():
                yield make()
            return
        yield from _prefetched(self._batches(), self.num_workers, self.num_workers * self.prefetch_factor)


def _prefetched(jobs, workers: int, ahead: int):
    """Run ``jobs`` (callables) on ``workers`` threads, at most ``ahead`` in flight,
    yielding their results in order; an exception in a job is raised in order too,
    and leaving the loop early stops the workers."""
    with ThreadPoolExecutor(workers, thread_name_prefix="tallow-dataloader") as pool:
        window = collections.deque()
        try:
            for job in jobs:
                window.append(pool.submit(job))
                if len(window) >= ahead:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for f in window:
                f.cancel()
