"""``tl.utils.data``: datasets and the DataLoader, as ``torch.utils.data`` (defined in
``tallow.data``)."""

from ..data import (  # noqa: F401  (the public names)
    BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler,
    SequentialSampler, Subset, TensorDataset, default_collate, random_split,
)

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "RandomSampler",
           "Sampler", "SequentialSampler", "Subset", "TensorDataset", "default_collate", "random_split"]
