// Weight-only int4 and int8 GEMMs on AMX tiles: bf16 activations [M, K] x packed weights
// [N, K] -> bf16 [M, N].  Python side: models/amx_tiles.py.
//
// Why: torch's CPU int4 and int8 kernels (`_weight_int4pack_mm_for_cpu`,
// `_weight_int8pack_mm`) dequantise their weights once per block of 4 activation rows, so a
// verify of 5-8 tokens costs what two decode steps' linears cost, 9-12 three
// (docs/precision.md).  Here each 16 x 32 block of weights is widened once into an AMX B
// tile and multiplied with up to 16 rows in one `tdpbf16ps`, so the cost barely grows with
// the rows.  Both kernels stream one record per block of four 16-column tiles (64 output
// columns) and group of 32 inputs, in the order they read them, so each thread reads one
// contiguous run of memory.
//
// int4 layout (`amx_tiles.TiledInt4.pack`): blocks [N/64, K/32, 1280] uint8, a record being
//   the codes of tiles 0-3, 256 bytes each: 4 loads of 32 16-bit lanes; lane j of load i
//           holds in nibble r the code of (column j/2, input 8i + 2r + j%2), so shifting
//           a load by 4r and masking gives row 4i + r of the B tile in AMX's VNNI order
//           (a pair of inputs per column);
//   the fp16 scales of tiles 0-3, then their fp16 mins: 16 each (256 bytes);
//   w[n, k] = code * scale + min, codes in 0..15 (GGUF Q4_1's own form: w = d * q + m).
// int4 math per group of 32 inputs: the tile multiplies the bf16 numbers 128 + code (made by
// OR-ing the code into 0x4300's mantissa, no table needed) with the activations, so
//   out[m, n] += scale[n] * sum_k (128 + code) x[m, k] + (min[n] - 128 scale[n]) * sum_k x[m, k].
// 128 + code is exact in bf16 and its products with bf16 activations exact in fp32; the
// offset costs ~7 of fp32's 24 bits in the sum, far below the bf16 output's rounding.
//
// int8 layout (`amx_tiles.TiledInt8.pack`): blocks [N/64, K/32, 2048] int8, a record being
// the codes of tiles 0-3, 512 bytes each, already in VNNI order: byte 32r + 2c + p is the
// code of (column c, input 2r + p).  Scales are one fp32 per output column, [N].
// int8 math: codes in -127..127 are exact in bf16, so the C tiles accumulate
// sum_k code x[m, k] over all of K with no per-group fixup, and the scale multiplies once.
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

constexpr int kGroup = 32;        // inputs per B tile (16 VNNI pairs) = one int4 scale group
constexpr int kTileCols = 16;     // output columns per tile
constexpr int kMaxRows = 16;      // activation rows per A tile
constexpr int kTilesPerBlock = 4; // column tiles sharing one A tile load
constexpr int kPrefetchRecords = 2;  // how far ahead of the record in use its successors are fetched
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

bool request_tile_permission() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTiledata) == 0;
  return granted;
}

using BTiles = uint16_t[kTilesPerBlock][kTileCols * kGroup];  // four B tile images, bf16 bits

// C tiles 0-3 += A (rows of x at inputs [k0, k0 + 32)) x the four B tile images.
inline void multiply_group(const uint16_t* x, int64_t k0, int64_t K, const BTiles& b_tiles) {
  _tile_loadd(4, x + k0, K * 2);
  _tile_loadd(5, b_tiles[0], 64);
  _tile_loadd(6, b_tiles[1], 64);
  _tile_loadd(7, b_tiles[2], 64);
  _tile_dpbf16ps(0, 4, 5);
  _tile_dpbf16ps(1, 4, 6);
  _tile_dpbf16ps(2, 4, 7);
  _tile_loadd(5, b_tiles[3], 64);
  _tile_dpbf16ps(3, 4, 5);
}

inline void zero_c_tiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

inline void store_c_tiles(float (&c_tiles)[kTilesPerBlock][kMaxRows * kTileCols]) {
  _tile_stored(0, c_tiles[0], 64);
  _tile_stored(1, c_tiles[1], 64);
  _tile_stored(2, c_tiles[2], 64);
  _tile_stored(3, c_tiles[3], 64);
}

inline void prefetch_record(const uint8_t* ahead, const uint8_t* end, int bytes) {
  if (ahead < end)
    for (int line = 0; line < bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
}

// The output rows [row0, row0 + rows) of one block's 64 columns from fp32 accumulators.
inline void store_block(const float (&acc)[kTilesPerBlock][kMaxRows * kTileCols], uint16_t* out, int64_t N,
                        int64_t row0, int rows, int64_t b) {
  for (int t = 0; t < kTilesPerBlock; ++t)
    for (int m = 0; m < rows; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (row0 + m) * N + (b * kTilesPerBlock + t) * kTileCols),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_load_ps(acc[t] + m * 16))));
}

