#!/usr/bin/env bash
# Sourced by the entrypoint before the guard: the DeepEP kernels the image ships (`epstack jit layer`,
# read-only under $EPSTACK_HOME/jit/deep_ep) copied into the writable $EP_JIT_CACHE_DIR, where DeepEP
# finds them by name (cache/kernel.<name>.<hash>) and compiles any other kernel beside them. Copies, not
# links: a cache a node shares between pods of other images holds no link into this one. Each kernel is
# staged in the cache's tmp/ and renamed into place, as DeepEP does, so a process starting beside this
# one never reads half a kernel; a kernel already there is kept. A cache folder that cannot be written (a
# read-only root, as enroot mounts it by default) moves to ${TMPDIR:-/tmp}/epstack/deep_ep, said on stderr.
jit_shipped=${EPSTACK_HOME}/jit/deep_ep
jit_cache=${EP_JIT_CACHE_DIR:-${HOME}/.deep_ep}
if ! { mkdir -p "${jit_cache}" 2>/dev/null && [ -w "${jit_cache}" ]; }; then
  jit_fallback=${TMPDIR:-/tmp}/epstack/deep_ep
  echo "epstack: EP_JIT_CACHE_DIR=${jit_cache} cannot be written (a read-only root?);" \
    "DeepEP's kernels compile into ${jit_fallback}" >&2
  mkdir -p "${jit_fallback}"
  export EP_JIT_CACHE_DIR=${jit_fallback}
  jit_cache=${jit_fallback}
fi
if [ -d "${jit_shipped}/cache" ]; then
  mkdir -p "${jit_cache}/cache" "${jit_cache}/tmp"
  jit_staged=$(mktemp -d "${jit_cache}/tmp/epstack.XXXXXX")
  cp -r "${jit_shipped}/cache/." "${jit_staged}/"
  for jit_kernel in "${jit_staged}"/kernel.*; do
    mv -T "${jit_kernel}" "${jit_cache}/cache/${jit_kernel##*/}" 2>/dev/null || true
  done
  rm -rf "${jit_staged}"
fi
