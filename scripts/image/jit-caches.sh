#!/usr/bin/env bash
# Sourced by the entrypoint before the guard: the JIT caches the image ships into the writable ones, by
# `epstack image jit-install` (epstack.jit.install; each toolchain's cache is its module's HOME, listed in
# epstack.jit.registry). It copies each shipped cache's checked files into a staging folder in the
# writable cache and renames each entry into place; a cache folder that cannot be written moves to
# ${TMPDIR:-/tmp}/epstack/<tool>, said on stderr, and its variable is exported here from the command's
# `export` lines. Where TMPDIR cannot be written either, the start stops in one line (exit 3).

# epstack_jit_install: `epstack image jit-install` (in an image, as epstack-start runs it: isolated, before the
# guard has judged the venv; python3 -m epstack where no command is on PATH, as on a GPU host's
# checkout), its exports into this shell; stops the shell with its exit status on failure.
epstack_jit_install() {
  local exports
  if command -v epstack-start >/dev/null 2>&1; then
    exports=$(epstack-start image jit-install) || exit
  elif command -v epstack >/dev/null 2>&1; then
    exports=$(epstack image jit-install) || exit
  else
    exports=$(python3 -m epstack image jit-install) || exit
  fi
  eval "${exports}"
}

epstack_jit_install
