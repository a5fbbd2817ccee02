"""``tallow bench``: the seeds' experiments, side by side with NumPy and PyTorch."""
