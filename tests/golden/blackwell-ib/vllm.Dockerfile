# epstack 0.1.0: vllm layer for target blackwell-ib. vLLM 0.33.0 over the DeepEP layer, beside SGLang.
# Rendered from images/vllm/Dockerfile.j2 and pins.env; do not edit, run `epstack render`.
# Exactly locks/vllm.txt: resolved (epstack pins lock) with the base lock as constraints, the base
# packages overridden to their pins (torch, nvidia-nccl-cu13, nvidia-nvshmem-cu13),
# CUDA's toolkit wheels at 13.0, neither another deep_ep nor another CUDA major
# (sgl-deep-ep, deep-ep, nvidia-cutlass-dsl-libs-cu12, nixl-cu12);
# installed with hashes and nothing resolved here.
# vLLM asks for another torch than the pinned one; its native libraries import only torch's stable C ABI
# (docs/explanation/vllm.md), so it runs over the torch every layer below holds.
ARG DEEPEP_IMAGE=epstack:deepep-d4f41e4-cu13.0-blackwell-ib-309d1639da42

FROM ${DEEPEP_IMAGE} AS vllm
# Two layers: vLLM's closure, then the distributions that move with every vLLM release (vllm,
# flashinfer), so a vLLM bump rebuilds and re-pulls the second one.
COPY targets/blackwell-ib/locks/vllm.txt targets/blackwell-ib/locks/vllm-closure.txt /opt/epstack/locks/
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/epstack/scripts/install-python-packages.sh /opt/epstack/locks/vllm-closure.txt --require-hashes --no-deps --no-build
COPY targets/blackwell-ib/locks/vllm-family.txt /opt/epstack/locks/
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/epstack/scripts/install-python-packages.sh /opt/epstack/locks/vllm-family.txt --require-hashes --no-deps --no-build
# FlashInfer compiles its modules at first use into its workspace (vLLM samples with FlashInfer's
# `sampling`): the guard step compiles them (epstack jit probe --ship) there for the target's archs and
# keeps them under /opt/epstack/jit; the entrypoint copies them back at start, into this folder.
# FLASHINFER_USE_CUDA_NORM=1: FlashInfer's rmsnorm, wherever it is called, from the shipped `norm` module,
# not CuTe DSL kernels compiled at start (vLLM's closure holds the CuTe DSL too).
# VLLM_CACHE_ROOT holds torch.compile's artifacts (Inductor's code; Triton's kernels go to the base
# layer's TRITON_CACHE_DIR, which vLLM keeps when it is set); vLLM's own DeepGEMM reads DG_JIT_CACHE_DIR.
# VLLM_NO_USAGE_STATS=1: a served image reports nothing to vLLM's usage server.
ENV FLASHINFER_WORKSPACE_BASE=/var/cache/epstack-jit/flashinfer \
    FLASHINFER_USE_CUDA_NORM=1 \
    VLLM_CACHE_ROOT=/var/cache/epstack-jit/vllm \
    DG_JIT_CACHE_DIR=/var/cache/epstack-jit/deep_gemm \
    VLLM_NO_USAGE_STATS=1
RUN install -d -m 1777 /var/cache/epstack-jit/flashinfer /var/cache/epstack-jit/vllm \
    /var/cache/epstack-jit/deep_gemm
ENV EPSTACK_PINS=/opt/epstack/pins/vllm.pins.env \
    EPSTACK_GUARD_LAYER=vllm \
    EPSTACK_LOCKS=/opt/epstack/locks
COPY targets/blackwell-ib/vllm.pins.env /opt/epstack/pins/
RUN /opt/epstack/scripts/guard-layer.sh vllm && \
    epstack image sbom --target blackwell-ib --image-tag vllm-0.33.0-deepep-d4f41e4-cu13.0-blackwell-ib-cad8091b3611 \
      --base-image nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
LABEL \
    org.opencontainers.image.title="epstack vllm (blackwell-ib)" \
    org.opencontainers.image.vendor="epstack" \
    org.opencontainers.image.version="vllm-0.33.0-deepep-d4f41e4-cu13.0-blackwell-ib-cad8091b3611" \
    org.opencontainers.image.base.name="nvidia/cuda:13.0.3-base-ubuntu24.04" \
    org.opencontainers.image.base.digest="sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.target="blackwell-ib" \
    io.epstack.layer="vllm" \
    io.epstack.stage="vllm" \
    org.opencontainers.image.created="2026-11-29T00:00:00Z" \
    org.opencontainers.image.revision="0000000000000000000000000000000000000000" \
    io.epstack.pin.cuda_devel_image="nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266" \
    io.epstack.pin.cuda_minor_exceptions="none" \
    io.epstack.pin.cuda_runtime_image="nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.pin.cuda_version="13.0.3" \
    io.epstack.pin.deepep_fmt_ref="a4c7e17133ee9cb6a2f45545f6e974dd3c393efa" \
    io.epstack.pin.deepep_patches_ib="https://raw.githubusercontent.com/vllm-project/vllm/665dfaaf4e0df9000ca101b808546a046ac710b0/tools/ep_kernels/patches/deepep-gin-barrier-data-visibility.patch#sha256=fbde7fef0cd154a090f3a150a55bb0300c4c364800f485cf27361031bb25c961" \
    io.epstack.pin.deepep_ref="d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb" \
    io.epstack.pin.deepep_repo="https://github.com/deepseek-ai/DeepEP.git" \
    io.epstack.pin.fabric="ib" \
    io.epstack.pin.gdrcopy_ref="c91ad9f178e5fb729fc5b6dc62a77c3bb364d6c9" \
    io.epstack.pin.gdrcopy_version="2.5.2" \
    io.epstack.pin.ib_gin_type="3" \
    io.epstack.pin.nccl_version="2.32.6" \
    io.epstack.pin.nvshmem_version="3.4.5" \
    io.epstack.pin.python_version="3.12" \
    io.epstack.pin.rdma_core_version="50.0-2ubuntu0.2" \
    io.epstack.pin.torch_cuda_arch_list="10.0a" \
    io.epstack.pin.torch_cuda_tag="cu130" \
    io.epstack.pin.torch_version="2.14.1" \
    io.epstack.pin.ubuntu_snapshot="20261115T000000Z" \
    io.epstack.pin.uv_version="0.13.9" \
    io.epstack.pin.vllm_version="0.33.0"
