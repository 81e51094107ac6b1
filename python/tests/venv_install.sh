#!/bin/sh
# venv_install.sh PYTHON VENV SOURCE [USER]: the install docs/pytorch.md documents, into a build tree
# (CTest python_build): a virtual environment that sees PYTHON's packages (Debian's torch, pytest,
# setuptools, wheel), then `pip install --no-build-isolation` of the source tree into it, then an
# import of the installed package. Offline: --no-build-isolation (setuptools and torch are the
# system's), --no-deps and --no-index (nothing is fetched), --no-cache-dir.
# setuptools builds in VENV's folder (DIST_EXTRA_CONFIG: build/, egg-info), not in the source tree,
# so a rebuild there is incremental (torch's ninja) and the source tree stays clean.
# USER (when run as root): the venv and the build belong to that user and pip runs as that user, as
# a user without root installs; the source tree must be readable by it and the build tree's folder
# open to it (otherwise, root installs).
set -eu
py=$1 venv=$2 src=$3 user=${4:-}
dir=$(dirname "$venv")
work="$dir/pybuild"

if [ -n "$user" ] && [ "$(id -u)" = 0 ]; then
  if id "$user" >/dev/null 2>&1 && runuser -u "$user" -- test -r "$src/setup.py" -a -x "$src/include" -a -x "$dir"; then
    rm -rf "$venv"  # also what root left in it (pytest's __pycache__)
    mkdir -p "$venv" "$work"
    chown -R "$user" "$venv" "$work"
    echo "rcclx: installing as user $user"
    exec runuser -u "$user" -- sh "$0" "$py" "$venv" "$src"
  fi
  echo "rcclx: $user does not exist or cannot read $src or enter $dir: installing as root"
fi

mkdir -p "$work"
cfg="$work/setup.cfg"
printf '[build]\nbuild_base = %s\n[egg_info]\negg_base = %s\n' "$work/build" "$work" >"$cfg"
"$py" -m venv --clear --system-site-packages "$venv"
DIST_EXTRA_CONFIG="$cfg" "$venv/bin/pip" install -q --no-build-isolation --no-deps --no-index --no-cache-dir "$src"
cd "$work"  # not the source tree: the installed package
"$venv/bin/python" -c "import rcclx; print('rcclx', rcclx.backend, rcclx.__file__, rcclx.include_dir())"
