#!/usr/bin/env bash
# Make the deploy images buildable on a machine that reaches PyPI and Debian mirrors but no
# container registry (issue #4). Idempotent; run as root (`sudo bash ...` if you are not root).
# Steps:
#   1. install docker, docker-compose and debootstrap from Debian if dockerd is missing;
#   2. start dockerd in the background if no engine answers, and wait for it (it keeps running
#      after the script; the script says so and how to stop it: `--stop`);
#   3. if the image python:3.11-slim is absent, build a stand-in: a minimal Debian bookworm
#      (debootstrap) with python3, pip and venv, imported with `docker import`;
#   4. fill deploy/wheelhouse/ with CPython 3.11 manylinux x86_64 wheels of the project's
#      dependencies (with the extras postgres and cluster: psycopg[binary], dask[distributed])
#      and build backend, for `pip install --no-index`.
# Compose: scripts/compose runs whichever is installed (`docker compose` v2, else this one).
#   bash deploy/offline-base-image.sh --stop   stops the dockerd this script started (if any)
# Settings (environment): BASE_IMAGE, DEBIAN_MIRROR, WHEELHOUSE, SKIP_WHEELHOUSE=1, DOCKERD_LOG,
# DOCKERD_MARK (where the started dockerd's pid is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}
WHEELHOUSE=${WHEELHOUSE:-deploy/wheelhouse}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/fedldp-dockerd.log}
DOCKERD_MARK=${DOCKERD_MARK:-/run/fedldp-dockerd.pid}
log() { printf '[offline-base-image] %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "error: run as root (sudo bash $0 $*)"; exit 1; }

# The pid of the dockerd this script started, if it still runs (else nothing).
started_dockerd() {
  local pid
  [ -f "$DOCKERD_MARK" ] || return 0
  pid=$(cat "$DOCKERD_MARK")
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    echo "$pid"
  fi
}

if [ "${1:-}" = --stop ]; then
  pid=$(started_dockerd)
  if [ -z "$pid" ]; then
    rm -f "$DOCKERD_MARK"
    log "no dockerd started by this script is running (nothing stopped)"
    exit 0
  fi
  log "stopping dockerd (pid $pid); its containers stop with it"
  kill -TERM "$pid"
  for _ in $(seq 60); do [ -d "/proc/$pid" ] || break; sleep 1; done
  if [ -d "/proc/$pid" ]; then log "error: dockerd (pid $pid) still runs after 60 s"; exit 1; fi
  rm -f "$DOCKERD_MARK"
  log "dockerd stopped"
  exit 0
elif [ $# -gt 0 ]; then
  log "error: unknown argument $1 (only --stop)"
  exit 2
fi

rootfs="" note=""
finish() {
  if [ -n "$rootfs" ]; then rm -rf "$rootfs"; fi
  if [ -n "$note" ]; then log "$note"; fi
}
trap finish EXIT

# 1. Docker engine, compose v1 and debootstrap, from Debian's packages.
#    (Compose too when neither `docker compose` v2 nor `docker-compose` is there.)
has_compose() {
  { docker compose version 2>/dev/null | grep -qi compose; } || command -v docker-compose >/dev/null
}
if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null ||
   ! command -v debootstrap >/dev/null || ! has_compose; then
  log "installing docker.io docker-compose debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose debootstrap >/dev/null
fi

# 2. A running daemon (started detached from this shell, so it outlives the script).
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: $DOCKERD_LOG)"
  setsid nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  echo $! >"$DOCKERD_MARK"  # setsid and nohup exec: this is dockerd's pid
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "error: dockerd did not come up"; tail -20 "$DOCKERD_LOG" >&2; exit 1; }
fi
pid=$(started_dockerd)
if [ -n "$pid" ]; then
  note="dockerd (pid $pid, log $DOCKERD_LOG) was started by this script and keeps running; stop it with: bash deploy/offline-base-image.sh --stop"
fi

# 3. The stand-in base image, from the Debian mirror apt already uses.
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  mirror=${DEBIAN_MIRROR:-$(grep -hoE 'https?://[^ ]+/debian/?( |$)' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | head -1 | tr -d ' ' || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /var/tmp/fedldp-rootfs.XXXXXX)
  log "building $BASE_IMAGE with debootstrap from $mirror"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates,curl \
    bookworm "$rootfs" "$mirror" >/dev/null
  rm -f "$rootfs/usr/lib/python3.11/EXTERNALLY-MANAGED"
  ln -sf python3 "$rootfs/usr/bin/python"
  ln -sf pip3 "$rootfs/usr/bin/pip"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | docker import --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' -m "debootstrap stand-in for $BASE_IMAGE" - "$BASE_IMAGE" >/dev/null
fi
log "base image: $(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"

# 4. The wheelhouse: every dependency as a CPython 3.11 manylinux x86_64 (or pure) wheel, plus
#    the build backend that `pip install .` needs. Re-running only downloads what is missing.
[ "${SKIP_WHEELHOUSE:-0}" = 1 ] && exit 0
py=.venv/bin/python
[ -x "$py" ] || py=python3
mkdir -p "$WHEELHOUSE"
reqs=$(mktemp)
"$py" - "$reqs" <<'PY'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    toml = tomllib.load(f)
extras = toml["project"]["optional-dependencies"]
deps = toml["project"]["dependencies"] + extras["postgres"] + extras["cluster"]
lines = deps + toml["build-system"]["requires"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
log "filling $WHEELHOUSE"
platforms=()  # glibc 2.17 (manylinux2014) up to bookworm's 2.36: pip does not expand these
for minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
"$py" -m pip download --quiet --disable-pip-version-check --dest "$WHEELHOUSE" \
  --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
  "${platforms[@]}" --platform manylinux2014_x86_64 -r "$reqs"
rm -f "$reqs"
log "wheelhouse: $(find "$WHEELHOUSE" -name '*.whl' | wc -l) wheels"
