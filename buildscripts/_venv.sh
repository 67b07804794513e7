# Sourced by the other buildscripts: creates .venv and installs the project when missing or stale.
# The stamp holds a hash of pyproject.toml so a changed dependency list reinstalls.
PY="$root/.venv/bin/python"
ensure_venv() {
  # A .venv that is a link is shared with another checkout (a git worktree): it is that
  # checkout's to install, never this one's.
  if [[ -L "$root/.venv" ]]; then
    export PATH="$root/.venv/bin:$PATH"
    return 0
  fi
  local stamp="$root/.venv/.corral-installed"
  local want
  want=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)
  if [[ ! -x "$PY" ]]; then
    local base=${CORRAL_PYTHON:-$(command -v python3.11 || command -v python3)}
    "$base" -m venv "$root/.venv"
  fi
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "installing corral and its dependencies into .venv ..." >&2
    local log="$root/.venv/install.log"
    if ! { "$PY" -m pip install --disable-pip-version-check --upgrade pip &&
      "$PY" -m pip install --disable-pip-version-check -e "$root[dev]"; } >"$log" 2>&1; then
      tail -n 30 "$log" >&2
      echo "installing into .venv failed (full log: $log)" >&2
      return 1
    fi
    # Source roots on sys.path: the generated package appears after install time, so the
    # editable finder alone would miss it.
    local site
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n%s\n' "$root/server" "$root/clients/python" > "$site/corral-src.pth"
    echo "$want" > "$stamp"
  fi
  export PATH="$root/.venv/bin:$PATH"
}
