"""The JIT toolchains' caches an image ships: the shipped-folder mechanics (shipped), the archives a GPU
run exports and a layer unpacks (export), and DeepGEMM's kernels (deepgemm)."""
