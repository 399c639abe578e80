// Weight-only int4 GEMM on AMX tiles: bf16 activations [M, K] x int4 weights [N, K] -> bf16 [M, N].
//
// Why: torch's CPU int4 kernel (`_weight_int4pack_mm_for_cpu`) dequantises its weights
// once per block of 4 activation rows, so a verify of 5-8 tokens costs what two decode
// steps' linears cost, 9-12 three (docs/precision.md).  Here each 16 x 32 block of
// weights is dequantised once into an AMX B tile and multiplied with up to 16 rows in one
// `tdpbf16ps`, so the cost barely grows with the rows.  Python side: models/int4_tiles.py.
//
// Layout (`int4_tiles.TiledInt4.pack` writes it): one record per block of four 16-column
// tiles and group of 32 inputs, in the order the kernel reads them, so each thread streams
// one contiguous run of memory: blocks [N/64, K/32, 1280] uint8, a record being
//   the codes of tiles 0-3, 256 bytes each: 4 loads of 32 16-bit lanes; lane j of load i
//           holds in nibble r the code of (column j/2, input 8i + 2r + j%2), so shifting
//           a load by 4r and masking gives row 4i + r of the B tile in AMX's VNNI order
//           (a pair of inputs per column);
//   the fp16 scales of tiles 0-3, then their fp16 mins: 16 each (256 bytes);
//   w[n, k] = code * scale + min, codes in 0..15 (GGUF Q4_1's own form: w = d * q + m).
//
// Math per group of 32 inputs: the tile multiplies the bf16 numbers 128 + code (made by
// OR-ing the code into 0x4300's mantissa, no table needed) with the activations, so
//   out[m, n] += scale[n] * sum_k (128 + code) x[m, k] + (min[n] - 128 scale[n]) * sum_k x[m, k].
// 128 + code is exact in bf16 and its products with bf16 activations exact in fp32; the
// offset costs ~7 of fp32's 24 bits in the sum, far below the bf16 output's rounding.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

constexpr int kGroup = 32;        // inputs per scale/zero group = one B tile's k extent
constexpr int kTileCols = 16;     // output columns per tile
constexpr int kMaxRows = 16;      // activation rows per A tile
constexpr int kTilesPerBlock = 4; // column tiles sharing one A tile load
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureTiledata = 18;

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tile registers: 0-3 = C (rows x 16 fp32) of the block's four column tiles; 4 = A
// (rows x 32 bf16); 5-7 = B (16 k-pairs x 16 columns x 2 bf16), the fourth reusing 5.
void configure_tiles(int rows) {
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t : {0, 1, 2, 3, 4}) { cfg.rows[t] = rows; cfg.colsb[t] = 64; }
  for (int t : {5, 6, 7}) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
}

constexpr int kCodeBytes = kTileCols * kGroup / 2;                                  // one tile's codes per group: 256
constexpr int kRecordBytes = kTilesPerBlock * (kCodeBytes + 2 * kTileCols * 2);  // + fp16 scales and mins: 1280
constexpr int kPrefetchRecords = 2;  // how far ahead of the record in use its successors are fetched
constexpr float kBias = 128.0f;      // bf16 bits 0x4300 | code = 128 + code, exactly

// One tile's codes of one group (4 loads of 64 bytes) into a B tile image: 16 rows of 64
// bytes.  Lane j of load i holds four codes, row 4i + r in nibble r; OR-ing a nibble into
// 0x4300 makes the bf16 number 128 + code with no table and no shuffle.
inline void dequantise_group(const uint8_t* codes, uint16_t* tile) {
  const __m512i low4 = _mm512_set1_epi16(0x000F), bias = _mm512_set1_epi16(0x4300);
  for (int i = 0; i < 4; ++i) {
    const __m512i packed = _mm512_load_si512(codes + i * 64);
    for (int r = 0; r < 4; ++r) {  // (packed >> 4r) & 0xF | 0x4300: ternary-logic 0xEA is (a & b) | c
      const __m512i shifted = r == 0 ? packed : _mm512_srli_epi16(packed, 4 * r);
      _mm512_store_si512(tile + (4 * i + r) * 32, _mm512_ternarylogic_epi32(shifted, low4, bias, 0xEA));
    }
  }
}

inline __m512 half16(const uint8_t* at) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(at)));
}

struct Problem {
  const uint16_t* x;      // [M, K] bf16 bits
  const uint8_t* blocks;  // [N/64, G, 1280]
  const float* row_sums;  // [M, G]: sum of each row's inputs per group
  uint16_t* out;          // [M, N] bf16 bits
  int64_t K, N, G;
};

