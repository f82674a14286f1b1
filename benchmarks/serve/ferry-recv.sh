#!/usr/bin/env bash
# The GPU host's side of ferry-pack.sh, run by each back-to-back device call in the repository copy the
# call brings (../shared/gpu-ferry/README.md's method). Every call moves the chunks it carries
# (.ferry/c/c*) to /opt/ferry/c and says what is there and how the NCCL build goes. With `first` (the
# call that also carries .ferry/epd and .ferry/sources): epstack's dependency wheels installed into
# /opt/epstack-deps, the sources kept in /opt/ferry/sources, and NCCL built from them detached
# (scripts/gpu/install-nccl.sh over the host venv's pip NCCL), so it runs while the chunks travel.
# Then: benchmarks/elastic/run_h200.sh stack install serve-start (GPU_SRC=/opt/ferry/sources).
set -uo pipefail
ferry=/opt/ferry
mkdir -p "$ferry/c"
if [[ ${1:-} == first ]]; then
    rm -rf "$ferry/sources" "$ferry/src" && cp -r .ferry/sources "$ferry/sources"
    python3 -m pip install --quiet --no-index --no-deps --target /opt/epstack-deps .ferry/epd/*.whl 2>&1 \
        | grep -v WARNING | tail -n 3
    # A copy of this tree for the detached build: the next call's copy replaces this one.
    mkdir -p "$ferry/src" && tar --exclude=./.ferry -cf - . | tar -xf - -C "$ferry/src"
    (cd "$ferry/src" && PYTHONPATH="$ferry/src:/opt/epstack-deps" setsid bash -c \
        "bash scripts/gpu/install-nccl.sh --pins pins.env --src $ferry/sources/nccl-*.tar.gz --arch 90 \
         --prefix /opt/nccl; echo \"nccl exit \$?\"; touch $ferry/nccl.done" >"$ferry/nccl.log" 2>&1 </dev/null &)
fi
for chunk in .ferry/c/c*; do [[ -f $chunk ]] && mv "$chunk" "$ferry/c/"; done
echo "chunks: $(find "$ferry/c" -type f | wc -l), $(du -sh "$ferry/c" | cut -f1)"
if [[ -f $ferry/nccl.done ]]; then tail -n 2 "$ferry/nccl.log"; else echo "nccl: $(tail -c 160 "$ferry/nccl.log" | tr '\n' ' ')"; fi
