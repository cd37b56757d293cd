#!/usr/bin/env bash
# Gives a fresh checkout (one without target/) a target directory cached
# outside the repository, so the registry crates compiled by an earlier run
# (most of a cold build: wasmtime, kube, tokio, ...) are reused:
#
#   target -> ~/.cache/wasm-operator/cargo-target/test-<key>
#
# <key> is a digest of what those compiled crates depend on: the registry
# packages of Cargo.lock (name, version, checksum) and `rustc -vV`. Another
# dependency set or toolchain gets a directory of its own; cargo's
# fingerprints decide what is fresh inside one (registry crates are
# immutable, named by version and checksum).
#
# The workspace's own crates are always rebuilt from this checkout: when
# another checkout built there last (the `built-from` stamp), their cargo
# fingerprints are removed first, because cargo judges a local crate fresh by
# file times, which say nothing about another checkout's sources.
#
# A checkout that already has target/ keeps it. WASM_OPERATOR_NO_TARGET_CACHE=1
# turns this off. Cached directories unused for a week are removed, and so
# are rustc's incremental caches in them unused for two days (rustc keeps
# one per crate and checkout directory, and never removes another's) and
# test executables not rebuilt for two days.
#
# .ci/run names its checkout's directory ci-<key> (WASM_OPERATOR_TARGET_CACHE_NAME=ci):
# the CI checkout trusts what it compiled there last, so no other checkout
# may build into it.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ "${WASM_OPERATOR_NO_TARGET_CACHE:-}" == 1 ]] && exit 0
[[ -e target || -L target ]] && exit 0

cache_root=${WASM_OPERATOR_KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasm-operator}
key=$( { awk '
            /^\[\[package\]\]/     { name = ""; version = ""; registry = 0 }
            /^name = /           { name = $0 }
            /^version = /        { version = $0 }
            /^source = "registry/ { registry = 1 }
            /^checksum = /       { if (registry) print name, version, $0 }' Cargo.lock;
         rustc -vV; } | sha256sum | cut -c1-16)
name=${WASM_OPERATOR_TARGET_CACHE_NAME:-test}
dir=$cache_root/cargo-target/$name-$key
mkdir -p "$dir"
date +%s >"$dir/last-used"

# Directories of other keys unused for a week go.
for old in "$cache_root"/cargo-target/"$name"-*; do
    [[ "$old" == "$dir" ]] && continue
    [[ -n "$(find "$old/last-used" -mtime +7 2>/dev/null)" ]] && rm -rf "$old"
done
find "$dir"/*/incremental -mindepth 1 -maxdepth 1 -mtime +2 -exec rm -rf '{}' + 2>/dev/null || true
# So are test executables not rebuilt for two days: each commit that changes
# a crate links its test binaries anew under the same names' new hashes, and
# cargo never removes the old ones (100-300 MB each; 7 GB here after a day).
# Cargo relinks one it still needs.
find "$dir"/debug/deps -maxdepth 1 -type f -perm -u+x ! -name '*.so' -mtime +2 -delete 2>/dev/null || true

here=$(pwd -P)
if [[ "$(cat "$dir/built-from" 2>/dev/null || true)" != "$here" ]]; then
    packages=$(cargo metadata --no-deps --format-version 1 --locked |
        python3 -c 'import json, sys; print("\n".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
    find "$dir" -type d -name .fingerprint 2>/dev/null | while read -r fingerprints; do
        for package in $packages; do
            find "$fingerprints" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
                -regex ".*/${package}-[0-9a-f]{16}" -exec rm -rf '{}' +
        done
    done
fi
# Before building: a build from here that stops halfway still counts.
printf '%s' "$here" >"$dir/built-from"
ln -s "$dir" target
echo "target/ -> $dir (compiled registry crates cached by Cargo.lock and rustc -vV)" >&2
