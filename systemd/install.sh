#!/usr/bin/env bash
# Install deepinfer-agent as a hardened systemd service on a GPU node (docs/deployment.md).
#
#   sudo systemd/install.sh             install or upgrade, then enable and (re)start the service
#   systemd/install.sh --dry-run        print every step it would take; changes nothing
#
# Idempotent: the user, the virtualenv and the unit are created or updated; an existing
# config.yaml is never overwritten. Run it again after `git pull` to upgrade.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"

service=deepinfer-agent
user=deepinfer-agent
prefix=/opt/deepinfer-agent          # the virtualenv; ExecStart is $prefix/bin/deepinfer-agent
config_dir=/etc/deepinfer-agent
unit_dir=/etc/systemd/system
package="$repo"                      # what pip installs: this checkout, a wheel, or a requirement
example="$repo/examples/config.yaml"
python=python3
start=1
dry_run=0
print_unit=0

usage() {
  cat <<EOF
usage: $0 [--dry-run] [--no-start] [--from PACKAGE] [--config FILE] [--prefix DIR]
          [--config-dir DIR] [--unit-dir DIR] [--user NAME] [--python PYTHON]

  --dry-run         print what would be done, change nothing (no root needed)
  --print-unit      print the unit file as it would be installed (with these options), then exit
  --no-start        install and enable, but do not start or restart the service
  --from PACKAGE    what pip installs (default: this checkout, $repo)
  --config FILE     example config copied to CONFIG-DIR/config.yaml when none is there
                    (default: $example)
  --prefix DIR      virtualenv to create or upgrade (default: $prefix)
  --config-dir DIR  (default: $config_dir)     --unit-dir DIR (default: $unit_dir)
  --user NAME       system user the service runs as (default: $user)
  --python PYTHON   interpreter for the virtualenv, 3.10 or newer (default: $python)
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --print-unit) print_unit=1 ;;
    --no-start) start=0 ;;
    --from) package="$2"; shift ;;
    --config) example="$2"; shift ;;
    --prefix) prefix="$2"; shift ;;
    --config-dir) config_dir="$2"; shift ;;
    --unit-dir) unit_dir="$2"; shift ;;
    --user) user="$2"; shift ;;
    --python) python="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# run CMD...: do it, or only print it under --dry-run.
run() {
  printf '+ %s\n' "$*"
  if [[ $dry_run -eq 0 ]]; then "$@"; fi
}
note() { printf '# %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# The unit, with ExecStart, User= and the config path rewritten when the defaults were changed.
unit_text="$(sed \
  -e "s#^ExecStart=/opt/deepinfer-agent/bin/deepinfer-agent run --config /etc/deepinfer-agent/config.yaml#ExecStart=$prefix/bin/deepinfer-agent run --config $config_dir/config.yaml#" \
  -e "s#^User=deepinfer-agent\$#User=$user#" -e "s#^Group=deepinfer-agent\$#Group=$user#" \
  "$here/$service.service")"
if [[ $print_unit -eq 1 ]]; then
  printf '%s\n' "$unit_text"
  exit 0
fi

if [[ $dry_run -eq 0 && $EUID -ne 0 ]]; then
  die "run as root (sudo $0 $*), or with --dry-run to see the steps"
fi
command -v "$python" >/dev/null || die "$python not found: install Python 3.10+ (Debian/Ubuntu: apt install python3 python3-venv)"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$python is older than 3.10: pass --python python3.11 (or newer)"
"$python" -c 'import venv, ensurepip' 2>/dev/null \
  || die "$python cannot create virtualenvs: apt install python3-venv"
# The virtualenv runs this interpreter, and the unit's ProtectHome=yes hides /root and /home: an interpreter
# there (pyenv, conda, a user's build) makes the service fail with status 203/EXEC.
interpreter="$(readlink -f "$(command -v "$python")")"
case "$interpreter" in
  /root/*|/home/*|/run/user/*)
    message="$python is $interpreter, hidden from the service by ProtectHome=yes: pass --python /usr/bin/python3"
    if [[ $dry_run -eq 1 ]]; then note "warning: $message"; else die "$message"; fi ;;
esac
[[ -f "$example" ]] || die "example config not found: $example"
[[ -f "$here/$service.service" ]] || die "unit file not found: $here/$service.service"

# 1. The service user: a system account with no shell and no home, in the groups that read logs.
if getent passwd "$user" >/dev/null; then
  note "user $user exists"
else
  run useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
fi
for group in adm systemd-journal; do
  getent group "$group" >/dev/null \
    || note "warning: group $group does not exist here; remove it from SupplementaryGroups= in $unit_dir/$service.service"
done

# 2. The program: a private virtualenv, upgraded in place on every run.
if [[ -x "$prefix/bin/python" ]]; then
  note "virtualenv $prefix exists"
else
  run "$python" -m venv "$prefix"
fi
run "$prefix/bin/pip" install --quiet --upgrade pip
run "$prefix/bin/pip" install --quiet --upgrade "$package"
run ln -sfn "$prefix/bin/deepinfer-agent" /usr/local/bin/deepinfer-agent

# 3. The config: copied once from the example, readable by the service's group only; never overwritten.
run install -d -m 0755 "$config_dir"
if [[ -e "$config_dir/config.yaml" ]]; then
  note "$config_dir/config.yaml exists: kept as it is"
else
  run install -m 0640 -o root -g "$user" "$example" "$config_dir/config.yaml"
  note "edit $config_dir/config.yaml (model, gpu, server, sources), then: systemctl reload $service"
fi
run "$prefix/bin/deepinfer-agent" check --config "$config_dir/config.yaml"

# 4. The unit (rendered above).
if [[ -f "$unit_dir/$service.service" ]] && [[ "$(cat "$unit_dir/$service.service")" == "$unit_text" ]]; then
  note "$unit_dir/$service.service is up to date"
else
  printf '+ write %s\n' "$unit_dir/$service.service"
  if [[ $dry_run -eq 0 ]]; then
    install -d -m 0755 "$unit_dir"
    printf '%s\n' "$unit_text" >"$unit_dir/$service.service.tmp"
    chmod 0644 "$unit_dir/$service.service.tmp"
    mv "$unit_dir/$service.service.tmp" "$unit_dir/$service.service"
  fi
fi
run systemctl daemon-reload

# 5. Enable, and start (or restart, so an upgrade takes effect).
if [[ $start -eq 1 ]]; then
  run systemctl enable "$service"
  run systemctl restart "$service"
  note "check it: systemctl status $service; journalctl -u $service -f; curl -s 127.0.0.1:9842/metrics"
else
  run systemctl enable "$service"
fi
