#!/usr/bin/env bash
# Builds the classic codec and the stream decoder for wasm32-unknown-unknown (crate
# `bsor-stream-wasm`, the library with --no-default-features), checks that the module
# imports nothing, and decodes test vectors with it in node. zstd's C code is compiled with
# clang (Debian's), which targets wasm32; gcc cannot. Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-ar >/dev/null || need+=(llvm)
command -v node >/dev/null || need+=(nodejs)
if [ ${#need[@]} -gt 0 ]; then
    echo "wasm-test: installing ${need[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
rustup target add wasm32-unknown-unknown >/dev/null

export CC_wasm32_unknown_unknown=clang
export AR_wasm32_unknown_unknown=llvm-ar
# The module as a page would ship it: optimised, no debug info, paths independent of the
# machine that built it.
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_STRIP=true
export RUSTFLAGS="--remap-path-prefix=$(pwd)=. --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=cargo"
cargo build --release -p bsor-stream-wasm --target wasm32-unknown-unknown \
    --target-dir target/wasm
wasm=target/wasm/wasm32-unknown-unknown/release/bsor_stream_wasm.wasm
echo "wasm-test: $wasm: $(stat -c %s "$wasm") bytes, $(gzip -9 <"$wasm" | wc -c) gzipped"
node scripts/wasm-check.mjs "$wasm" proto-spec/vectors
