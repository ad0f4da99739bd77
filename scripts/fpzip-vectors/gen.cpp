// Test vectors of fpzip for the core's decoder (core/src/xror/fpzip.rs): synthetic float32
// arrays compressed by the reference library, built in one floating-point mode (FPZIP_FP)
// per binary. See README.md beside this file; make-vectors.sh builds and runs it.
//
// For each case it writes, into the directory given:
//   NAME.in.f32          the input, little-endian float32, x fastest
//   NAME.MODE.fpz        the input compressed with its fpzip header, in this binary's mode
//   NAME.MODE.out.f32    the reference library's own decoding of NAME.MODE.fpz
// No corpus data: motion-like curves from a fixed formula and a few edge values.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "fpzip.h"

#if FPZIP_FP == FPZIP_FP_FAST
static const char* MODE = "fast";
#elif FPZIP_FP == FPZIP_FP_SAFE
static const char* MODE = "safe";
#elif FPZIP_FP == FPZIP_FP_EMUL
static const char* MODE = "emul";
#elif FPZIP_FP == FPZIP_FP_INT
static const char* MODE = "int";
#endif

struct Case {
  std::string name;
  int prec, nx, ny, nz, nf;
  std::vector<float> v;
};

// A small deterministic generator (no libc rand: the same bits on every platform).
static uint32_t seed = 0x2545F491u;
static float noise()
{
  seed = seed * 1664525u + 1013904223u;
  return (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static float bits(uint32_t u)
{
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rows of a head and two hands: time, then 3 positions and a unit quaternion per device,
// as XROR's frames are (here 1 + 7 * devices values per row), smooth with a little noise.
static std::vector<float> motion(int nx, int rows, int seed0)
{
  std::vector<float> v;
  seed = 0x2545F491u + (uint32_t)seed0;
  for (int r = 0; r < rows; r++) {
    float t = r / 90.0f;
    v.push_back(t);
    for (int c = 1; c < nx; c++) {
      int d = (c - 1) / 7, k = (c - 1) % 7;
      float w = 1.3f + 0.7f * d + 0.11f * k;
      float x;
      if (k < 3)
        x = (k == 1 ? 1.5f - 0.4f * d : 0.25f * (d - 1)) + 0.3f * std::sin(w * t + k) + 0.002f * noise();
      else
        x = 0.5f * std::cos(0.5f * w * t + k) + 0.001f * noise();
      v.push_back(x);
    }
  }
  return v;
}

static std::vector<float> edges()
{
  const uint32_t u[] = {
    0x00000000u, 0x80000000u, // +0, -0
    0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00400000u, // denormals
    0x00800000u, 0x80800000u, // smallest normals
    0x7f7fffffu, 0xff7fffffu, // largest finite
    0x7f800000u, 0xff800000u, // +inf, -inf
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa5a5a5u, 0xfff00001u, // NaNs (quiet, signalling, payloads)
    0x3f800000u, 0xbf800000u, 0x3f800001u, 0xbf7fffffu, // around 1
  };
  std::vector<float> v;
  for (unsigned i = 0; i < sizeof u / sizeof u[0]; i++)
    v.push_back(bits(u[i]));
  // then the same values between smooth ones, so that predictions cross them
  for (unsigned i = 0; i < sizeof u / sizeof u[0]; i++) {
    v.push_back(-2.5f + 0.125f * i);
    v.push_back(bits(u[i]));
  }
  while (v.size() % 11)
    v.push_back(-1.0f - 0.5f * v.size());
  return v;
}

static std::vector<Case> cases()
{
  std::vector<Case> c;
  // XROR's own shape: one field, rows of 1 + 3 * 7 values, full precision.
  c.push_back({"motion22x10", 0, 22, 10, 1, 1, motion(22, 10, 1)});
  // nz and nf above 1.
  c.push_back({"motion8x3x2x2", 0, 8, 3, 2, 2, motion(8, 12, 2)});
  // One dimension only, along each axis.
  c.push_back({"line1x1x24", 0, 1, 1, 24, 1, motion(8, 3, 3)});
  c.push_back({"line24x1x1", 0, 24, 1, 1, 1, motion(8, 3, 4)});
  // Edge values: zeros, negatives, denormals, infinities, NaNs.
  std::vector<float> e = edges();
  c.push_back({"edges11", 0, 11, (int)e.size() / 11, 1, 1, e});
  // Lossy precisions: wide alphabets (above 8 bits) and narrow ones (8 and below).
  const int precs[] = {24, 16, 9, 8, 4, 2};
  for (unsigned i = 0; i < sizeof precs / sizeof precs[0]; i++) {
    char name[32];
    std::snprintf(name, sizeof name, "motion8x8p%d", precs[i]);
    c.push_back({name, precs[i], 8, 8, 1, 1, motion(8, 8, 10 + (int)i)});
  }
  c.push_back({"edges11p16", 16, 11, (int)e.size() / 11, 1, 1, e});
  return c;
}

static void write_file(const std::string& path, const void* p, size_t n)
{
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(p, 1, n, f) != n || std::fclose(f)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

int main(int argc, char** argv)
{
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::vector<Case> cs = cases();
  for (size_t i = 0; i < cs.size(); i++) {
    Case& c = cs[i];
    size_t n = (size_t)c.nx * c.ny * c.nz * c.nf;
    if (c.v.size() != n) {
      std::fprintf(stderr, "%s: %zu values for %zu\n", c.name.c_str(), c.v.size(), n);
      return 1;
    }
    std::vector<unsigned char> buf(64 + 8 * n);
    FPZ* w = fpzip_write_to_buffer(buf.data(), buf.size());
    w->type = FPZIP_TYPE_FLOAT;
    w->prec = c.prec;
    w->nx = c.nx;
    w->ny = c.ny;
    w->nz = c.nz;
    w->nf = c.nf;
    if (!fpzip_write_header(w)) {
      std::fprintf(stderr, "%s: header: %s\n", c.name.c_str(), fpzip_errstr[fpzip_errno]);
      return 1;
    }
    size_t size = fpzip_write(w, c.v.data());
    fpzip_write_close(w);
    if (!size) {
      std::fprintf(stderr, "%s: compress: %s\n", c.name.c_str(), fpzip_errstr[fpzip_errno]);
      return 1;
    }
    std::vector<float> out(n);
    FPZ* r = fpzip_read_from_buffer(buf.data());
    if (!fpzip_read_header(r) || r->nx != c.nx || r->ny != c.ny || r->nz != c.nz || r->nf != c.nf ||
        !fpzip_read(r, out.data())) {
      std::fprintf(stderr, "%s: decompress: %s\n", c.name.c_str(), fpzip_errstr[fpzip_errno]);
      return 1;
    }
    fpzip_read_close(r);
    if (c.prec == 0 && std::memcmp(out.data(), c.v.data(), 4 * n)) {
      std::fprintf(stderr, "%s: the reference library does not give back its input\n", c.name.c_str());
      return 1;
    }
    write_file(dir + "/" + c.name + ".in.f32", c.v.data(), 4 * n);
    write_file(dir + "/" + c.name + "." + MODE + ".fpz", buf.data(), size);
    write_file(dir + "/" + c.name + "." + MODE + ".out.f32", out.data(), 4 * n);
    std::printf("%s %s: %zu values, %zu bytes\n", MODE, c.name.c_str(), n, size);
  }
  // One double-precision stream, which the core's decoder refuses by name (XROR stores
  // single precision): NAME.MODE.fpz64, no expected values.
  {
    std::vector<double> d;
    for (int i = 0; i < 12; i++)
      d.push_back(0.5 * i - 1.0);
    std::vector<unsigned char> buf(64 + 16 * d.size());
    FPZ* w = fpzip_write_to_buffer(buf.data(), buf.size());
    w->type = FPZIP_TYPE_DOUBLE;
    w->prec = 0;
    w->nx = 4;
    w->ny = 3;
    w->nz = 1;
    w->nf = 1;
    size_t size = fpzip_write_header(w) ? fpzip_write(w, d.data()) : 0;
    fpzip_write_close(w);
    if (!size) {
      std::fprintf(stderr, "double: %s\n", fpzip_errstr[fpzip_errno]);
      return 1;
    }
    write_file(dir + "/double4x3." + MODE + ".fpz64", buf.data(), size);
  }
  return 0;
}
