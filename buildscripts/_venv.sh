# Sourced by the other buildscripts: creates .venv and installs the project when missing or stale.
# The stamp holds a hash of pyproject.toml so a changed dependency list reinstalls.
PY="$root/.venv/bin/python"
ensure_venv() {
  local stamp="$root/.venv/.corral-installed"
  local want
  want=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)
  if [[ ! -x "$PY" ]]; then
    local base=${CORRAL_PYTHON:-$(command -v python3.11 || command -v python3)}
    "$base" -m venv "$root/.venv"
  fi
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "installing corral and its dependencies into .venv ..." >&2
    "$PY" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
    "$PY" -m pip install -q --disable-pip-version-check -e "$root[dev]"
    # Source roots on sys.path: the generated package appears after install time, so the
    # editable finder alone would miss it.
    local site
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n%s\n' "$root/server" "$root/clients/python" > "$site/corral-src.pth"
    echo "$want" > "$stamp"
  fi
  export PATH="$root/.venv/bin:$PATH"
}
