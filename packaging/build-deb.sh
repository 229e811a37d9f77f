#!/usr/bin/env bash
# Builds the Debian package: target/debian/hookinbox_<version>-1_<arch>.deb
#
#   packaging/build-deb.sh
#
# Installs cargo-deb from crates.io if it is missing, builds the release binary, generates
# the man page and shell completions with the binary itself, and packages them with the
# unit, the sysusers and tmpfiles snippets and the default config (a conffile).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: the maintainer-script snippets it generates are part of what the package tests
# check (packaging/debian/postinst relies on the shape of its sysusers snippet).
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q " $CARGO_DEB_VERSION"; then
    echo "installing cargo-deb $CARGO_DEB_VERSION" >&2
    cargo install --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi
cargo build --release --locked
mkdir -p target/assets
target/release/hookinbox generate --out-dir target/assets >/dev/null
cargo deb --no-build --locked
