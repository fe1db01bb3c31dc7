#!/usr/bin/env bash
# The Debian package of this build, on this machine: packaged as built (debian/rules'
# DRIPGATE_PREBUILT, no compile) from an export of the tree in a temporary folder, checked by
# lintian (no error), installed with apt, its files, man pages, user and units checked, an
# operator's config checked by the installed dripgate-control, then purged: nothing it installed
# stays, the operator's file does. Root; the machine is left as it was, also on failure.
# Usage: deb_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
fail() { echo "deb_test: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || fail "needs root (it installs and purges the package)"
if dpkg-query -W -f='${Status}' dripgate 2>/dev/null | grep -qv 'not-installed'; then
  fail "a dripgate package is already on this machine; the test installs and purges its own"
fi

work=$(mktemp -d /tmp/dg-deb.XXXXXX)
operator_file=/etc/dripgate/deb-test.yaml
had_etc=$([[ -e /etc/dripgate ]] && echo 1 || echo 0)
had_state=$([[ -e /var/lib/dripgate || -e /var/log/dripgate ]] && echo 1 || echo 0)
had_user=$(getent passwd dripgate >/dev/null && echo 1 || echo 0)
had_group=$(getent group dripgate >/dev/null && echo 1 || echo 0)
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=120 "$@"; }
cleanup() {
  if dpkg-query -W -f='${Status}' dripgate 2>/dev/null | grep -qv 'not-installed'; then
    apt_get purge dripgate >/dev/null 2>&1 || dpkg --purge dripgate >/dev/null 2>&1 || true
  fi
  rm -f "$operator_file"
  ((had_etc)) || rm -rf /etc/dripgate
  ((had_state)) || rm -rf /var/lib/dripgate /var/log/dripgate
  ((had_user)) || ! getent passwd dripgate >/dev/null || userdel dripgate
  ((had_group)) || ! getent group dripgate >/dev/null || groupdel dripgate
  rm -rf "$work"
}
trap cleanup EXIT

# The tree without its build folders and VCS data; the build folder is read where it is.
mkdir "$work/dripgate"
tar -C "$src" --exclude=./.git --exclude='./build*' --exclude="./${build#"$src"/}" \
  --exclude=./debian/tmp --exclude=./debian/.debhelper -cf - . | tar -C "$work/dripgate" -xf -
t0=$SECONDS
# No -dbgsym package: nothing here reads it.
(cd "$work/dripgate" && DRIPGATE_PREBUILT=$build DEB_BUILD_OPTIONS=noautodbgsym \
  dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "dpkg-buildpackage failed"; }
echo "packaged in $((SECONDS - t0)) s"
deb=$(echo "$work"/dripgate_*_"$(dpkg --print-architecture)".deb)
[[ -f $deb ]] || fail "no .deb in $work: $(ls "$work")"

t0=$SECONDS
lintian --tag-display-limit 0 "$deb" >"$work/lintian.log" 2>&1 || true
cat "$work/lintian.log"
! grep -q '^E:' "$work/lintian.log" || fail "lintian reports errors"
echo "lintian in $((SECONDS - t0)) s"

t0=$SECONDS
apt_get install --no-install-recommends "$deb" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "apt-get install failed"; }
echo "installed in $((SECONDS - t0)) s"
for cmd in dripgate-control dripgate-dataplane dripgate-iat dripgate-burst; do
  [[ $(command -v "$cmd") == /usr/bin/$cmd ]] || fail "$cmd is not on PATH from /usr/bin"
done
for cmd in dripgate-control dripgate-dataplane dripgate-iat; do
  page=$(man -w "$cmd") || fail "no man page for $cmd"
  zcat "$page" | grep -q '^\.SH OPTIONS' || fail "$page has no OPTIONS from $cmd --help"
done
for unit in dripgate-control dripgate-dataplane; do
  f=/lib/systemd/system/$unit.service
  grep -q "^ExecStart=/usr/bin/$unit --config /etc/dripgate/dripgate.yaml$" "$f" ||
    fail "$f does not start /usr/bin/$unit on /etc/dripgate/dripgate.yaml"
  [[ ! -e /etc/systemd/system/multi-user.target.wants/$unit.service ]] ||
    fail "$unit is enabled at install, before the operator has written its config"
done
getent passwd dripgate | grep -q ':/var/lib/dripgate:' || fail "no system user dripgate"
getent group dripgate >/dev/null || fail "no group dripgate"
dpkg-query -W -f='${Conffiles}\n' dripgate | grep -q '^ /etc/dripgate/appliance.yaml.example ' ||
  fail "appliance.yaml.example is not a conffile"
[[ -f /usr/share/doc/dripgate/ARCHITECTURE.md.gz || -f /usr/share/doc/dripgate/ARCHITECTURE.md ]] ||
  fail "no ARCHITECTURE.md in /usr/share/doc/dripgate"

# An operator's files: a config of their own, and the example edited in place.
cat >"$operator_file" <<'EOF'
redis: { url: "redis://127.0.0.1:6379/0" }
plans:
  pro: { gates: { tenant: { capacity: 10, refill_per_s: 1 } } }
tenants:
  acme: { plan: pro }
EOF
cp "$operator_file" "$work/operator.yaml"
dripgate-control --config "$operator_file" --check || fail "--check refuses $operator_file"
sed 's/plan: pro/plan: nope/' "$operator_file" >"$work/bad.yaml"
if out=$(dripgate-control --config "$work/bad.yaml" --check 2>&1); then
  fail "--check passes a tenant on an unknown plan"
fi
grep -q "$work/bad.yaml:5:" <<<"$out" || fail "--check's error does not name file and line: $out"
echo '# edited by the operator' >>/etc/dripgate/appliance.yaml.example
t0=$SECONDS
dpkg -i "$deb" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "dpkg -i again failed"; }
tail -1 /etc/dripgate/appliance.yaml.example | grep -q '^# edited by the operator$' ||
  fail "a reinstall overwrote the operator's appliance.yaml.example"
cmp -s "$operator_file" "$work/operator.yaml" || fail "a reinstall changed $operator_file"
echo "reinstalled in $((SECONDS - t0)) s"

# What the units would make at run time, as systemd makes it, for the purge to take.
((had_state == 0)) || fail "/var/lib/dripgate or /var/log/dripgate is here before the package"
mkdir -p /var/lib/dripgate /var/log/dripgate
touch /var/lib/dripgate/journal /var/log/dripgate/decisions.log

dpkg -L dripgate >"$work/files"
t0=$SECONDS
apt_get purge dripgate >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "apt-get purge failed"; }
echo "purged in $((SECONDS - t0)) s"
left=()
while IFS= read -r f; do
  # Directories shared with other packages (/usr/bin, /lib/systemd/system) stay.
  [[ $f != /. && $f != /etc/dripgate ]] || continue
  if [[ -e $f || -L $f ]] && ! { [[ -d $f ]] && dpkg -S "$f" >/dev/null 2>&1; }; then left+=("$f"); fi
done <"$work/files"
for d in /var/lib/dripgate /var/log/dripgate /usr/share/doc/dripgate; do [[ ! -e $d ]] || left+=("$d"); done
((${#left[@]} == 0)) || fail "left after purge: ${left[*]}"
[[ $(ls -A /etc/dripgate) == "$(basename "$operator_file")" ]] ||
  fail "/etc/dripgate after purge holds $(ls -A /etc/dripgate | tr '\n' ' ')(only the operator's file should stay)"
echo "deb_test: built, linted, installed, reinstalled and purged $(basename "$deb")"
