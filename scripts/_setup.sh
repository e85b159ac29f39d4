#!/usr/bin/env bash
# Shared set-up for a fresh machine: system packages the sandbox needs, and the project's virtualenv.
# Sourced by scripts/demo and scripts/test; safe to run again (it only installs what is missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

# System packages the tests need: bubblewrap (the namespaced sandbox rung), runsc (the gvisor rung), the system
# python3 (the sandbox's interpreter: the venv's may live under /root, which the sandbox user cannot read), and
# PostgreSQL (server replicas are tested against a real one, started by the tests in a temporary directory).
ensure_system_packages() {
  local missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v runsc >/dev/null 2>&1 || missing+=(runsc)
  [ -x /usr/bin/python3 ] || missing+=(python3)
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: install ${missing[*]} (apt-get install ${missing[*]}) and run again" >&2
    exit 2
  fi
}

# Chromium for the browser tests of `evalsi view` (the `browser` nox session calls this; nothing else needs it).
ensure_browser_packages() {
  [ -x /usr/bin/chromium ] && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "error: install chromium (apt-get install chromium) and run again" >&2
    exit 2
  fi
}

# ensure_venv EXTRAS: create .venv if needed and install the project with those extras (e.g. "math").
ensure_venv() {
  local extras="$1"
  local python="${PYTHON:-python3}"
  if [ ! -x "$VENV/bin/python" ]; then
    "$python" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
  fi
  # Re-install when pyproject changed since the last install, or an extra is missing (the stamp records the
  # pyproject hash on its first line and the installed extras, one a line, after it).
  local stamp="$VENV/.evalsi-installed"
  local hash
  hash="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
  local needed=0
  if [ ! -f "$stamp" ] || [ "$(head -n1 "$stamp")" != "$hash" ]; then
    needed=1
  else
    local extra
    for extra in ${extras//,/ }; do
      grep -qx "$extra" <(tail -n +2 "$stamp") || needed=1
    done
  fi
  if [ "$needed" = 1 ]; then
    "$VENV/bin/pip" install -q -e "$ROOT[$extras]"
    { echo "$hash"; tr ',' '\n' <<<"$extras"; } > "$stamp"
  fi
}
