# epstack 0.1.0: base layer for target blackwell-ib. CUDA 13.0.3, Python 3.12, torch, NCCL, NVSHMEM, ib.
# Rendered from images/base/Dockerfile.j2 and pins.env; do not edit, run `epstack render`.
# Stages: os -> devel (venv: NCCL, NVSHMEM, torch; epstack's guard; DeepEP is built on it)
#         base (CUDA base image + the venv + the JITs' toolchains + fabric)
# Everything here comes from package registries (PyPI, the Ubuntu archive, the EFA installer).
# Every install step is followed by `epstack guard` for its layer: drift fails the build.
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1

# ---- os: compilers and Python on the CUDA devel image, apt archive pinned by date ----------
FROM ${CUDA_DEVEL_IMAGE} AS os
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV EPSTACK_HOME=/opt/epstack \
    VIRTUAL_ENV=/opt/epstack/venv \
    PATH=/opt/epstack/bin:/opt/epstack/venv/bin:/usr/local/cuda/bin:${PATH} \
    UV_VERSION=0.13.9 \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    PYTHONDONTWRITEBYTECODE=1
ARG UBUNTU_SNAPSHOT=20261115T000000Z
ARG PYTHON_VERSION=3.12
COPY scripts/image/install-os-packages.sh /opt/epstack/scripts/
# libibverbs-dev: the NVSHMEM headers DeepEP compiles against include infiniband/mlx5dv.h.
RUN /opt/epstack/scripts/install-os-packages.sh "${UBUNTU_SNAPSHOT}" \
      "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv" "python${PYTHON_VERSION}-dev" \
      build-essential ca-certificates curl git libibverbs-dev libnuma-dev pkg-config

# ---- devel: the venv (NCCL 2.32.6, NVSHMEM 3.4.5, torch 2.14.1 cu130) and epstack's guard ----------
FROM os AS devel
COPY scripts/image/install-python-packages.sh /opt/epstack/scripts/
COPY targets/blackwell-ib/locks/uv-bootstrap.txt targets/blackwell-ib/locks/base.txt /opt/epstack/locks/
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/epstack/scripts/install-python-packages.sh /opt/epstack/locks/base.txt --require-hashes --no-deps --no-build
COPY scripts/image/install-epstack.sh scripts/image/guard-layer.sh scripts/image/cuda-stub.sh \
     scripts/image/entrypoint.sh scripts/image/jit-caches.sh scripts/image/hold-env.c /opt/epstack/scripts/
COPY src/ /opt/epstack/src/
RUN --mount=type=cache,target=/root/.cache/uv /opt/epstack/scripts/install-epstack.sh /opt/epstack/src
ENTRYPOINT ["/opt/epstack/bin/hold-env", "/opt/epstack/scripts/entrypoint.sh"]
ENV EPSTACK_PINS=/opt/epstack/pins/base.pins.env \
    EPSTACK_GUARD_LAYER=base \
    EPSTACK_LOCKS=/opt/epstack/locks
COPY targets/blackwell-ib/base.pins.env /opt/epstack/pins/
RUN /opt/epstack/scripts/guard-layer.sh base && \
    epstack image sbom --target blackwell-ib --image-tag base-cu13.0-nccl2.32.6-ib-a0fba3ea47d2 \
      --base-image nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266
LABEL \
    org.opencontainers.image.title="epstack base (blackwell-ib)" \
    org.opencontainers.image.vendor="epstack" \
    org.opencontainers.image.version="base-cu13.0-nccl2.32.6-ib-a0fba3ea47d2" \
    org.opencontainers.image.base.name="nvidia/cuda:13.0.3-devel-ubuntu24.04" \
    org.opencontainers.image.base.digest="sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266" \
    io.epstack.target="blackwell-ib" \
    io.epstack.layer="base" \
    io.epstack.stage="devel" \
    io.epstack.pin.cuda_devel_image="nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266" \
    io.epstack.pin.cuda_minor_exceptions="none" \
    io.epstack.pin.cuda_runtime_image="nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.pin.cuda_version="13.0.3" \
    io.epstack.pin.fabric="ib" \
    io.epstack.pin.ib_gin_type="3" \
    io.epstack.pin.nccl_version="2.32.6" \
    io.epstack.pin.nvshmem_version="3.4.5" \
    io.epstack.pin.python_version="3.12" \
    io.epstack.pin.rdma_core_version="50.0-2ubuntu0.2" \
    io.epstack.pin.torch_cuda_tag="cu130" \
    io.epstack.pin.torch_version="2.14.1" \
    io.epstack.pin.ubuntu_snapshot="20261115T000000Z" \
    io.epstack.pin.uv_version="0.13.9"

