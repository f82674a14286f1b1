#!/usr/bin/env bash
# Packs the pinned SGLang stack for a GPU host without network (../shared/gpu-ferry/README.md's method):
# the wheels of WANT (the sglang lock's distributions the host lacks, at the lock's versions) and EXTRA
# for CPython 3.12 manylinux, each wheel STRIP names without the libraries it names (RECORD edited; by
# default sglang-kernel without its FA3 and sm100 libraries: serve with --attention-backend triton), and
# unless NCCL=no the pinned NCCL wheel (the base lock's entry, its hashes checked; the host's install
# phase puts it over its older NCCL: benchmarks/elastic/h200/install.py), all in one tar split into
# CHUNK-sized pieces under OUT_DIR/c/, each small enough to travel with one device call. Also epstack's
# own dependency wheels in OUT_DIR/epd/. PYTHON (default .venv/bin/python) reads the lock. vLLM's ferry,
# over the SGLang one (benchmarks/vllm/README.md): WANT=<(python -m benchmarks.vllm.want) EXTRA= NCCL=no
# STRIP=vllm==0.33.0:vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so OUT_DIR=.ferry-vllm.
set -euo pipefail
want=${WANT:-../shared/gpu-ferry/want.txt}
dir=${OUT_DIR:-.ferry}
chunk=${CHUNK:-57M}
extra=${EXTRA-sglang-kernel==0.4.10}
# NAME==VERSION:MEMBER,MEMBER... (space-separated for several wheels)
strip=${STRIP-sglang-kernel==0.4.10:sgl_kernel/flash_ops.abi3.so,sgl_kernel/sm100/common_ops.abi3.so}
rm -rf "$dir/w" "$dir/c" && mkdir -p "$dir/w" "$dir/c" "$dir/epd"
platforms=()
for v in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64)
# shellcheck disable=SC2086  # EXTRA: requirements, one a word
pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$dir/w" -r "$want" $extra
if [[ ${NCCL:-yes} != no ]]; then
    "${PYTHON:-.venv/bin/python}" - >"$dir/nccl.txt" <<'PY'
from pathlib import Path
from epstack.pins.load import load_pins
from epstack.python.lockfile import entry_text, read_lock
lock = read_lock(Path("locks"), "base")
if lock is None:
    raise SystemExit("ferry-pack.sh: no locks/base.txt; fix: run from the repository root")
print(entry_text(lock, load_pins(Path("pins.env")).wheels.nccl), end="")
PY
    pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d "$dir/w" --require-hashes -r "$dir/nccl.txt"
fi
for item in $strip; do
    pin=${item%%:*} members=${item#*:}
    name=${pin%%==*} version=${pin#*==}
    wheel=$(ls "$dir"/w/"${name//-/_}"-"$version"-*.whl)
    tmp=$(mktemp -d)
    (cd "$tmp" && unzip -q "$OLDPWD/$wheel" && for member in ${members//,/ }; do
        rm -f "$member" && grep -vF "$member," ./*.dist-info/RECORD > RECORD.kept && mv RECORD.kept ./*.dist-info/RECORD
    done && rm "$OLDPWD/$wheel" && zip -q -r "$OLDPWD/$wheel" .)
    rm -rf "$tmp"
done
# epstack's own dependencies (its runtime requirements at constraints.txt's versions)
mapfile -t deps < <(python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")')
pip download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$dir/epd" -c constraints.txt "${deps[@]}"
tar -C "$dir/w" -cf - . | split -b "$chunk" - "$dir/c/c"
du -sh "$dir/w" "$dir/c"; find "$dir/c" -type f | wc -l
