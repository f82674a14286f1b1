#!/usr/bin/env bash
# Sourced by the entrypoint before the guard: the JIT caches the image ships, into writable folders.
# DeepEP's kernels (`epstack jit layer`, read-only under $EPSTACK_HOME/jit/deep_ep) copied into the
# writable $EP_JIT_CACHE_DIR, where DeepEP finds them by name (cache/kernel.<name>.<hash>) and compiles
# any other kernel beside them. Copies, not links: a cache a node shares between pods of other images
# holds no link into this one. Each kernel is staged in the cache's tmp/ and renamed into place, as
# DeepEP does, so a process starting beside this one never reads half a kernel; one already there is
# kept. A cache folder that cannot be written (a read-only root, as enroot mounts it by default) moves to
# ${TMPDIR:-/tmp}/epstack/deep_ep, said on stderr.
# The folder under ${TMPDIR:-/tmp}/epstack a cache moves to ($1: its variable, $2: its folder, $3: the
# name there), in $epstack_tmp; where TMPDIR cannot be written either, the start stops in one line
# (exit 3: the environment lacks something).
epstack_fallback() {
  epstack_tmp=${TMPDIR:-/tmp}/epstack/$3
  if ! { mkdir -p "${epstack_tmp}" 2>/dev/null && [ -w "${epstack_tmp}" ]; }; then
    echo "epstack: $1=$2 cannot be written (a read-only root?), nor TMPDIR=${TMPDIR:-/tmp}" \
      "(${epstack_tmp}); fix: set TMPDIR or $1 to a writable folder" >&2
    exit 3
  fi
}
jit_shipped=${EPSTACK_HOME}/jit/deep_ep
jit_cache=${EP_JIT_CACHE_DIR:-${HOME}/.deep_ep}
if ! { mkdir -p "${jit_cache}" 2>/dev/null && [ -w "${jit_cache}" ]; }; then
  epstack_fallback EP_JIT_CACHE_DIR "${jit_cache}" deep_ep
  echo "epstack: EP_JIT_CACHE_DIR=${jit_cache} cannot be written (a read-only root?);" \
    "DeepEP's kernels compile into ${epstack_tmp}" >&2
  export EP_JIT_CACHE_DIR=${epstack_tmp}
  jit_cache=${epstack_tmp}
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
# FlashInfer's modules the image ships (`epstack jit probe --ship`, under $EPSTACK_HOME/jit/flashinfer)
# copied into $FLASHINFER_WORKSPACE_BASE, the folder they were built in, with their timestamps: ninja,
# which FlashInfer runs before it loads a module, then has nothing to do. Each module's folder is staged
# and renamed into place; one already there is kept. Where that folder cannot be written, FlashInfer's
# workspace moves to ${TMPDIR:-/tmp}/epstack/flashinfer, where its modules compile at first use (their
# objects are named by absolute path), said on stderr.
fi_shipped=${EPSTACK_HOME}/jit/flashinfer
if [ -d "${fi_shipped}/.cache" ]; then
  fi_base=${FLASHINFER_WORKSPACE_BASE:-${HOME}}
  if ! { mkdir -p "${fi_base}" 2>/dev/null && [ -w "${fi_base}" ]; }; then
    epstack_fallback FLASHINFER_WORKSPACE_BASE "${fi_base}" flashinfer
    echo "epstack: FLASHINFER_WORKSPACE_BASE=${fi_base} cannot be written (a read-only root?);" \
      "FlashInfer's modules compile into ${epstack_tmp} at first use" >&2
    export FLASHINFER_WORKSPACE_BASE=${epstack_tmp}
  else
    for fi_module in "${fi_shipped}"/.cache/flashinfer/*/*/*/*/; do
      fi_target=${fi_base}/${fi_module#"${fi_shipped}/"}
      fi_target=${fi_target%/}
      [ -e "${fi_target}" ] && continue
      mkdir -p "${fi_target%/*}"
      fi_staged=$(mktemp -d "${fi_target%/*}/.epstack.XXXXXX")
      cp -r --preserve=timestamps "${fi_module}." "${fi_staged}/"
      chmod 755 "${fi_staged}"  # mktemp's 0700 would hide the module from other users of the cache
      mv -T "${fi_staged}" "${fi_target}" 2>/dev/null || rm -rf "${fi_staged}"
    done
  fi
fi
# Triton's launchers the image ships (`epstack jit probe --ship`, one per folder GPU nodes mount the
# driver in, under $EPSTACK_HOME/jit/triton) copied into the writable $TRITON_CACHE_DIR, where a
# process's first kernel launch finds the one its node's key names. Each key's folder is staged and
# renamed into place; one already there is kept. A cache that cannot be written moves to
# ${TMPDIR:-/tmp}/epstack/triton (Triton writes every kernel there), said on stderr.
tr_shipped=${EPSTACK_HOME}/jit/triton
if [ -d "${tr_shipped}" ]; then
  tr_cache=${TRITON_CACHE_DIR:-${HOME}/.triton/cache}
  if ! { mkdir -p "${tr_cache}" 2>/dev/null && [ -w "${tr_cache}" ]; }; then
    epstack_fallback TRITON_CACHE_DIR "${tr_cache}" triton
    echo "epstack: TRITON_CACHE_DIR=${tr_cache} cannot be written (a read-only root?);" \
      "Triton's launcher and kernels go to ${epstack_tmp}" >&2
    export TRITON_CACHE_DIR=${epstack_tmp}
    tr_cache=${epstack_tmp}
  fi
  for tr_key in "${tr_shipped}"/*/; do
    tr_target=${tr_cache}/$(basename "${tr_key}")
    [ -e "${tr_target}" ] && continue
    tr_staged=$(mktemp -d "${tr_cache}/.epstack.XXXXXX")
    cp -r "${tr_key}." "${tr_staged}/"
    chmod 755 "${tr_staged}"
    mv -T "${tr_staged}" "${tr_target}" 2>/dev/null || rm -rf "${tr_staged}"
  done
fi
