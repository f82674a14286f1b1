#!/usr/bin/env bash
# The GPU run behind benchmarks/elastic/results/: on a bare GPU host (no network, no Docker),
# install the stack with the project's own scripts, then run the phases named on the command line:
#   install   NCCL from source over the pip wheel, then DeepEP with epstack's one builder (the image's:
#             `python3 -m epstack deepep build`), installed; skipped when present
#   first-request  SGLang's first request's JIT toolchains with CUDA_HOME made from the built image's own
#             file list (results/image-cuda-home.txt) and every cache empty: the smoke (DeepEP's JIT), then
#             `epstack jit probe --layer all` (Triton's launcher and a kernel run, FlashInfer's sampling
#             module, DeepGEMM), each process's mapped libraries recorded ($GPU_SRC/python/*.tar.xz:
#             FlashInfer, tvm-ffi, DeepGEMM as the sglang lock pins them, unpacked beside the host's torch)
#   kernels-export, kernels-shipped   the shipped-kernels path (issue 17), in the image's paths (run with
#             PYTHON=<the image's venv>/bin/python, that venv folder a link to the host's venv, so DeepEP's
#             kernel hashes are the image's; epstack.imagepaths.VENV): the smoke
#             at both model presets with an empty cache and `--export-jit-cache`, the export unpacked
#             read-only as the kernels layer does (`epstack jit unpack`), copied into a new writable cache
#             by the entrypoint's scripts/image/jit-caches.sh (kernels-shipped), then both presets again:
#             first-call times, and nvcc runs counted by a wrapper in the image's CUDA_HOME
#   flashinfer-shipped  FlashInfer's modules as the sglang image ships them (issue 17): `jit probe --ship`
#             with the GPU hidden, the entrypoint's copy, then the sampler's first call on the GPU in a new
#             process, against one from an empty workspace; nvcc runs counted (image's CUDA_HOME, as above)
#   triton-shipped  Triton's launcher as the base image ships it: built against the CUDA stub for each
#             folder GPU nodes mount the driver in, copied by the entrypoint, then a new process's
#             CudaUtils() against one with an empty cache (this host's ldconfig decides which loads)
#   stack     the pinned SGLang stack ferried to this host (benchmarks/serve/ferry-pack.sh's chunks in
#             $FERRY/c, default /opt/ferry/c) installed with --target /opt/sgl, its nvidia/ the host venv's
#             (where install put the pinned NCCL); run the later phases with PYTHONPATH=/opt/sgl
#   serve-start  `epstack smoke serve` on the tiny profile (deepep_v2, then none for the comparison, the
#             sweep) detached (setsid), so it can outlast this device call; serve-wait waits up to $WAIT_S s
#             (default 570) and copies its report and the servers' logs to $OUT
#   doctor    epstack doctor on this host (JSON)
#   smoke     epstack smoke elastic on $NPROC ranks (default 2) at test_ep's default sizes
#   smoke-topk0  the same with ElasticBuffer(num_topk=0), + test_ep's first mode (bandwidth ratio)
#   guard     epstack guard --layer deepep and --layer all, pins.env with the host's torch 2.11.0
#   warm      fill the DeepEP JIT cache with test_ep's kernels, 8 shards in parallel (warm_jit_cache.py)
#   upstream  DeepEP's tests/elastic/test_ep.py, all 144 modes ($UPSTREAM_TIMEOUT s, default 560)
#   upstream-start  the upstream phase detached (setsid), so it can outlast this device call
#   upstream-wait   wait up to $WAIT_S s (default 570) for it, then copy its results to $OUT
#   torchrun  the same host as 2 torchrun "nodes" of one GPU each (--nnodes 2)
#   hang      rank 1 hangs on entering buffer construction; the smoke must end within --timeout
# Sources come as archives in $GPU_SRC (default .gpu-src): nccl-*.tar.gz, and the `git archive`s
# DeepEP-<DEEPEP_REF>.tar.gz and fmt-<DEEPEP_FMT_REF>.tar.gz the builder checks against pins.env;
# epstack's own dependencies as wheels in $GPU_SRC/wheels (the host has no network). JSON and logs
# go to $OUT (default ./out). NPROC=1 on a one-GPU host, 4 or 8 for EP4/EP8 hosts.
set -uo pipefail
out=${OUT:-$PWD/out}
srcs=${GPU_SRC:-.gpu-src}
py=${PYTHON:-python3}
nproc=${NPROC:-2}   # ranks (GPUs) for the smoke, upstream and hang phases: 2, 4 or 8
upstream_name="test_ep-${nproc}rank-144"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 EP_JIT_CACHE_DIR=${EP_JIT_CACHE_DIR:-/tmp/ep-jit-cache}
# No RDMA NIC here: no GIN, direct mode. NVLS stays off (the machine sets it; kept explicit).
export EP_DISABLE_GIN=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
smoke=("$py" -m epstack.smoke elastic)
# epstack's dependencies, installed from the carried wheels into their own folder
export PYTHONPATH="$PWD:/opt/epstack-deps${PYTHONPATH:+:$PYTHONPATH}"
start=$SECONDS
note() { echo "[$((SECONDS - start))s] $*" | tee -a "$out/run.log"; }

