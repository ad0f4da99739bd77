#!/usr/bin/env bash
# Builds the browser player's WebAssembly (crate `bsor-stream-wasm`, as scripts/wasm-test.sh
# builds it: clang for zstd's C code, paths remapped, no debug info, stripped) into
# web/bsor_stream.wasm, and checks the budgets: the module at most 400 KB gzipped, the whole
# page (every file of web/ but README.md) at most 1 MB gzipped.
# With --check (CI): fails if the rebuilt bytes differ from the checked-in ones.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-ar >/dev/null || need+=(llvm)
if [ ${#need[@]} -gt 0 ]; then
    echo "web-build: installing ${need[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
rustup target add wasm32-unknown-unknown >/dev/null

export CC_wasm32_unknown_unknown=clang
export AR_wasm32_unknown_unknown=llvm-ar
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_STRIP=true
export RUSTFLAGS="--remap-path-prefix=$(pwd)=. --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=cargo"
cargo build --release --locked -p bsor-stream-wasm --target wasm32-unknown-unknown \
    --target-dir target/wasm
built=target/wasm/wasm32-unknown-unknown/release/bsor_stream_wasm.wasm
# Copied only when it changed: the CLI's build script embeds web/ and rebuilds on any touch.
cmp -s "$built" web/bsor_stream.wasm || cp "$built" web/bsor_stream.wasm

wasm_gz=$(gzip -9n <web/bsor_stream.wasm | wc -c)
page_gz=0
for f in web/*; do
    [ -f "$f" ] && [ "$(basename "$f")" != README.md ] || continue
    page_gz=$((page_gz + $(gzip -9n <"$f" | wc -c)))
done
echo "web-build: web/bsor_stream.wasm $(stat -c %s web/bsor_stream.wasm) bytes," \
    "$wasm_gz gzipped (budget 409600); the page $page_gz gzipped (budget 1048576)"
[ "$wasm_gz" -le 409600 ] || { echo "web-build: the wasm is over its budget" >&2; exit 1; }
[ "$page_gz" -le 1048576 ] || { echo "web-build: the page is over its budget" >&2; exit 1; }

if [ "${1:-}" = --check ]; then
    git diff --exit-code --stat -- web/ ||
        { echo "web-build: the rebuilt web/ differs from the checked-in files" >&2; exit 1; }
fi
