#!/usr/bin/env bash
# Builds fpzip's reference library once per floating-point mode (FAST, SAFE, EMUL, INT)
# with gen.cpp beside this script, and writes the test vectors of the core's fpzip decoder
# into core/tests/data/fpzip/ (README.md beside this script says what and why).
#
#   scripts/fpzip-vectors/make-vectors.sh FPZIP_SRC [OUT]
#
# FPZIP_SRC: fpzip's C++ sources (the directory holding include/ and src/), e.g. the
# fpzip-1.3.0/ directory of the PyPI `fpzip` 1.2.5 sdist:
#   pip download fpzip==1.2.5 --no-binary fpzip --no-deps  (then untar it)
# Needs g++. Not part of any crate's build.
set -euo pipefail
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here/../../core/tests/data/fpzip}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
version=$(sed -n 's/^#define FPZIP_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$src/include/fpzip.h" | paste -sd.)
for mode in FAST SAFE EMUL INT; do
  b=$tmp/$mode
  mkdir -p "$b/obj" "$b/vec"
  for f in error rcdecoder rcencoder rcqsmodel read version write; do
    g++ -std=c++98 -O3 -w -fno-strict-aliasing -DFPZIP_BLOCK_SIZE=0x1000 -DFPZIP_FP=FPZIP_FP_$mode \
      -I"$src/include" -c "$src/src/$f.cpp" -o "$b/obj/$f.o"
  done
  g++ -std=c++11 -O2 -Wall -DFPZIP_FP=FPZIP_FP_$mode -I"$src/include" "$here/gen.cpp" "$b"/obj/*.o -o "$b/gen"
  "$b/gen" "$b/vec" > "$b/log"
done
rm -f "$out"/*.fpz "$out"/*.fpz64 "$out"/*.f32
cp "$tmp"/FAST/vec/*.fpz64 "$out/"
for f in "$tmp"/FAST/vec/*.in.f32; do
  name=$(basename "$f" .in.f32)
  for mode in SAFE EMUL INT; do
    cmp -s "$f" "$tmp/$mode/vec/$name.in.f32" || { echo "$name: inputs differ between modes" >&2; exit 1; }
  done
  cp "$f" "$out/"
  for mode in FAST SAFE EMUL INT; do
    m=$(echo $mode | tr A-Z a-z)
    cp "$tmp/$mode/vec/$name.$m.fpz" "$out/"
    # The reference decoding, kept where it is not the input (lossy precisions); it must be
    # the same in every mode (each mode's decoder reads back what its encoder wrote).
    cmp -s "$tmp/FAST/vec/$name.fast.out.f32" "$tmp/$mode/vec/$name.$m.out.f32" ||
      { echo "$name: $mode decodes differently from FAST" >&2; exit 1; }
  done
  cmp -s "$f" "$tmp/FAST/vec/$name.fast.out.f32" || cp "$tmp/FAST/vec/$name.fast.out.f32" "$out/$name.out.f32"
done
echo "fpzip $version, $(g++ --version | head -1)" > "$out/GENERATED-BY"
echo "wrote $(ls "$out" | wc -l) files ($(du -sb "$out" | cut -f1) bytes) to $out with fpzip $version"
