"""Kernels and the advantage pipeline: CPU and CUDA kernels, the guard, threads, matmul, pinned kernels."""
