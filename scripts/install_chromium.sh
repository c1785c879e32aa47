#!/usr/bin/env bash
# Debian Chromium for the browser tests and benchmarks (Playwright cannot download browsers here):
# the full browser, and the headless shell (the browser without its window code) that they drive.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium chromium-headless-shell >/dev/null
/usr/bin/chromium --version
/usr/bin/chromium-headless-shell --version
