#!/usr/bin/env bash
# Builds the .deb, checks what is in it, installs it with dpkg, runs the installed binary's
# `check` on the installed default config, and removes it again. Run as root (CI is).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-deb: $*" >&2; exit 1; }

packaging/build-deb.sh
deb=$(ls -t target/debian/hookinbox_*.deb | head -n 1)
echo "test-deb: built $deb"

contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/hookinbox \
            ./usr/lib/systemd/system/hookinbox.service \
            ./usr/lib/systemd/system/hookinbox.socket \
            ./usr/lib/systemd/system/hookinbox-admin.socket \
            ./etc/hookinbox/hookinbox.toml \
            ./usr/lib/sysusers.d/hookinbox.conf \
            ./usr/lib/tmpfiles.d/hookinbox.conf \
            ./usr/share/man/man1/hookinbox.1.gz \
            ./usr/share/bash-completion/completions/hookinbox \
            ./usr/share/zsh/vendor-completions/_hookinbox \
            ./usr/share/fish/vendor_completions.d/hookinbox.fish \
            ./usr/share/doc/hookinbox/consuming.md \
            ./usr/share/doc/hookinbox/prometheus/hookinbox.rules.yml \
            ./usr/share/doc/hookinbox/prometheus/hookinbox.rules.test.yml \
            ./usr/share/doc/hookinbox/grafana/hookinbox-dashboard.json; do
    grep -qE " ${path}\$" <<<"$contents" || fail "$path is not in the package"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dpkg-deb --control "$deb" "$tmp/control"
grep -qx "/etc/hookinbox/hookinbox.toml" "$tmp/control/conffiles" || fail "the config is not a conffile"
grep -q "#DEBHELPER#" "$tmp/control/postinst" && fail "postinst still has the #DEBHELPER# token"
# An upgrade restarts the service, never its sockets: they keep listening through it.
grep -q "try-restart hookinbox.service" "$tmp/control/postinst" || fail "postinst does not restart the service on upgrade"
if grep -v '^[[:space:]]*#' "$tmp/control/postinst" | grep -E "(restart|stop|start) .*hookinbox(-admin)?\.socket"; then
    fail "postinst restarts, stops or starts a socket unit"
fi
echo "test-deb: contents, conffile and maintainer scripts are in place"
# The alerting rules as the package ships them (taken from the .deb rather than after the
# install, since images with a dpkg path-exclude for /usr/share/doc drop them); their unit
# tests name the rules file beside them.
dpkg-deb -x "$deb" "$tmp/root"
rules="$tmp/root/usr/share/doc/hookinbox/prometheus"
if command -v promtool >/dev/null 2>&1; then
    (cd "$rules" && promtool check rules hookinbox.rules.yml >/dev/null \
        && promtool test rules hookinbox.rules.test.yml >/dev/null) \
        || fail "the packaged alerting rules fail promtool"
    echo "test-deb: the packaged alerting rules pass promtool check and test"
elif [ -n "${HOOKINBOX_REQUIRE_PROMTOOL:-}" ]; then
    fail "no promtool, and HOOKINBOX_REQUIRE_PROMTOOL is set"
else
    echo "test-deb: SKIPPED promtool on the packaged rules: not installed"
    if [ -n "${HOOKINBOX_SKIP_LOG:-}" ]; then
        echo "SKIPPED packaging/test-deb.sh promtool: not installed" >> "$HOOKINBOX_SKIP_LOG"
    fi
fi

if dpkg -s hookinbox >/dev/null 2>&1; then
    dpkg --purge hookinbox
fi
dpkg -i "$deb"
getent passwd hookinbox >/dev/null || fail "the hookinbox user was not created"
[ "$(stat -c %U:%G /var/lib/hookinbox)" = "hookinbox:hookinbox" ] || fail "/var/lib/hookinbox is not the service user's"
[ "$(stat -c %a /etc/hookinbox/hookinbox.toml)" = "640" ] || fail "the config is not 640"
/usr/bin/hookinbox check --config /etc/hookinbox/hookinbox.toml || fail "check fails on the installed default config"
[ -f /usr/share/man/man1/hookinbox.1.gz ] || fail "no man page"
zcat /usr/share/man/man1/hookinbox.1.gz | grep -q '^\.SH CONFIGURATION' || fail "the man page has no configuration reference"

unit=/usr/lib/systemd/system/hookinbox.service
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify checks the unit's syntax and that ExecStart exists; it may also complain that
    # it cannot look up the man page in a minimal image, which is not the unit's fault.
    out=$(systemd-analyze verify "$unit" /usr/lib/systemd/system/hookinbox.socket \
        /usr/lib/systemd/system/hookinbox-admin.socket 2>&1) || true
    problems=$(grep -v "man hookinbox(1)" <<<"$out" | grep -v '^$' || true)
    [ -z "$problems" ] || fail "systemd-analyze verify: $problems"
    score=$(systemd-analyze security --offline=true "$unit" 2>&1 | sed -n 's/.*Overall exposure level for hookinbox.service: \([0-9.]*\).*/\1/p')
    echo "test-deb: systemd-analyze verify ok; security exposure $score"
    systemd-analyze security --offline=true --threshold=20 "$unit" >/dev/null \
        || fail "the unit's exposure $score is above 2.0"
else
    echo "test-deb: SKIPPED systemd-analyze: not installed"
    if [ -n "${HOOKINBOX_SKIP_LOG:-}" ]; then
        echo "SKIPPED packaging/test-deb.sh systemd-analyze: not installed" >> "$HOOKINBOX_SKIP_LOG"
    fi
fi

# An edited config survives a reinstall (dpkg keeps conffiles the operator changed).
echo "# edited by the operator" >> /etc/hookinbox/hookinbox.toml
dpkg -i --force-confold "$deb"
grep -q "edited by the operator" /etc/hookinbox/hookinbox.toml || fail "a reinstall overwrote the edited config"

dpkg --remove hookinbox
[ ! -e /usr/bin/hookinbox ] || fail "the binary is still there after removal"
dpkg --purge hookinbox
[ ! -e /etc/hookinbox/hookinbox.toml ] || fail "purge left the config"
echo "test-deb: installed, checked, reinstalled over an edited config, removed and purged"