// Rows [row0, row0 + rows) x the four column tiles of block b: every group's weights are
// dequantised once, multiplied on the tiles, then scaled into fp32 accumulators.
void block(const Problem& p, int64_t row0, int rows, int64_t b) {
  alignas(64) uint16_t b_tiles[kTilesPerBlock][16 * 32];
  alignas(64) float c_tiles[kTilesPerBlock][kMaxRows * kTileCols];
  alignas(64) float acc[kTilesPerBlock][kMaxRows * kTileCols] = {};
  const uint16_t* x = p.x + row0 * p.K;
  const float* row_sums = p.row_sums + row0 * p.G;
  const uint8_t* records = p.blocks + b * p.G * kRecordBytes;
  const uint8_t* end = records + p.G * kRecordBytes;
  for (int64_t g = 0; g < p.G; ++g) {
    const uint8_t* record = records + g * kRecordBytes;
    const uint8_t* ahead = record + kPrefetchRecords * kRecordBytes;
    if (ahead < end)
      for (int line = 0; line < kRecordBytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
    for (int t = 0; t < kTilesPerBlock; ++t) dequantise_group(record + t * kCodeBytes, b_tiles[t]);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, x + g * kGroup, p.K * 2);
    _tile_loadd(5, b_tiles[0], 64);
    _tile_loadd(6, b_tiles[1], 64);
    _tile_loadd(7, b_tiles[2], 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, b_tiles[3], 64);
    _tile_dpbf16ps(3, 4, 5);
    _tile_stored(0, c_tiles[0], 64);
    _tile_stored(1, c_tiles[1], 64);
    _tile_stored(2, c_tiles[2], 64);
    _tile_stored(3, c_tiles[3], 64);
    const uint8_t* meta = record + kTilesPerBlock * kCodeBytes;
    for (int t = 0; t < kTilesPerBlock; ++t) {
      const __m512 scale = half16(meta + t * 32);
      const __m512 offset = _mm512_fnmadd_ps(_mm512_set1_ps(kBias), scale, half16(meta + (kTilesPerBlock + t) * 32));
      for (int m = 0; m < rows; ++m) {
        __m512 sum = _mm512_fmadd_ps(_mm512_load_ps(c_tiles[t] + m * 16), scale, _mm512_load_ps(acc[t] + m * 16));
        _mm512_store_ps(acc[t] + m * 16, _mm512_fmadd_ps(_mm512_set1_ps(row_sums[m * p.G + g]), offset, sum));
      }
    }
  }
  for (int t = 0; t < kTilesPerBlock; ++t)
    for (int m = 0; m < rows; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.out + (row0 + m) * p.N + (b * kTilesPerBlock + t) * kTileCols),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(acc[t] + m * 16))));
}

// Sum of each row's inputs per group of 32, fp32 [M, G].
std::vector<float> group_sums(const uint16_t* x, int64_t M, int64_t K) {
  const int64_t G = K / kGroup;
  std::vector<float> sums(M * G);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      const uint16_t* at = x + m * K + g * kGroup;
      __m512 lo = _mm512_cvtpbh_ps(reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at))));
      __m512 hi = _mm512_cvtpbh_ps(reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 16))));
      sums[m * G + g] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
    }
  return sums;
}

bool request_tile_permission() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTiledata) == 0;
  return granted;
}

at::Tensor int4_tiles_mm(const at::Tensor& x, const at::Tensor& blocks) {
  TORCH_CHECK(request_tile_permission(), "int4_tiles_mm: the kernel refused this process the AMX tile state");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.is_contiguous(),
              "int4_tiles_mm: x must be a contiguous bf16 [M, K] tensor");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 3 && blocks.size(2) == kRecordBytes &&
                  blocks.is_contiguous() && reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 64 == 0,
              "int4_tiles_mm: blocks must be contiguous, 64-byte aligned uint8 [N/64, K/32, 1280]");
  const int64_t M = x.size(0), K = x.size(1), G = blocks.size(1), N = blocks.size(0) * kTilesPerBlock * kTileCols;
  TORCH_CHECK(K == G * kGroup, "int4_tiles_mm: x has ", K, " inputs but the weights ", G * kGroup);
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0) return out;
  const uint16_t* x_bits = reinterpret_cast<const uint16_t*>(x.data_ptr());
  const std::vector<float> sums = group_sums(x_bits, M, K);
  const Problem p{x_bits, blocks.data_ptr<uint8_t>(), sums.data(), reinterpret_cast<uint16_t*>(out.data_ptr()), K, N, G};
  for (int64_t row0 = 0; row0 < M; row0 += kMaxRows) {
    const int rows = int(std::min<int64_t>(kMaxRows, M - row0));
    at::parallel_for(0, blocks.size(0), 1, [&](int64_t begin, int64_t end) {
      configure_tiles(rows);  // tile state is per thread
      for (int64_t b = begin; b < end; ++b) block(p, row0, rows, b);
      _tile_release();
    });
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(sglang_cast_int4, m) {
  m.def("tiles_mm(Tensor x, Tensor blocks) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cast_int4, CPU, m) { m.impl("tiles_mm", &int4_tiles_mm); }
