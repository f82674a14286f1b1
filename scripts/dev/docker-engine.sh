#!/usr/bin/env bash
# Install (Debian/Ubuntu, as root) and start a local Docker engine when none answers.
# Usage: scripts/dev/docker-engine.sh start|clean|stop|reclaim GB   (state in ${EPSTACK_ENGINE_DIR:-/tmp/epstack-engine})
#   clean: remove the images epstack made (labelled vendor=epstack, and the stand-in's OS), no others
#   reclaim GB: where the engine's data root has less than GB free, drop BuildKit's whole cache
set -euo pipefail

state=${EPSTACK_ENGINE_DIR:-/tmp/epstack-engine}
docker_cli=/usr/bin/docker   # Debian's 20.10 client has BuildKit built in

start() {
  if "$docker_cli" info >/dev/null 2>&1; then
    echo "docker engine: already answering"
    return
  fi
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v docker-registry >/dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
      echo "docker engine: none answers and this is not a root Debian machine; start dockerd yourself" >&2
      return 1
    fi
    echo "docker engine: installing docker.io, debootstrap, docker-registry"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker.io debootstrap docker-registry iptables >/dev/null
  fi
  mkdir -p "$state"
  setsid dockerd --pidfile "$state/dockerd.pid" >"$state/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    if "$docker_cli" info >/dev/null 2>&1; then
      echo "docker engine: started (pid $(cat "$state/dockerd.pid"), log $state/dockerd.log)"
      return
    fi
    sleep 0.5
  done
  echo "docker engine: dockerd did not answer within 30 s; see $state/dockerd.log" >&2
  tail -n 20 "$state/dockerd.log" >&2
  return 1
}

stop() {
  if [ -f "$state/dockerd.pid" ]; then
    kill "$(cat "$state/dockerd.pid")" 2>/dev/null || true
    rm -f "$state/dockerd.pid"
  fi
}

clean() {
  "$docker_cli" info >/dev/null 2>&1 || return 0
  local images
  images=$( { "$docker_cli" images -q --filter label=org.opencontainers.image.vendor=epstack
              "$docker_cli" images -q --filter label=io.epstack.standin; } | sort -u)
  if [ -n "$images" ]; then
    # shellcheck disable=SC2086  # one image ID per word
    "$docker_cli" rmi -f $images >/dev/null
    echo "docker engine: removed $(echo "$images" | wc -l) epstack images"
  fi
}

reclaim() {
  local want=$1 root free
  root=$("$docker_cli" info --format '{{.DockerRootDir}}')
  free=$(( $(df --output=avail -B1 "$root" | tail -n 1) / 1000000000 ))
  if [ "$free" -ge "$want" ]; then
    echo "docker engine: ${free} GB free in ${root}"
    return
  fi
  "$docker_cli" builder prune --all --force >/dev/null
  echo "docker engine: ${free} GB free in ${root}, under ${want} GB: dropped BuildKit's cache," \
    "now $(( $(df --output=avail -B1 "$root" | tail -n 1) / 1000000000 )) GB free"
}

case "${1:-}" in
  start) start ;;
  clean) clean ;;
  stop) stop ;;
  reclaim) [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "usage: $0 reclaim GB" >&2; exit 2; }; reclaim "$2" ;;
  *) echo "usage: $0 start|clean|stop|reclaim GB" >&2; exit 2 ;;
esac
