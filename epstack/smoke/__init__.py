"""`epstack smoke elastic`: does deep_ep.ElasticBuffer start, move the right tokens, and how fast.

Layout, one concept a module:
  launch     who am I in the job (torchrun, Slurm, Kubernetes indexed Job, or none): pure
  config     the smoke's sizes and presets: pure
  stage      the per-rank stage file the supervisor reads to name a hang: pure
  preflight  torch, a CUDA build of it, the GPUs and deep_ep, checked before any rank starts
  supervise  starts the ranks as process groups, enforces the deadline, kills what is left
  worker     one rank on a GPU (torch, deep_ep), in stage functions; started by supervise, never
             imported by the CLI
  result     what a rank found, stage by stage, as dataclasses (the rank JSON): pure
  reference  routing and the expected dispatch/combine as plain torch functions (CPU-testable)
  nccl       the NCCL library actually mapped into the process, and its version
  classify   known failures, named in words from their real error texts
  upstream   DeepEP's own tests/elastic/test_ep.py: run it and parse its verdict and bandwidth
  report     the JSON report's bandwidth summary and its ratios to test_ep
  elastic    one run on this node: launch, preflight, supervised ranks, test_ep, the report
(epstack.commands.smoke parses the flags and prints.)
"""
