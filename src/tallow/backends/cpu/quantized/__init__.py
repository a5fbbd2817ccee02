"""CPU kernels of quantized matmul: the NumPy ggml-semantics path (``vec_dot``) and
the compiled tiled path (``fast``, numba)."""