// ---- int4 ----

constexpr int kInt4CodeBytes = kTileCols * kGroup / 2;                                    // one tile's codes: 256
constexpr int kInt4RecordBytes = kTilesPerBlock * (kInt4CodeBytes + 2 * kTileCols * 2);  // + fp16 scales, mins: 1280
constexpr float kBias = 128.0f;  // bf16 bits 0x4300 | code = 128 + code, exactly

// One tile's codes of one group (4 loads of 64 bytes) into a B tile image: 16 rows of 64
// bytes.  Lane j of load i holds four codes, row 4i + r in nibble r; OR-ing a nibble into
// 0x4300 makes the bf16 number 128 + code with no table and no shuffle.
inline void widen_int4(const uint8_t* codes, uint16_t* tile) {
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

struct Int4Problem {
  const uint16_t* x;      // [M, K] bf16 bits
  const uint8_t* blocks;  // [N/64, G, 1280]
  const float* row_sums;  // [M, G]: sum of each row's inputs per group
  uint16_t* out;          // [M, N] bf16 bits
  int64_t K, N, G;
};

// Rows [row0, row0 + rows) x the four column tiles of block b: every group's weights are
// widened once, multiplied on the tiles, then scaled into fp32 accumulators (the scale
// changes per group, so the C tiles go through memory once per group).
void int4_block(const Int4Problem& p, int64_t row0, int rows, int64_t b) {
  alignas(64) BTiles b_tiles;
  alignas(64) float c_tiles[kTilesPerBlock][kMaxRows * kTileCols];
  alignas(64) float acc[kTilesPerBlock][kMaxRows * kTileCols] = {};
  const uint16_t* x = p.x + row0 * p.K;
  const float* row_sums = p.row_sums + row0 * p.G;
  const uint8_t* records = p.blocks + b * p.G * kInt4RecordBytes;
  const uint8_t* end = records + p.G * kInt4RecordBytes;
  for (int64_t g = 0; g < p.G; ++g) {
    const uint8_t* record = records + g * kInt4RecordBytes;
    prefetch_record(record + kPrefetchRecords * kInt4RecordBytes, end, kInt4RecordBytes);
    for (int t = 0; t < kTilesPerBlock; ++t) widen_int4(record + t * kInt4CodeBytes, b_tiles[t]);
    zero_c_tiles();
    multiply_group(x, g * kGroup, p.K, b_tiles);
    store_c_tiles(c_tiles);
    const uint8_t* meta = record + kTilesPerBlock * kInt4CodeBytes;
    for (int t = 0; t < kTilesPerBlock; ++t) {
      const __m512 scale = half16(meta + t * 32);
      const __m512 offset = _mm512_fnmadd_ps(_mm512_set1_ps(kBias), scale, half16(meta + (kTilesPerBlock + t) * 32));
      for (int m = 0; m < rows; ++m) {
        __m512 sum = _mm512_fmadd_ps(_mm512_load_ps(c_tiles[t] + m * 16), scale, _mm512_load_ps(acc[t] + m * 16));
        _mm512_store_ps(acc[t] + m * 16, _mm512_fmadd_ps(_mm512_set1_ps(row_sums[m * p.G + g]), offset, sum));
      }
    }
  }
  store_block(acc, p.out, p.N, row0, rows, b);
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

// ---- int8 ----

constexpr int kInt8TileBytes = kTileCols * kGroup;                  // one tile's codes: 512
constexpr int kInt8RecordBytes = kTilesPerBlock * kInt8TileBytes;  // 2048

// One tile's codes (16 rows of 32 int8, VNNI order) into a B tile image: each int8 widened
// to the bf16 number it is (exact: |code| <= 127 < 2^8).
inline void widen_int8(const int8_t* codes, uint16_t* tile) {
  for (int r = 0; r < kGroup / 2; ++r) {
    const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + r * 32))));
    const __m512 high = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + r * 32 + 16))));
    _mm512_store_si512(tile + r * 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low)));
  }
}

struct Int8Problem {
  const uint16_t* x;     // [M, K] bf16 bits
  const int8_t* blocks;  // [N/64, G, 2048]
  const float* scales;   // [N]
  uint16_t* out;         // [M, N] bf16 bits
  int64_t K, N, G;
};

