#!/usr/bin/env bash
# promtool for the alert-rule tests (`promtool check rules`, `promtool test rules`): the binary
# of Debian's prometheus package, extracted into the venv's bin folder. Only the binary: installing
# the package would also start a Prometheus server as a system service.
set -euo pipefail
DEST="${1:-.venv/bin}"
if [ -x "$DEST/promtool" ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
$SUDO apt-get update -qq
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root prometheus >/dev/null)
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$DEST"
install -m 0755 "$work/root/usr/bin/promtool" "$DEST/promtool"
"$DEST/promtool" --version | head -1
