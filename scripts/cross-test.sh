#!/usr/bin/env bash
# Cross-builds and tests the library for the targets game mods run on:
#  - aarch64-unknown-linux-gnu (the Quest's CPU): the library's tests and the C example run
#    under qemu-aarch64, and the C example's output must equal the x86_64 output byte for
#    byte (same input, same stream bytes on both architectures); the C misuse program
#    (ffi/tests/misuse.c) runs under qemu-aarch64 too;
#  - x86_64-pc-windows-gnu (PC mods): the DLL builds and exports the C ABI;
#  - the size of the aarch64 release library with LTO (profile `dist`).
# Installs what it needs (Debian packages, Rust targets). Run from anywhere; CI calls it
# from .ci/run with BSOR_CORPUS set.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
command -v ld.lld >/dev/null || need+=(lld)
if [ ${#need[@]} -gt 0 ]; then
    echo "cross-test: installing ${need[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
rustup target add aarch64-unknown-linux-gnu x86_64-pc-windows-gnu >/dev/null

arm=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# zstd without the block compressors the recorder never runs: it compresses at level 3 only
# (stream::Settings::live and ::archive; the C ABI sets no other), which is zstd's `dfast`
# strategy at every source size (zstd/lib/compress/clevels.h); a higher level would still
# work, cascaded down to `dfast` by zstd itself. The same stream bytes either way: the C example below, built with these flags
# on aarch64 and without them on x86_64, must write identical files. docs/quest.md sets
# the same for the Android build.
export CFLAGS_aarch64_unknown_linux_gnu="-DZSTD_EXCLUDE_GREEDY_BLOCK_COMPRESSOR \
-DZSTD_EXCLUDE_LAZY_BLOCK_COMPRESSOR -DZSTD_EXCLUDE_LAZY2_BLOCK_COMPRESSOR \
-DZSTD_EXCLUDE_BTLAZY2_BLOCK_COMPRESSOR -DZSTD_EXCLUDE_BTOPT_BLOCK_COMPRESSOR \
-DZSTD_EXCLUDE_BTULTRA_BLOCK_COMPRESSOR"
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CC_x86_64_pc_windows_gnu=x86_64-w64-mingw32-gcc
export AR_x86_64_pc_windows_gnu=x86_64-w64-mingw32-ar

# The core's and the C ABI crate's tests under qemu (the command-line tool's and the tools',
# in cli/ and tools/, run their binaries, which the kernel cannot exec without binfmt_misc). The C example is built and
# run below. What a headset runs: the format, the recorder and its live sink over TLS,
# signing, and the sans-IO relay its tests publish to; no tokio, no replay server (their
# tests run on x86_64 in .ci/run). In one build, so that the core is compiled once with the
# features of both.
arm_features=(--no-default-features --features
    bsor-stream-core/live,bsor-stream-core/integrity,bsor-stream-core/tls,bsor-stream-ffi/live,bsor-stream-ffi/sign,bsor-stream-ffi/tls)
echo "cross-test: core and C ABI tests on $arm under qemu"
# The crash test re-executes its own binary (which, aarch64, needs qemu too): skipped here.
BSRS_SKIP_C_EXAMPLE=1 cargo test --release --target $arm -p bsor-stream-core -p bsor-stream-ffi \
    --lib --tests "${arm_features[@]}" -- --skip crash::

# The C programs link the library as a mod ships it by default (no `tls`: the misuse
# program checks that a CA file is refused without it).
echo "cross-test: the C example on x86_64 and on $arm"
cargo build --release -p bsor-stream-ffi
cargo build --release -p bsor-stream-ffi --target $arm
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
libs=(-lpthread -ldl -lm -lrt -lc)
cc -std=c99 -Wall -Werror -O2 examples/c/record.c -I include \
    target/release/libbsor_stream_ffi.a "${libs[@]}" -lgcc_s -o "$out/record-x86_64"
aarch64-linux-gnu-gcc -std=c99 -Wall -Werror -O2 examples/c/record.c -I include \
    target/$arm/release/libbsor_stream_ffi.a "${libs[@]}" -lgcc_s -o "$out/record-aarch64"
"$out/record-x86_64" "$out/x86_64.bsors" "$out/x86_64.bsor" 20
qemu-aarch64 -L $sysroot "$out/record-aarch64" "$out/aarch64.bsors" "$out/aarch64.bsor" 20
cmp "$out/x86_64.bsors" "$out/aarch64.bsors"
cmp "$out/x86_64.bsor" "$out/aarch64.bsor"
cargo run --release --quiet -- decode "$out/aarch64.bsors" -o "$out/decoded.bsor"
cmp "$out/decoded.bsor" "$out/aarch64.bsor"
echo "cross-test: identical stream ($(stat -c %s "$out/aarch64.bsors") bytes) and BSOR on both; the stream decodes to the BSOR"

echo "cross-test: the C misuse program on $arm under qemu (every misuse survived and checked)"
aarch64-linux-gnu-gcc -std=c99 -Wall -Werror -O2 ffi/tests/misuse.c -I include \
    target/$arm/release/libbsor_stream_ffi.a "${libs[@]}" -lgcc_s -o "$out/misuse-aarch64"
mkdir "$out/misuse"
qemu-aarch64 -L $sysroot "$out/misuse-aarch64" "$out/misuse"

echo "cross-test: the Windows DLL"
cargo build --release -p bsor-stream-ffi --target x86_64-pc-windows-gnu
dll=target/x86_64-pc-windows-gnu/release/bsor_stream_ffi.dll
# (Not `| grep -q`: with pipefail, objdump's SIGPIPE after an early match fails the line.)
exports=$(x86_64-w64-mingw32-objdump -p "$dll")
grep -q bsrs_push_frame <<<"$exports"
echo "cross-test: $dll ($(stat -c %s "$dll") bytes) exports the C ABI"

echo "cross-test: release size on $arm (profile dist: LTO, one codegen unit, stripped)"
# The budget a mod links: 1.0 MB without the live sink, 1.2 MB with it (decimal MB), over
# TLS or not (feature `tls`, opt-in: rustls, ring's AES-GCM and hashes, the RustCrypto
# curves, about 0.49 MB). The last two include signing, a default (feature `sign`: Ed25519
# and BLAKE3, about 0.1 MB).
# Built as docs/quest.md says a mod builds it: the shared library alone (`cargo rustc
# --crate-type cdylib`: with the manifest's staticlib and rlib beside it the same build was
# 0.2 MB larger), linked by lld as the NDK links, with packed relative relocations
# (DT_RELR here; DT_ANDROID_RELR on Android below API 30), identical code folded and 16 KiB
# pages (Android's largest).
lld_dir=$(dirname "$(readlink -f "$(command -v ld.lld)")")
dist_link=(-C link-arg=-fuse-ld=lld -C "link-arg=-B$lld_dir" -C link-arg=-Wl,--pack-dyn-relocs=relr
    -C link-arg=-Wl,--icf=all -C link-arg=-Wl,-z,max-page-size=16384)
dist_build() {
    cargo rustc --profile dist -p bsor-stream-ffi --target $arm --crate-type cdylib "$@" \
        -- "${dist_link[@]}"
}
size_check() {
    local label=$1 budget=$2 so=target/$arm/dist/libbsor_stream_ffi.so
    local size
    size=$(stat -c %s "$so")
    echo "cross-test: $label: $so $size bytes (budget $budget)"
    if [ "$size" -gt "$budget" ]; then
        echo "cross-test: $label is over its size budget" >&2
        exit 1
    fi
}
dist_build --no-default-features
size_check "without the live sink" 1000000
dist_build
size_check "with the live sink" 1200000
dist_build --features tls
size_check "with the live sink over TLS" 1200000