// Rows [row0, row0 + rows) x the four column tiles of block b: the C tiles accumulate over
// all of K (one scale per column), then go through memory once to be scaled.
void int8_block(const Int8Problem& p, int64_t row0, int rows, int64_t b) {
  alignas(64) BTiles b_tiles;
  alignas(64) float c_tiles[kTilesPerBlock][kMaxRows * kTileCols];
  const uint16_t* x = p.x + row0 * p.K;
  const int8_t* records = p.blocks + b * p.G * kInt8RecordBytes;
  const uint8_t* end = reinterpret_cast<const uint8_t*>(records + p.G * kInt8RecordBytes);
  zero_c_tiles();
  for (int64_t g = 0; g < p.G; ++g) {
    const int8_t* record = records + g * kInt8RecordBytes;
    prefetch_record(reinterpret_cast<const uint8_t*>(record + kPrefetchRecords * kInt8RecordBytes), end, kInt8RecordBytes);
    for (int t = 0; t < kTilesPerBlock; ++t) widen_int8(record + t * kInt8TileBytes, b_tiles[t]);
    multiply_group(x, g * kGroup, p.K, b_tiles);
  }
  store_c_tiles(c_tiles);
  for (int t = 0; t < kTilesPerBlock; ++t) {
    const __m512 scale = _mm512_loadu_ps(p.scales + (b * kTilesPerBlock + t) * kTileCols);
    for (int m = 0; m < rows; ++m)
      _mm512_store_ps(c_tiles[t] + m * 16, _mm512_mul_ps(_mm512_load_ps(c_tiles[t] + m * 16), scale));
  }
  store_block(c_tiles, p.out, p.N, row0, rows, b);
}

// ---- entry points ----

// The checks both ops share.
void check_inputs(const char* op, const at::Tensor& x, const at::Tensor& blocks, at::ScalarType block_type,
                  int64_t record_bytes) {
  TORCH_CHECK(request_tile_permission(), op, ": the kernel refused this process the AMX tile state");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.is_contiguous(),
              op, ": x must be a contiguous bf16 [M, K] tensor");
  TORCH_CHECK(blocks.scalar_type() == block_type && blocks.dim() == 3 && blocks.size(2) == record_bytes &&
                  blocks.is_contiguous() && reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 64 == 0,
              op, ": blocks must be contiguous, 64-byte aligned [N/64, K/32, ", record_bytes, "] of ", block_type);
  TORCH_CHECK(x.size(1) == blocks.size(1) * kGroup, op, ": x has ", x.size(1), " inputs but the weights ",
              blocks.size(1) * kGroup);
}

// Runs block(row0, rows, b) over every chunk of up to 16 rows and every block of 64 columns,
// the blocks split across threads (tile state is per thread).
template <typename Block>
void for_each_block(int64_t M, int64_t num_blocks, const Block& block) {
  for (int64_t row0 = 0; row0 < M; row0 += kMaxRows) {
    const int rows = int(std::min<int64_t>(kMaxRows, M - row0));
    at::parallel_for(0, num_blocks, 1, [&](int64_t begin, int64_t end) {
      configure_tiles(rows);
      for (int64_t b = begin; b < end; ++b) block(row0, rows, b);
      _tile_release();
    });
  }
}

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& blocks) {
  check_inputs("int4_mm", x, blocks, at::kByte, kInt4RecordBytes);
  const int64_t M = x.size(0), K = x.size(1), G = blocks.size(1), N = blocks.size(0) * kTilesPerBlock * kTileCols;
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0) return out;
  const uint16_t* x_bits = reinterpret_cast<const uint16_t*>(x.data_ptr());
  const std::vector<float> sums = group_sums(x_bits, M, K);
  const Int4Problem p{x_bits, blocks.data_ptr<uint8_t>(), sums.data(), reinterpret_cast<uint16_t*>(out.data_ptr()), K, N, G};
  for_each_block(M, blocks.size(0), [&](int64_t row0, int rows, int64_t b) { int4_block(p, row0, rows, b); });
  return out;
}

at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& scales) {
  check_inputs("int8_mm", x, blocks, at::kChar, kInt8RecordBytes);
  const int64_t M = x.size(0), K = x.size(1), G = blocks.size(1), N = blocks.size(0) * kTilesPerBlock * kTileCols;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.dim() == 1 && scales.size(0) == N && scales.is_contiguous(),
              "int8_mm: scales must be a contiguous fp32 [", N, "] tensor");
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0) return out;
  const Int8Problem p{reinterpret_cast<const uint16_t*>(x.data_ptr()), blocks.data_ptr<int8_t>(),
                      scales.data_ptr<float>(), reinterpret_cast<uint16_t*>(out.data_ptr()), K, N, G};
  for_each_block(M, blocks.size(0), [&](int64_t row0, int rows, int64_t b) { int8_block(p, row0, rows, b); });
  return out;
}

}  // namespace

TORCH_LIBRARY(sglang_cast_amx, m) {
  m.def("int4_mm(Tensor x, Tensor blocks) -> Tensor");
  m.def("int8_mm(Tensor x, Tensor blocks, Tensor scales) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cast_amx, CPU, m) {
  m.impl("int4_mm", &int4_mm);
  m.impl("int8_mm", &int8_mm);
}
