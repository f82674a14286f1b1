#!/usr/bin/env bash
# Sourced by the entrypoint before the guard: the JIT caches the image ships into the writable ones.
# Each shipped cache is a read-only folder $EPSTACK_HOME/jit/<tool> with its sha256sum list beside it
# (<tool>.sha256, written with its manifest: epstack.jit.shipped). Only the files that list names are
# copied, into a staging folder beside the writable cache, and checked there against the list: a cache
# whose bytes differ is not copied, said on stderr (the guard then names the change). Each entry (a
# kernel, a module, a key's folder) is then renamed from staging into its place, so a process starting
# beside this one never reads half of one; one already there is kept. Copies, not links: a cache a node
# shares between pods of other images holds no link into this one. A cache folder that cannot be
# written (a read-only root, as enroot mounts it by default) moves to ${TMPDIR:-/tmp}/epstack/<tool>,
# said on stderr; where TMPDIR cannot be written either, the start stops in one line (exit 3).

# epstack_cache VARIABLE FOLDER NAME WHAT: the writable cache in $epstack_cache, FOLDER or, when it
# cannot be written, ${TMPDIR:-/tmp}/epstack/NAME, VARIABLE exported to it and WHAT said.
epstack_cache() {
  epstack_cache=$2
  if mkdir -p "${epstack_cache}" 2>/dev/null && [ -w "${epstack_cache}" ]; then
    return 0
  fi
  epstack_cache=${TMPDIR:-/tmp}/epstack/$3
  if ! { mkdir -p "${epstack_cache}" 2>/dev/null && [ -w "${epstack_cache}" ]; }; then
    echo "epstack: $1=$2 cannot be written (a read-only root?), nor TMPDIR=${TMPDIR:-/tmp}" \
      "(${epstack_cache}); fix: set TMPDIR or $1 to a writable folder" >&2
    exit 3
  fi
  echo "epstack: $1=$2 cannot be written (a read-only root?); $4 ${epstack_cache}" >&2
  export "$1=${epstack_cache}"
  return 1
}

# epstack_copy SHIPPED CACHE ENTRIES...: the files SHIPPED's list names, copied with their timestamps
# (ninja reads FlashInfer's) into a staging folder in CACHE and checked there; then the entries each
# glob names (relative to the cache, e.g. 'cache/kernel.*'), renamed into CACHE where none is yet.
epstack_copy() {
  local shipped=$1 cache=$2 staged pattern parent
  shift 2
  staged=$(mktemp -d "${cache}/.epstack.XXXXXX")
  if ! { [ -f "${shipped}.sha256" ] &&
    (cd "${shipped}" && cut -c67- "${shipped}.sha256" | xargs -r cp --parents --preserve=timestamps -t "${staged}") &&
    (cd "${staged}" && sha256sum --quiet --strict --check "${shipped}.sha256" >/dev/null 2>&1); }; then
    echo "epstack: ${shipped} differs from its sha256 list ${shipped}.sha256, so it is not copied into" \
      "${cache}; the guard names the change" >&2
    rm -rf "${staged}"
    return 0
  fi
  chmod -R a+rX "${staged}"  # mktemp's 0700 and the umask would hide entries from other users
  for pattern in "$@"; do
    case "${pattern}" in */*) ;; *) pattern=./${pattern} ;; esac
    for parent in "${staged}"/${pattern%/*}; do
      [ -d "${parent}" ] || continue
      mkdir -p "${cache}/${parent#"${staged}/"}"
      # one rename per entry, none over one already there (-n); the leaf is a glob
      # shellcheck disable=SC2086
      mv -n -t "${cache}/${parent#"${staged}/"}" "${parent}"/${pattern##*/} 2>/dev/null || true
    done
  done
  rm -rf "${staged}"
}

jit_shipped=${EPSTACK_HOME}/jit
# DeepEP's kernels (`epstack jit layer`): DeepEP finds each by name (cache/kernel.<name>.<hash>) in
# $EP_JIT_CACHE_DIR and compiles any other beside them.
# Its cache moves to TMPDIR where it cannot be written, kernels shipped or not: DeepEP compiles there.
epstack_cache EP_JIT_CACHE_DIR "${EP_JIT_CACHE_DIR:-${HOME}/.deep_ep}" deep_ep "DeepEP's kernels compile into" || true
if [ -d "${jit_shipped}/deep_ep" ]; then
  epstack_copy "${jit_shipped}/deep_ep" "${epstack_cache}" 'cache/kernel.*'
fi
# DeepGEMM's kernels (`epstack jit layer`): SGLang points DeepGEMM at $SGLANG_DG_CACHE_DIR, where it
# finds each by its digest (cache/<tag>.<digest>/.committed) and compiles any other beside them.
if [ -d "${jit_shipped}/deep_gemm" ]; then
  epstack_cache SGLANG_DG_CACHE_DIR "${SGLANG_DG_CACHE_DIR:-${SGLANG_CACHE_DIR:-${HOME}/.cache/sglang}/deep_gemm}" \
    deep_gemm "DeepGEMM's kernels go to" || true
  epstack_copy "${jit_shipped}/deep_gemm" "${epstack_cache}" 'cache/*.*'
fi
# SGLang's own JIT kernels (`epstack jit layer`): SGLang finds each leaf by its build and dependency keys
# (<target>/<module>/build-<key>/deps-<key>/) in $SGLANG_JIT_CACHE_DIR and compiles any other beside them.
if [ -d "${jit_shipped}/sglang_jit" ]; then
  epstack_cache SGLANG_JIT_CACHE_DIR "${SGLANG_JIT_CACHE_DIR:-${HOME}/.cache/sglang/jit}" sglang_jit \
    "SGLang's JIT kernels go to" || true
  epstack_copy "${jit_shipped}/sglang_jit" "${epstack_cache}" '*/*/*/*'
fi
# FlashInfer's modules (`epstack jit probe --ship`) into $FLASHINFER_WORKSPACE_BASE, the folder they were
# built in, with their timestamps: ninja, which FlashInfer runs before it loads a module, then has
# nothing to do. Moved to TMPDIR, the workspace gets no copy: its objects are named by absolute path,
# so its modules compile there at first use.
if [ -d "${jit_shipped}/flashinfer/.cache" ] &&
  epstack_cache FLASHINFER_WORKSPACE_BASE "${FLASHINFER_WORKSPACE_BASE:-${HOME}}" flashinfer \
    "FlashInfer's modules compile at first use into"; then
  epstack_copy "${jit_shipped}/flashinfer" "${epstack_cache}" '.cache/flashinfer/*/*/*/*'
fi
# Triton's launchers (`epstack jit probe --ship`, one per folder GPU nodes mount the driver in) into
# $TRITON_CACHE_DIR, where a process's first kernel launch finds the one its node's key names.
if [ -d "${jit_shipped}/triton" ]; then
  epstack_cache TRITON_CACHE_DIR "${TRITON_CACHE_DIR:-${HOME}/.triton/cache}" triton \
    "Triton's launcher and kernels go to" || true
  epstack_copy "${jit_shipped}/triton" "${epstack_cache}" '*'
fi
