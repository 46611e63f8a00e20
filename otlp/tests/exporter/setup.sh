#!/bin/sh
# Make (or reuse) a virtual environment at $1 holding the packages pinned
# in requirements.txt beside this script, from the Python package
# registry. Reused as long as requirements.txt is unchanged.
#
# Exit status 3: this machine has no python3 that can make a virtual
# environment for them (none at all, older than 3.10, or without its
# venv module), and the caller may skip; any other failure is a failure.
set -eu
venv=${1:?usage: setup.sh VENV_DIR}
here=$(cd "$(dirname "$0")" && pwd)

unavailable() {
    echo "$*" >&2
    rm -rf "$venv"
    exit 3
}

command -v python3 >/dev/null 2>&1 || unavailable "python3 is not installed"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || unavailable "python3 is older than 3.10, which the OpenTelemetry SDK needs"
if [ -x "$venv/bin/python" ] && cmp -s "$here/requirements.txt" "$venv/.requirements"; then
    exit 0
fi
rm -rf "$venv"
# Debian's python3 has no ensurepip without python3-venv: venv fails.
python3 -m venv "$venv" >/dev/null 2>&1 \
    || unavailable "python3 cannot make a virtual environment (Debian: apt-get install python3-venv)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
cp "$here/requirements.txt" "$venv/.requirements"
