# epstack 0.1.0: deepep layer for target blackwell-ib. GDRCopy 2.5.2, DeepEP V2 at d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb for TORCH_CUDA_ARCH_LIST=10.0a.
# Rendered from images/deepep/Dockerfile.j2 and pins.env; do not edit, run `epstack render`.
# Stages: build (on the devel image: GDRCopy and DeepEP from their pinned commits, from the sources
#                folder's `git archive` tarballs when there, else cloned; both checked against pins)
#         deepep (base image + libgdrapi + the deep_ep wheel; the build trees stay behind)
ARG DEVEL_IMAGE=epstack:devel-cu13.0-nccl2.32.6-ib-a0fba3ea47d2
ARG BASE_IMAGE=epstack:base-cu13.0-nccl2.32.6-ib-a0fba3ea47d2

FROM ${DEVEL_IMAGE} AS build
COPY sources/deepep/ /opt/epstack/sources/
COPY scripts/image/build-gdrcopy.sh /opt/epstack/scripts/
RUN /opt/epstack/scripts/build-gdrcopy.sh 2.5.2 c91ad9f178e5fb729fc5b6dc62a77c3bb364d6c9 /opt/gdrcopy /opt/epstack/sources
COPY targets/blackwell-ib/locks/deepep-build.txt /opt/epstack/locks/
COPY targets/blackwell-ib/deepep.pins.env /opt/epstack/pins/
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/epstack/scripts/install-python-packages.sh /opt/epstack/locks/deepep-build.txt --require-hashes --no-deps --no-build && \
    epstack image deepep-build --pins /opt/epstack/pins/deepep.pins.env --sources /opt/epstack/sources \
      --wheel-dir /opt/epstack/wheels

FROM ${BASE_IMAGE} AS deepep
COPY --from=build /opt/gdrcopy/ /opt/gdrcopy/
COPY --from=build /opt/epstack/wheels/ /opt/epstack/wheels/
# Library paths extend the image's (ld.so.conf.d), never replace LD_LIBRARY_PATH (driver mounts).
RUN --mount=type=cache,target=/root/.cache/uv \
    uv pip install --no-deps /opt/epstack/wheels/deep_ep-*.whl && \
    echo /opt/gdrcopy/lib > /etc/ld.so.conf.d/gdrcopy.conf && ldconfig && \
    install -d -m 1777 /var/cache/deep_ep
# DeepEP V2 JIT-compiles its kernels at first use: cache them where every user can write.
ENV EP_JIT_CACHE_DIR=/var/cache/deep_ep
ENV EPSTACK_PINS=/opt/epstack/pins/deepep.pins.env \
    EPSTACK_GUARD_LAYER=deepep \
    EPSTACK_LOCKS=/opt/epstack/locks
COPY targets/blackwell-ib/deepep.pins.env /opt/epstack/pins/
RUN /opt/epstack/scripts/guard-layer.sh deepep && \
    epstack image sbom --target blackwell-ib --image-tag deepep-d4f41e4-cu13.0-blackwell-ib-309d1639da42 \
      --base-image nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
LABEL \
    org.opencontainers.image.title="epstack deepep (blackwell-ib)" \
    org.opencontainers.image.vendor="epstack" \
    org.opencontainers.image.version="deepep-d4f41e4-cu13.0-blackwell-ib-309d1639da42" \
    org.opencontainers.image.base.name="nvidia/cuda:13.0.3-base-ubuntu24.04" \
    org.opencontainers.image.base.digest="sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1" \
    io.epstack.target="blackwell-ib" \
    io.epstack.layer="deepep" \
    io.epstack.stage="deepep" \
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
    io.epstack.pin.uv_version="0.13.9"
