#!/usr/bin/env bash
# Debian's Chromium for the browser tests (the report and the MLflow UI are checked in a real
# headless browser). Playwright drives this binary; its own browser download is not used.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no apt-get here; browser tests will be skipped (install chromium to run them)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
chromium --version
