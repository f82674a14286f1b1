"""The vllm layer's own rows: vLLM at its pin, no other engine's distributions beside it, and vLLM's own
gate for its deepep_v2 all-to-all backend.

The gate is vLLM's code, not a copy: vllm.utils.import_utils.deep_ep_v2_unavailable_reason() (vLLM
0.33.0) returns None only when `deep_ep` imports with ElasticBuffer and the libnccl.so.2 vLLM loads
(VLLM_NCCL_SO_PATH, else by soname) is at least 2.30.4; otherwise it says why, and vLLM refuses
`--all2all-backend deepep_v2`. The build's guard runs it; a start trusts that row while nothing that
decides it changed (guard.record: the venv, library resolution; VLLM_NCCL_SO_PATH is refused at start:
guard.environment).
"""

from __future__ import annotations

from importlib import metadata

from epstack.checkrow import Check
from epstack.guard.libraries import try_import
from epstack.layers import SERVED, layer_named

GATE_MODULE = "vllm.utils.import_utils"
GATE_FUNCTION = "deep_ep_v2_unavailable_reason"
GATE = "vllm deepep_v2 gate"


def check_deep_ep_v2_gate() -> Check:
    """vLLM's own answer to whether its deepep_v2 backend can run here: None, or its reason."""
    expected = f"{GATE_FUNCTION}() is None"
    module, error = try_import(GATE_MODULE)
    gate = getattr(module, GATE_FUNCTION, None) if module else None
    if gate is None:
        found = "import failed" if module is None else f"no {GATE_FUNCTION} in {GATE_MODULE}"
        return Check(component=GATE, expected=expected, found=found, verdict="missing", detail=error)
    try:
        reason = gate()
    except Exception as exc:  # vLLM's check itself failing is a failed gate, said as it failed
        reason = f"{type(exc).__name__}: {exc}"
    if reason is None:
        return Check(component=GATE, expected=expected, found="None", verdict="ok",
                     detail="deep_ep has ElasticBuffer; vLLM's libnccl meets DeepEP V2's floor")  # fmt: skip
    return Check(
        component=GATE,
        expected=expected,
        found=str(reason),
        verdict="fail",
        fix="vLLM refuses --all2all-backend deepep_v2 here: the deep_ep and NCCL the deepep layer "
        "pins, unmoved (see the deep_ep and NCCL rows)",
    )


def foreign_prefixes(layer: str) -> tuple[str, ...]:
    """The distribution name prefixes of every other served layer's family that `layer`'s does not
    share (for vllm: SGLang's sglang and sgl-, not flashinfer)."""
    own = layer_named(layer).family
    return tuple(
        prefix for other in SERVED if other.name != layer for prefix in other.family if prefix not in own
    )


def check_no_other_engine(layer: str) -> Check:
    """No distribution of another serving engine is installed beside this one."""
    prefixes = foreign_prefixes(layer)
    found = sorted(
        {
            name
            for dist in metadata.distributions()
            if (name := (dist.metadata["Name"] or "").lower().replace("_", "-")).startswith(prefixes)
        }
    )
    component = f"no other engine in the {layer} image"
    expected = f"none of {', '.join(p + '*' for p in prefixes)}"
    if found:
        fix = "install the image's lock only (`epstack guard --locks` names each extra)"
        return Check(component=component, expected=expected, found=", ".join(found), verdict="extra", fix=fix)
    return Check(component=component, expected=expected, found="none", verdict="ok")
