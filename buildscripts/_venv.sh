# Sourced by the other buildscripts: makes a virtual environment and installs the project into it
# when missing or stale.
#   ensure_venv          .venv: corral with the development extra (test, gen, bench, soak)
#   ensure_venv serve    .venv-serve: corral and its runtime dependencies only (serve)
# Two directories, so that serving never pulls in the development tools (Envoy, buf, mypy, ...:
# several hundred MB) and a test run never reinstalls the environment a daemon is serving from.
# CORRAL_VENV names another directory (CI runs the suite once per Python, each in its own).
# CORRAL_PYTHON picks the Python: a path, a command, or a version (3.11 or python3.11, looked for
# on PATH and among pyenv's installed versions); without it, the newest supported one found. An
# existing environment keeps its Python unless CORRAL_PYTHON asks for another. The stamp holds a
# hash of pyproject.toml and the extra, so a changed dependency list reinstalls.

# The Pythons corral supports: keep in step with requires-python in pyproject.toml.
CORRAL_PYTHONS=(3.13 3.12 3.11)
CORRAL_PYTHONS_SAID="3.11 to 3.13"

python_supported() {  # $1: a command; true when it runs and is one of CORRAL_PYTHONS
  local version
  version=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 1
  [[ " ${CORRAL_PYTHONS[*]} " == *" $version "* ]]
}

find_python_version() {  # $1: e.g. 3.13; prints the interpreter's path, or fails
  local version=$1 candidate
  # On PATH first; then pyenv's installed versions, whose shims answer `command -v` for every
  # version it has but run only the selected ones (so each candidate is run, not just found).
  for candidate in "python$version" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version" 2>/dev/null | sort -rV); do
    if python_supported "$candidate"; then
      "$candidate" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}

pick_python() {  # prints the path of the Python to make an environment with
  local version
  if [[ -n ${CORRAL_PYTHON:-} ]]; then
    if [[ $CORRAL_PYTHON =~ ^(python)?(3\.[0-9]+)$ ]]; then
      find_python_version "${BASH_REMATCH[2]}" && return 0
    elif python_supported "$CORRAL_PYTHON"; then
      "$CORRAL_PYTHON" -c 'import sys; print(sys.executable)'
      return 0
    fi
    echo "CORRAL_PYTHON=$CORRAL_PYTHON: not found, or not Python $CORRAL_PYTHONS_SAID" >&2
    return 1
  fi
  for version in "${CORRAL_PYTHONS[@]}"; do
    find_python_version "$version" && return 0
  done
  if python_supported python3; then
    python3 -c 'import sys; print(sys.executable)'
    return 0
  fi
  echo "no Python $CORRAL_PYTHONS_SAID found: install one, or set CORRAL_PYTHON" >&2
  return 1
}

venv_version() {  # $1: an environment's python; its version, e.g. 3.13.0
  "$1" -c 'import platform; print(platform.python_version())'
}

clock() { date +%s.%N; }
since() { awk -v from="$1" -v to="$(clock)" 'BEGIN { printf "%.1f s", to - from }'; }

pip_can_lend() {  # $1: a Python; true when its pip can install into another environment
  "$1" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))' 2>/dev/null
}

pip_progress() {  # pip's output to $1 (the log); its progress lines to stderr, indented
  tee -a "$1" | grep --line-buffered -E '^(Collecting|Installing collected|Successfully|ERROR)' |
    sed -u 's/^/  /' >&2 || true
}

ensure_venv() {  # $1: "serve" for the runtime-only environment; else the development one
  local kind=${1:-dev}
  local name=.venv extra="[dev]"
  if [[ $kind == serve ]]; then
    name=.venv-serve extra=""
  fi
  local venv=${CORRAL_VENV:-$root/$name}
  [[ $venv == /* ]] || venv=$root/$venv
  PY="$venv/bin/python"
  # An environment that is a link is shared with another checkout (a git worktree): it is that
  # checkout's to install, never this one's.
  if [[ -L "$venv" ]]; then
    export PATH="$venv/bin:$PATH"
    return 0
  fi
  local stamp="$venv/.corral-installed"
  local want base
  want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1) $extra"
  if [[ -x "$PY" && -n ${CORRAL_PYTHON:-} ]]; then
    base=$(pick_python) || return 1
    if [[ $(venv_version "$base") != $(venv_version "$PY") ]]; then
      echo "corral: $venv has Python $(venv_version "$PY"), CORRAL_PYTHON asks for $(venv_version "$base"): making it anew" >&2
      rm -rf "$venv"
    fi
  fi
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    local started step log="$venv/install.log"
    started=$(clock)
    if [[ ! -x "$PY" ]]; then
      base=${base:-$(pick_python)} || return 1
      step=$(clock)
      printf 'corral: making %s with Python %s (%s) ...' "${venv#"$root"/}" "$(venv_version "$base")" "$base" >&2
      # The runtime environment gets no pip of its own when the base Python has one to lend
      # (pip --python): about 3 s and 14 MB less.
      local own_pip=()
      [[ -z $extra ]] && pip_can_lend "$base" && own_pip=(--without-pip)
      "$base" -m venv "${own_pip[@]}" "$venv" || return 1
      echo " $(since "$step")" >&2
    fi
    : >"$log"
    local what="corral and its runtime dependencies"
    [[ -n $extra ]] && what="corral and its development extra"
    echo "corral: installing $what into ${venv#"$root"/} (pip; log: $log) ..." >&2
    step=$(clock)
    local pip=("$PY" -m pip)
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
      pip=("$("$PY" -c 'import sys; print(sys._base_executable)')" -m pip --python "$PY")
    fi
    pip+=(--disable-pip-version-check)
    # The runtime environment compiles what the daemon imports when it first imports it, not
    # every module of every dependency at install time (about a third of pip's work).
    local compile=()
    [[ -z $extra ]] && compile=(--no-compile)
    if ! { { [[ -z $extra ]] || "${pip[@]}" install --upgrade pip; } &&
      "${pip[@]}" install "${compile[@]}" -e "$root$extra"; } 2>&1 | pip_progress "$log"; then
      tail -n 30 "$log" >&2
      echo "corral: installing into $venv failed (full log: $log)" >&2
      return 1
    fi
    echo "corral: installed in $(since "$step")" >&2
    # Source roots on sys.path: the generated package appears after install time, so the
    # editable finder alone would miss it.
    local site
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n%s\n' "$root/server" "$root/clients/python" > "$site/corral-src.pth"
    echo "$want" > "$stamp"
    echo "corral: ${venv#"$root"/} ready in $(since "$started"): Python $(venv_version "$PY"), $(du -sm "$venv" | cut -f1) MB" >&2
  fi
  export PATH="$venv/bin:$PATH"
}
