"""`epstack smoke serve`: SGLang serving through DeepEP V2, proven from outside the server.

profiles    model profiles (DeepSeek-V3, Qwen3-30B-A3B, tiny) and the serve plan: sizes, token budget
command     the SGLang launch command and environment for one node (the smoke's and epstack cluster's)
tinymodel   the tiny profile's model folder (config, tokenizer, weights), written once into a cache and reused
tinyweights the tiny model's weights: seeded, at the config's init scale, Qwen3-MoE safetensors shards
client      SGLang's HTTP API (health, /server_info, /generate by token ids), failures named
server      one SGLang server with the serve plan's flags, in its own process group, stopped on exit
generation  prompts, the /generate answer read strictly, and the rule two greedy outputs agree by
checks      the check rows: backend, DeepEP V2's buffer, token counts, repeat, batch, without DeepEP
sweep       the load sweep through sglang.benchmark.serving, one row per concurrency
run         one smoke: servers, checks, sweep, comparison, the JSON report
"""
