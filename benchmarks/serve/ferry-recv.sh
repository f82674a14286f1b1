#!/usr/bin/env bash
# The GPU host's side of ferry-pack.sh, run by each back-to-back device call in the repository copy the
# call brings (../shared/gpu-ferry/README.md's method). Every call moves the chunks it carries
# (.ferry/c/c*) to /opt/ferry/c and says what is there. With `first` (the call that also carries
# .ferry/epd and .ferry/sources): epstack's dependency wheels installed into /opt/epstack-deps and the
# sources (DeepEP, fmt) kept in /opt/ferry/sources. NCCL needs no build: its pinned wheel travels in the
# chunks. Then: benchmarks/elastic/run_h200.sh stack install serve-start (GPU_SRC=/opt/ferry/sources):
# stack sets the NCCL wheel aside, install puts it into the host's venv.
set -uo pipefail
ferry=/opt/ferry
mkdir -p "$ferry/c"
if [[ ${1:-} == first ]]; then
    rm -rf "$ferry/sources" && cp -r .ferry/sources "$ferry/sources"
    python3 -m pip install --quiet --no-index --no-deps --target /opt/epstack-deps .ferry/epd/*.whl 2>&1 \
        | grep -v WARNING | tail -n 3
fi
for chunk in .ferry/c/c*; do [[ -f $chunk ]] && mv "$chunk" "$ferry/c/"; done
echo "chunks: $(find "$ferry/c" -type f | wc -l), $(du -sh "$ferry/c" | cut -f1)"
