"""The CPU backend: storages are flat NumPy buffers; kernels are NumPy (and its BLAS)."""
