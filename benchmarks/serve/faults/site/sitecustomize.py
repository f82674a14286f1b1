"""A broken DeepEP V2 on purpose, inside every Python process that starts with this folder on PYTHONPATH
and EPSTACK_FAULT set (SGLang's scheduler too: it inherits the environment). Kept out of the product: it
exists to show that `epstack smoke serve` fails when DeepEP V2 is wrong (benchmarks/serve/faults/).

When `deep_ep` is imported, deep_ep.ElasticBuffer is wrapped:
  zero     combine returns zeros: every token loses its MoE output
  scale    combine returns its output times EPSTACK_FAULT_SCALE (default 0.5)
  permute  dispatch sends each token to the next expert (routed id e -> (e + 1) mod num_experts)
The wrapper waits for the operation's event before it reads the output (SGLang waits on it again, a no-op
then) and returns a new tensor, so it works inside CUDA graph capture too. Each process writes one line
`epstack-fault: <fault> ...` to stderr the first time the wrapped method runs (the server's log shows it).
"""

import importlib.abc
import importlib.util
import os
import sys

FAULT = os.environ.get("EPSTACK_FAULT", "")
FAULTS = ("zero", "scale", "permute")


def _said(what: str) -> None:
    sys.stderr.write(f"epstack-fault: {FAULT}: {what} (pid {os.getpid()})\n")
    sys.stderr.flush()


def _wait(event: object) -> None:
    if getattr(event, "event", None) is not None:
        event.current_stream_wait()  # type: ignore[attr-defined]


def _patch(module: object) -> None:
    buffer = module.ElasticBuffer  # type: ignore[attr-defined]
    combine, dispatch = buffer.combine, buffer.dispatch
    scale = float(os.environ.get("EPSTACK_FAULT_SCALE", "0.5"))
    first = [True]

    def once(what: str) -> None:
        if first[0]:
            first[0] = False
            _said(what)

    def broken_combine(self, x, *args, **kwargs):  # type: ignore[no-untyped-def]
        combined, weights, event = combine(self, x, *args, **kwargs)
        _wait(event)
        if FAULT == "zero":
            once("ElasticBuffer.combine returned zeros")
            return combined.new_zeros(combined.shape), weights, event
        once(f"ElasticBuffer.combine scaled by {scale:g}")
        return combined * scale, weights, event

    def broken_dispatch(self, x, *args, **kwargs):  # type: ignore[no-untyped-def]
        ids, experts = kwargs["topk_idx"], kwargs["num_experts"]
        kwargs["topk_idx"] = ids.where(ids < 0, (ids + 1) % experts)
        once(f"ElasticBuffer.dispatch sent each token to the next of {experts} experts")
        return dispatch(self, x, *args, **kwargs)

    if FAULT == "permute":
        buffer.dispatch = broken_dispatch
    else:
        buffer.combine = broken_combine


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds deep_ep as the other finders do, and patches the module once it has run."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname != "deep_ep":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):  # type: ignore[no-untyped-def]
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if FAULT:
    if FAULT not in FAULTS:
        sys.exit(f"epstack-fault: EPSTACK_FAULT={FAULT!r}; fix: one of {', '.join(FAULTS)}")
    sys.meta_path.insert(0, _PatchOnImport())
