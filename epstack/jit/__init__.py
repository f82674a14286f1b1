"""The JIT toolchains whose caches an image ships, one module each behind one protocol (toolchain) and
listed once (registry), over the shipped-folder mechanics (shipped), the start's copy (install), the
archives a GPU run exports and a layer unpacks (export) and the build's probe (probe, compiles)."""
