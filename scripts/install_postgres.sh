#!/usr/bin/env bash
# Debian PostgreSQL server binaries for the tests (the suite starts a throwaway cluster).
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/initdb