# ---- base: the CUDA base flavour with the devel venv, what the JITs compile with, ib ----------
FROM ${CUDA_RUNTIME_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV EPSTACK_HOME=/opt/epstack \
    VIRTUAL_ENV=/opt/epstack/venv \
    PATH=/opt/epstack/bin:/opt/epstack/venv/bin:/usr/local/cuda/bin:${PATH} \
    UV_VERSION=0.13.9 \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    PYTHONDONTWRITEBYTECODE=1
ARG UBUNTU_SNAPSHOT=20261115T000000Z
ARG PYTHON_VERSION=3.12
COPY scripts/image/install-os-packages.sh scripts/image/link-cuda-dev.sh /opt/epstack/scripts/
# The host compilers and Python headers SGLang's first request compiles with: g++ drives nvcc (DeepEP,
# DeepGEMM, FlashInfer) and links FlashInfer's modules; gcc and Python.h build Triton's launcher. Then
# the links the JITs look for: /usr/local/cuda, its include and lib64, libcudart.so for -lcudart.
RUN /opt/epstack/scripts/install-os-packages.sh "${UBUNTU_SNAPSHOT}" \
      "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv" "libpython${PYTHON_VERSION}-dev" \
      ca-certificates g++ libnuma1 && \
    /opt/epstack/scripts/link-cuda-dev.sh /usr/local/cuda-13.0 13
# The venv (GBs, changes with the wheels) apart from epstack's tool (changes with epstack): a new
# epstack rebuilds and re-pulls only the small layers.
COPY --from=devel /opt/epstack/venv/ /opt/epstack/venv/
COPY --from=devel /opt/epstack/tool/ /opt/epstack/tool/
COPY --from=devel /opt/epstack/bin/ /opt/epstack/bin/
COPY --from=devel /opt/epstack/scripts/ /opt/epstack/scripts/
COPY --from=devel /opt/epstack/pins/ /opt/epstack/pins/
COPY --from=devel /opt/epstack/locks/ /opt/epstack/locks/
# Of the toolkit, what the JITs run and read (epstack/stack.py CUDA_JIT_TOOLKIT): nvcc and its tools,
# NVVM, the headers, the driver stub. Every CUDA library torch loads comes from the venv's wheels.
COPY --from=devel /usr/local/cuda-13.0/bin/nvcc \
    /usr/local/cuda-13.0/bin/nvcc.profile \
    /usr/local/cuda-13.0/bin/cudafe++ \
    /usr/local/cuda-13.0/bin/ptxas \
    /usr/local/cuda-13.0/bin/fatbinary \
    /usr/local/cuda-13.0/bin/nvlink \
    /usr/local/cuda-13.0/bin/cuobjdump \
    /usr/local/cuda-13.0/bin/
COPY --from=devel /usr/local/cuda-13.0/bin/crt/ \
    /usr/local/cuda-13.0/bin/crt/
COPY --from=devel /usr/local/cuda-13.0/nvvm/ \
    /usr/local/cuda-13.0/nvvm/
COPY --from=devel /usr/local/cuda-13.0/targets/x86_64-linux/include/ \
    /usr/local/cuda-13.0/targets/x86_64-linux/include/
COPY --from=devel /usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/ \
    /usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/
RUN /opt/epstack/scripts/install-os-packages.sh "${UBUNTU_SNAPSHOT}" \
      ibverbs-providers=50.0-2ubuntu0.2 \
      libibverbs1=50.0-2ubuntu0.2 \
      librdmacm1=50.0-2ubuntu0.2 \
      rdma-core=50.0-2ubuntu0.2
ENV NCCL_GIN_TYPE=3
ENV CUDA_HOME=/usr/local/cuda \
    NCCL_CUMEM_ENABLE=1
# Triton's cache, writable by every user: the guard step ships its launcher (epstack jit probe --ship),
# which the entrypoint copies in at start.
ENV TRITON_CACHE_DIR=/var/cache/epstack-jit/triton
RUN install -d -m 1777 /var/cache/epstack-jit /var/cache/epstack-jit/triton
ENTRYPOINT ["/opt/epstack/bin/hold-env", "/opt/epstack/scripts/entrypoint.sh"]
ENV EPSTACK_PINS=/opt/epstack/pins/base.pins.env \
    EPSTACK_GUARD_LAYER=base \
    EPSTACK_LOCKS=/opt/epstack/locks
COPY targets/blackwell-ib/base.pins.env /opt/epstack/pins/
RUN /opt/epstack/scripts/guard-layer.sh base && \
    epstack image sbom --target blackwell-ib --image-tag base-cu13.0-nccl2.32.6-ib-a0fba3ea47d2 \
      --base-image nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
LABEL \
    org.opencontainers.image.title="epstack base (blackwell-ib)" \
    org.opencontainers.image.vendor="epstack" \
    org.opencontainers.image.version="base-cu13.0-nccl2.32.6-ib-a0fba3ea47d2" \
    org.opencontainers.image.base.name="nvidia/cuda:13.0.3-base-ubuntu24.04" \
    org.opencontainers.image.base.digest="sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.target="blackwell-ib" \
    io.epstack.layer="base" \
    io.epstack.stage="base" \
    io.epstack.pin.cuda_devel_image="nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:b7ae301dea2c162444795462ce17a05f6a516e5a75944b57af5b88540a1a2266" \
    io.epstack.pin.cuda_minor_exceptions="none" \
    io.epstack.pin.cuda_runtime_image="nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.pin.cuda_version="13.0.3" \
    io.epstack.pin.fabric="ib" \
    io.epstack.pin.ib_gin_type="3" \
    io.epstack.pin.nccl_version="2.32.6" \
    io.epstack.pin.nvshmem_version="3.4.5" \
    io.epstack.pin.python_version="3.12" \
    io.epstack.pin.rdma_core_version="50.0-2ubuntu0.2" \
    io.epstack.pin.torch_cuda_tag="cu130" \
    io.epstack.pin.torch_version="2.14.1" \
    io.epstack.pin.ubuntu_snapshot="20261115T000000Z" \
    io.epstack.pin.uv_version="0.13.9"
