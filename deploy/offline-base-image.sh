#!/usr/bin/env bash
# Make the deploy images buildable on a machine that reaches PyPI and Debian mirrors but no
# container registry (issue #4). Idempotent; run as root. Steps:
#   1. install docker, docker-compose and debootstrap from Debian if dockerd is missing;
#   2. start dockerd in the background if no engine answers, and wait for it;
#   3. if the image python:3.11-slim is absent, build a stand-in: a minimal Debian bookworm
#      (debootstrap) with python3, pip and venv, imported with `docker import`;
#   4. fill deploy/wheelhouse/ with CPython 3.11 manylinux x86_64 wheels of the project's
#      dependencies (with psycopg[binary]) and build backend, for `pip install --no-index`.
# Settings (environment): BASE_IMAGE, DEBIAN_MIRROR, WHEELHOUSE, SKIP_WHEELHOUSE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}
WHEELHOUSE=${WHEELHOUSE:-deploy/wheelhouse}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/fedldp-dockerd.log}
log() { printf '[offline-base-image] %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "error: run as root"; exit 1; }

# 1. Docker engine, compose v1 and debootstrap, from Debian's packages.
if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null ||
   ! command -v debootstrap >/dev/null; then
  log "installing docker.io docker-compose debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose debootstrap >/dev/null
fi

# 2. A running daemon (started detached from this shell, so it outlives the script).
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: $DOCKERD_LOG)"
  setsid nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "error: dockerd did not come up"; tail -20 "$DOCKERD_LOG" >&2; exit 1; }
fi

# 3. The stand-in base image, from the Debian mirror apt already uses.
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  mirror=${DEBIAN_MIRROR:-$(grep -hoE 'https?://[^ ]+/debian/?( |$)' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | head -1 | tr -d ' ' || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /var/tmp/fedldp-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
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
deps = toml["project"]["dependencies"] + toml["project"]["optional-dependencies"]["postgres"]
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