# CUDA_HOME at HOME made from the built image's own file list (results/image-cuda-home.txt), its nvcc a
# wrapper that logs every run's arguments to LOG_DIR/nvcc.log, then runs the real one.
logged_cuda_home() {  # HOME LOG_DIR JSON
    local full
    full=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    "$py" -m benchmarks.elastic.cuda_home_from_list benchmarks/elastic/results/image-cuda-home.txt \
        "$full" "$1" --json "$3" >/dev/null
    mv "$1/bin/nvcc" "$1/bin/nvcc.real"
    # shellcheck disable=SC2016
    printf '#!/bin/sh\necho "$*" >> %s/nvcc.log\nexec "$(dirname "$0")/nvcc.real" "$@"\n' "$2" >"$1/bin/nvcc"
    chmod +x "$1/bin/nvcc"
}

# The pinned NCCL loaded by torch (epstack's own check) and deep_ep importable.
installed() {
    "$py" -m epstack nccl check --pins pins.env --loaded >/dev/null 2>&1 && "$py" -c "import deep_ep" 2>/dev/null
}

for phase in "$@"; do
    case $phase in
    install)
        if installed; then note "install: already there"; continue; fi
        if [[ -d $srcs/wheels ]]; then
            "$py" -m pip install --quiet --no-index --find-links "$srcs/wheels" --target /opt/epstack-deps \
                "$srcs"/wheels/*.whl 2>&1 | tail -n 3
        fi
        if "$py" -m epstack nccl check --pins pins.env --loaded >/dev/null 2>&1; then
            note "install: NCCL already there"
        else
            note "install: NCCL"
            bash scripts/gpu/install-nccl.sh --pins pins.env --src "$(ls "$srcs"/nccl-*.tar.gz)" --arch 90 \
                --prefix /opt/nccl 2>&1 | tee -a "$out/install.log" | tail -n 3
        fi
        note "install: DeepEP (epstack deepep build)"
        # Where an image keeps the wheel, so the guard finds its manifest as in an image.
        wheels=$("$py" -c 'from epstack.imagepaths import WHEELS; print(WHEELS)')
        cmd=("$py" -m epstack deepep build --pins pins.env --cuda-arch 9.0 --sources "$srcs" --wheel-dir "$wheels")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        "${cmd[@]}" 2>&1 | tee -a "$out/install.log" | tail -n 3
        "$py" -m pip install --quiet --no-deps --force-reinstall "$wheels"/deep_ep-*.whl
        cp "$wheels/deepep-source.json" "$out/"
        # DeepEP's own tests (the upstream phases) run from its tree.
        mkdir -p /opt/src && tar -xzf "$(ls "$srcs"/DeepEP-*.tar.gz)" -C /opt/src
        note "install: done"
        ;;
    first-request)
        full=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        home=/tmp/cuda-home-image
        rm -rf "$home" /tmp/first-request /tmp/site-jit
        mkdir -p /tmp/first-request/maps /tmp/site-jit
        "$py" -m benchmarks.elastic.cuda_home_from_list benchmarks/elastic/results/image-cuda-home.txt \
            "$full" "$home" --json "$out/first-request-cuda-home.json"
        for pack in "$srcs"/python/*.tar.xz; do tar -xJf "$pack" -C /tmp/site-jit; done
        note "first-request: CUDA_HOME=$home ($(du -sh "$home" | cut -f1)) from the image's list, empty caches"
        export EPSTACK_MAPS_DIR=/tmp/first-request/maps
        # The image sets no CC/CXX; this host's point at other compilers (gpu-notes.md).
        unset CC CXX CUDAHOSTCXX
        hook="$PWD/benchmarks/elastic/maps_hook:/tmp/site-jit"
        cmd=("${smoke[@]}" --nproc-per-node "$nproc" --timeout 300 --skip-bench
             --run-dir /tmp/first-request/smoke --json "$out/first-request-smoke.json")
        echo "+ CUDA_HOME=$home EP_JIT_CACHE_DIR=<empty> ${cmd[*]}" >>"$out/run.log"
        CUDA_HOME=$home CUDA_PATH=$home PATH="$home/bin:$PATH" PYTHONPATH="$hook:$PYTHONPATH" \
            EP_JIT_CACHE_DIR=/tmp/first-request/ep-cache "${cmd[@]}" >/tmp/first-request/smoke.console 2>&1
        note "first-request: smoke exit $?; DeepEP kernels compiled: $(find /tmp/first-request/ep-cache -type f | wc -l) files"
        tail -n 12 /tmp/first-request/smoke.console
        cmd=("$py" -m epstack jit probe --layer all --cuda-arch 9.0a --json "$out/first-request-jit.json")
        echo "+ CUDA_HOME=$home ${cmd[*]}" >>"$out/run.log"
        CUDA_HOME=$home CUDA_PATH=$home PATH="$home/bin:$PATH" PYTHONPATH="$hook:$PYTHONPATH" "${cmd[@]}" \
            >/tmp/first-request/jit.console 2>&1
        note "first-request: jit probe exit $?"
        tail -n 40 /tmp/first-request/jit.console
        "$py" -m benchmarks.elastic.mapped_libraries /tmp/first-request/maps --cuda-home "$home" \
            --toolkit "$full" --json "$out/first-request-maps.json"
        note "first-request: mapped libraries exit $?"
        unset EPSTACK_MAPS_DIR
        ;;
    kernels-export | kernels-shipped)
        k=/tmp/kernels home=/tmp/kernels/cuda-home
        if [[ $phase == kernels-export ]]; then
            rm -rf "$k" && mkdir -p "$k"
            logged_cuda_home "$home" "$k" "$out/kernels-cuda-home.json"
        fi
        unset CC CXX CUDAHOSTCXX
        run_preset() {  # preset cache name [smoke flags...]
            local preset=$1 cache=$2 name=$3; shift 3
            local c=("${smoke[@]}" --nproc-per-node "$nproc" --profile "$preset" --skip-bench --timeout 300
                     --run-dir "$k/run-$name" --json "$out/$name.json" "$@")
            echo "+ EP_JIT_CACHE_DIR=$cache CUDA_HOME=<the image's, nvcc logged> ${c[*]}" >>"$out/run.log"
            : >"$k/nvcc.log"
            CUDA_HOME=$home CUDA_PATH=$home PATH="$home/bin:$PATH" EP_JIT_CACHE_DIR=$cache "${c[@]}" \
                >"$k/$name.console" 2>&1
            local rc=$?
            tail -n 4 "$k/$name.console"
            note "$phase: $name exit $rc; nvcc runs: $(grep -vc -- '--version' "$k/nvcc.log") compiles," \
                "$(grep -c -- '--version' "$k/nvcc.log") --version"
            cp "$k/nvcc.log" "$out/$name.nvcc.log"
        }
        if [[ $phase == kernels-export ]]; then
            note "$phase: empty cache, sys.prefix $("$py" -c 'import sys; print(sys.prefix)')"
            run_preset qwen3-30b-a3b "$k/made" kernels-empty-qwen3
            run_preset deepseek-v3 "$k/made" kernels-empty-deepseek-v3 \
                --export-jit-cache "$k/deep_ep-kernels.tar.gz"
            cp "$k"/deep_ep-kernels.tar.gz* "$out/"
            continue
        fi
        # As the kernels layer and the entrypoint do: unpacked by digest, read-only, linked into a new cache.
        export EPSTACK_HOME=$k/home
        sha=$(cut -d' ' -f1 "$k/deep_ep-kernels.tar.gz.sha256")
        cmd=("$py" -m epstack jit unpack "$k/deep_ep-kernels.tar.gz" --sha256 "$sha"
             --into "$EPSTACK_HOME/jit/deep_ep")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        "${cmd[@]}"
        note "$phase: unpack exit $?; $(du -sb "$EPSTACK_HOME/jit" | cut -f1) bytes on disk"
        chmod -R a-w "$EPSTACK_HOME/jit"
        EP_JIT_CACHE_DIR=$k/writable
        # shellcheck disable=SC1091
        . scripts/image/jit-caches.sh
        note "$phase: copied $(find "$EP_JIT_CACHE_DIR/cache" -maxdepth 1 -name 'kernel.*' | wc -l) kernels into $EP_JIT_CACHE_DIR"
        run_preset qwen3-30b-a3b "$EP_JIT_CACHE_DIR" kernels-shipped-qwen3
        run_preset deepseek-v3 "$EP_JIT_CACHE_DIR" kernels-shipped-deepseek-v3
        note "$phase: kernels in the cache after both presets:" \
            "$(find "$EP_JIT_CACHE_DIR/cache" -maxdepth 1 -name 'kernel.*' | wc -l) (the copied ones and any compiled)"
        unset EPSTACK_HOME
        export EP_JIT_CACHE_DIR=/tmp/ep-jit-cache
        ;;
    flashinfer-shipped)
        # As the sglang image's build and start do (issue 17), in the image's paths: the probe compiles
        # FlashInfer's modules with the GPU hidden and ships them (`jit probe --ship`), the entrypoint's
        # copy puts them into FLASHINFER_WORKSPACE_BASE, then a new process samples on the GPU; against
        # the same first call from an empty workspace. nvcc runs counted by a wrapper in CUDA_HOME.
        f=/tmp/flashinfer home=/tmp/flashinfer/cuda-home
        jit=$("$py" -c 'from epstack.imagepaths import JIT; print(JIT)')  # where the image keeps them
        rm -rf "$f" /tmp/site-jit "$jit" /var/cache/epstack-jit && mkdir -p "$f" /tmp/site-jit
        if [[ ! -d /opt/epstack-deps ]]; then
            "$py" -m pip install --quiet --no-index --find-links "$srcs/wheels" --target /opt/epstack-deps \
                "$srcs"/wheels/*.whl 2>&1 | tail -n 3
        fi
        for pack in "$srcs"/python/*.tar.xz; do tar -xJf "$pack" -C /tmp/site-jit; done
        logged_cuda_home "$home" "$f" "$out/flashinfer-cuda-home.json"
        unset CC CXX CUDAHOSTCXX
        export CUDA_HOME=$home CUDA_PATH=$home PATH="$home/bin:$PATH" PYTHONPATH="/tmp/site-jit:$PYTHONPATH"
        export EPSTACK_HOME=${jit%/jit} EPSTACK_REPORTS=$f/reports FLASHINFER_WORKSPACE_BASE=/var/cache/epstack-jit/flashinfer
        mkdir -p "$EPSTACK_REPORTS" "$FLASHINFER_WORKSPACE_BASE"
        compiles() { grep -vc -- '--version' "$f/nvcc.log"; }
        : >"$f/nvcc.log"
        # FlashInfer alone: DeepGEMM's wheel does not load under this host's torch (README).
        cmd=("$py" -m epstack jit probe --layer sglang --toolchain flashinfer --cuda-arch 9.0a --ship
             --json "$out/flashinfer-build-jit.json")
        echo "+ CUDA_VISIBLE_DEVICES= ${cmd[*]}" >>"$out/run.log"
        CUDA_VISIBLE_DEVICES="" "${cmd[@]}" >"$f/build.console" 2>&1
        note "$phase: build (no GPU) exit $?; nvcc compiles $(compiles); shipped $(du -sb "$jit/flashinfer" | cut -f1) bytes"
        tail -n 8 "$f/build.console"
        chmod -R a-w "$jit"
        # shellcheck disable=SC1091
        . scripts/image/jit-caches.sh
        "$py" -c 'import json, os, dataclasses; from epstack.guard.kernelcache import flashinfer_cache_rows
print(json.dumps([dataclasses.asdict(r) for r in flashinfer_cache_rows(os.environ, ["9.0a"])], indent=2))' \
            >"$out/flashinfer-row.json"
        note "$phase: copied at start; row $(grep -o '"verdict": "[a-z]*"' "$out/flashinfer-row.json")"
        : >"$f/nvcc.log"
        "$py" -m benchmarks.elastic.flashinfer_first_call --json "$out/flashinfer-shipped.json"
        note "$phase: shipped first call exit $?; nvcc compiles $(compiles)"
        cp "$f/nvcc.log" "$out/flashinfer-shipped.nvcc.log"
        : >"$f/nvcc.log"
        FLASHINFER_WORKSPACE_BASE=$f/empty "$py" -m benchmarks.elastic.flashinfer_first_call \
            --json "$out/flashinfer-empty.json"
        note "$phase: empty-workspace first call exit $?; nvcc compiles $(compiles)"
        cp "$f/nvcc.log" "$out/flashinfer-empty.nvcc.log"
        unset CUDA_HOME CUDA_PATH EPSTACK_HOME EPSTACK_REPORTS FLASHINFER_WORKSPACE_BASE
        ;;
    triton-shipped)
        # Triton's launcher as the base image's build ships it (issue 17): `jit probe --layer base --ship`
        # linked against the CUDA stub, as a build without a driver does, one launcher per folder GPU
        # nodes mount the driver in; the entrypoint's copy; then a new process's CudaUtils() on this host,
        # against one with an empty cache. This host's own libcuda folder decides which (ldconfig).
        t=/tmp/triton-shipped
        full=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
        jit=$("$py" -c 'from epstack.imagepaths import JIT; print(JIT)')
        rm -rf "$t" "$jit/triton" "$jit/triton.json" && mkdir -p "$t/reports"
        if [[ ! -d /opt/epstack-deps ]]; then
            "$py" -m pip install --quiet --no-index --find-links "$srcs/wheels" --target /opt/epstack-deps \
                "$srcs"/wheels/*.whl 2>&1 | tail -n 3
        fi
        unset CC CXX CUDAHOSTCXX
        /sbin/ldconfig -p | grep 'libcuda.so.1 ' >"$out/triton-ldconfig.txt"
        export EPSTACK_HOME=${jit%/jit} EPSTACK_REPORTS=$t/reports TRITON_CACHE_DIR=$t/cache
        cmd=("$py" -m epstack jit probe --layer base --ship --json "$out/triton-build-jit.json")
        echo "+ EPSTACK_CUDA_STUB=<the toolkit's stub> ${cmd[*]}" >>"$out/run.log"
        EPSTACK_CUDA_STUB=$full/lib64/stubs/libcuda.so "${cmd[@]}" >"$t/build.console" 2>&1
        note "$phase: build exit $?; $(tail -n 1 "$t/build.console")"
        chmod -R a-w "$jit/triton"
        # shellcheck disable=SC1091
        . scripts/image/jit-caches.sh
        "$py" -c 'import json, os, dataclasses; from epstack.guard.kernelcache import triton_launcher_rows
print(json.dumps([dataclasses.asdict(r) for r in triton_launcher_rows(os.environ)], indent=2))' \
            >"$out/triton-row.json"
        note "$phase: copied at start; row $(grep -o '"verdict": "[a-z]*"' "$out/triton-row.json")"
        "$py" -m benchmarks.elastic.triton_first_launch --json "$out/triton-shipped.json"
        note "$phase: shipped exit $?"
        TRITON_CACHE_DIR=$t/empty "$py" -m benchmarks.elastic.triton_first_launch --json "$out/triton-empty.json"
        note "$phase: empty exit $?"
        unset EPSTACK_HOME EPSTACK_REPORTS TRITON_CACHE_DIR
        ;;
    doctor)
        cmd=("$py" -m epstack.doctor --pins pins.env --json "$out/doctor-h200.json")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        "${cmd[@]}"
        note "doctor: exit $?"
        ;;
    smoke | smoke-topk0 | upstream)
        # smoke: ElasticBuffer(num_topk=6), the model's top-k; smoke-topk0: num_topk=0 as test_ep
        # builds it, plus test_ep's first mode for the same-call bandwidth ratio; upstream: all of
        # test_ep (144 modes) on its own.
        name="smoke-${nproc}rank"
        extra=(--timeout 300)
        case $phase in
            smoke-topk0) name="smoke-${nproc}rank-topk0"
                extra+=(--buffer-num-topk 0 --upstream-tests /opt/src/DeepEP --upstream-args=--test-first-only
                        --min-bandwidth-ratio 0.97) ;;
            upstream) name=$upstream_name
                extra+=(--upstream-only --upstream-tests /opt/src/DeepEP
                          --upstream-timeout "${UPSTREAM_TIMEOUT:-560}") ;;
        esac
        note "$phase"
        cmd=("${smoke[@]}" --nproc-per-node "$nproc" "${extra[@]}" --run-dir "/tmp/$name"
             --json "$out/$name.json")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        "${cmd[@]}" >"/tmp/$name.console" 2>&1
        rc=$?
        tail -n 30 "/tmp/$name.console"
        note "$phase: exit $rc"
        if [[ -f /tmp/$name/upstream/rank0.log ]]; then
            cp "/tmp/$name/upstream/rank0.log" "$out/$name.test_ep.log"
        fi
        ;;
    guard)
        # The host's torch is 2.11.0+cu130 and cannot be replaced there (no network); the rest of
        # pins.env is what the install phase put there.
        pins=/tmp/pins-h200.env
        sed 's/^TORCH_VERSION=.*/TORCH_VERSION=2.11.0/' pins.env >"$pins"
        for layer in deepep all; do
            cmd=("$py" -m epstack guard --pins "$pins" --layer "$layer" --json "$out/guard-$layer.json")
            echo "+ ${cmd[*]}  # pins.env with TORCH_VERSION=2.11.0" >>"$out/run.log"
            "${cmd[@]}"
            note "guard --layer $layer: exit $?"
        done
        ;;
    warm)
        note "warm: DeepEP JIT cache $EP_JIT_CACHE_DIR"
        cmd=("$py" -m benchmarks.elastic.warm_jit_cache /opt/src/DeepEP --nproc "$nproc"
             --shards "${SHARDS:-8}" --timeout "${WARM_TIMEOUT:-280}" --json "$out/jit-warm.json")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        "${cmd[@]}" | tail -n 12
        note "warm: exit ${PIPESTATUS[0]}"
        ;;
    stack)
        ferry=${FERRY:-/opt/ferry}
        if [[ ! -d /opt/sgl/sglang ]]; then
            rm -rf /tmp/ferry-w && mkdir -p /tmp/ferry-w
            cat "$ferry"/c/c* | tar -xf - -C /tmp/ferry-w
            "$py" -m pip install --quiet --no-index --no-deps --target /opt/sgl /tmp/ferry-w/*.whl 2>&1 \
                | grep -v WARNING | tail -n 3
            rm -rf /opt/sgl/nvidia /tmp/ferry-w
            ln -s "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia" /opt/sgl/nvidia
        fi
        PYTHONPATH="/opt/sgl:$PYTHONPATH" "$py" -c 'import torch, sglang; print("stack:", torch.__version__, sglang.__version__)' \
            | tee -a "$out/run.log"
        ;;
    serve-start)
        bg=/tmp/serve-bg
        rm -rf "$bg" && mkdir -p "$bg"
        read -ra extra <<<"${SERVE_ARGS:-}"
        cmd=("$py" -m epstack smoke serve --profile tiny --run-dir "$bg/run" --json "$bg/serve.json"
            --sglang-arg=--attention-backend=triton "${extra[@]}")
        echo "+ ${cmd[*]}" >>"$out/run.log"
        (unset CC CXX CUDAHOSTCXX; setsid "${cmd[@]}" >"$bg/console" 2>&1 </dev/null & echo $! >"$bg/pid")
        note "serve-start: detached as pid $(cat "$bg/pid"), results in $bg"
        ;;
    serve-wait)
        bg=/tmp/serve-bg
        pid=$(cat "$bg/pid")
        until ! kill -0 "$pid" 2>/dev/null || ((SECONDS - start >= ${WAIT_S:-570})); do sleep 5; done
        tail -n 40 "$bg/console"
        if kill -0 "$pid" 2>/dev/null; then
            note "serve-wait: still running after $((SECONDS - start)) s"
        else
            cp "$bg/serve.json" "$bg/console" "$bg"/run/server-*.log "$out"/ 2>/dev/null
            note "serve-wait: epstack smoke serve finished"
        fi
        ;;
    upstream-start)
        bg=/tmp/upstream-bg
        mkdir -p "$bg"
        setsid env OUT="$bg" UPSTREAM_TIMEOUT="${UPSTREAM_TIMEOUT:-1500}" bash "$0" upstream \
            >"$bg/console" 2>&1 </dev/null &
        echo $! >"$bg/pid"
        note "upstream-start: test_ep detached as pid $!, results in $bg"
        ;;
    upstream-wait)
        bg=/tmp/upstream-bg
        pid=$(cat "$bg/pid")
        until ! kill -0 "$pid" 2>/dev/null || ((SECONDS - start >= ${WAIT_S:-570})); do sleep 5; done
        if kill -0 "$pid" 2>/dev/null; then
            note "upstream-wait: still running after $((SECONDS - start)) s," \
                "$(grep -c 'Testing with' "/tmp/$upstream_name/upstream/rank0.log") modes started"
        else
            cp "$bg"/*.json "$bg"/*.test_ep.log "$out"/ 2>/dev/null
            cp "$bg/run.log" "$out/upstream-run.log"
            tail -n 20 "$bg/console"
            note "upstream-wait: test_ep finished"
        fi
        ;;
    torchrun)
        note "torchrun: 2 nodes x 1 GPU"
        for node in 0 1; do
            CUDA_VISIBLE_DEVICES=$node "$py" -m torch.distributed.run --nnodes 2 \
                --node-rank $node --nproc-per-node 1 --master-addr 127.0.0.1 \
                --master-port 29631 -m epstack.smoke elastic --timeout 300 \
                --run-dir /tmp/smoke-node$node --json "$out/smoke-torchrun-2node.json" \
                >"/tmp/torchrun-node$node.log" 2>&1 &
            pids[node]=$!
        done
        echo "+ CUDA_VISIBLE_DEVICES=<node> python -m torch.distributed.run --nnodes 2 --node-rank <node> --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29631 -m epstack.smoke elastic --timeout 300 --json smoke-torchrun-2node.json" >>"$out/run.log"
        wait "${pids[0]}"; rc0=$?
        wait "${pids[1]}"; rc1=$?
        tail -n 25 /tmp/torchrun-node0.log
        tail -n 5 /tmp/torchrun-node1.log
        note "torchrun: node 0 exit $rc0, node 1 exit $rc1"
        ;;
    hang)
        note "hang: rank 1 stops on entering buffer construction, --timeout 30"
        cmd=("${smoke[@]}" --nproc-per-node "$nproc" --timeout 30 --skip-bench --run-dir /tmp/smoke-hang
             --json "$out/smoke-hang.json")
        echo "+ EPSTACK_SMOKE_HANG_STAGE=buffer EPSTACK_SMOKE_HANG_RANK=1 ${cmd[*]}" >>"$out/run.log"
        t0=$SECONDS
        EPSTACK_SMOKE_HANG_STAGE=buffer EPSTACK_SMOKE_HANG_RANK=1 "${cmd[@]}" >/tmp/hang.console 2>&1
        rc=$?
        tail -n 8 /tmp/hang.console
        left=$(pgrep -f epstack.smoke.worker | wc -l)
        note "hang: exit $rc after $((SECONDS - t0)) s; worker processes left: $left"
        ;;
    *) note "unknown phase $phase" ;;
    esac
done
note "all phases done"
