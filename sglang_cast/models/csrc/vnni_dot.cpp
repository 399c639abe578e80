// Weight-only int4 and int8 GEMMs on AVX512-VNNI integer dot products, activations
// quantised to int8 per row and group of 32 inputs: bf16 activations [M, K] x packed
// weights [N, K] -> bf16 [M, N]; or fp32 -> fp32, the same bits (inputs rounded to bf16
// first, results rounded to bf16), which spares an fp32 model two casts per linear.
// Python side: models/vnni_dot.py.
//
// Why: torch's CPU int4 and int8 kernels multiply in floating point, re-widening their
// weights per block of 4 activation rows, so on a 2-core AVX-512 EPYC without AMX a verify
// of 16 tokens costs 3.4x a decode step (docs/results/2026-12-04_vnni_kernels_avx512.md).
// `vpdpbusd` does 64 multiply-adds of bytes per instruction (4 per fp32 lane of an FMA's
// 1), and int4 codes are already bytes once unpacked, so a weight group costs a few
// integer dot products per row plus one floating-point fix-up.  This is llama.cpp's
// Q4_1 x Q8_1 scheme: the activations of each row and group of 32 inputs are rounded to
// int8 with their own scale, sx = max|x| / 127, and each row's result depends on that row
// alone, whatever the row count.
//
// int4 layout (`vnni_dot.VnniInt4.pack`): blocks [N/64, K/32, 1280] uint8, one record per
//   block of 64 output columns (four 16-column tiles) and group of 32 inputs:
//   the codes of tiles 0-3, 256 bytes each: 4 loads of 64 bytes; byte 4c + q of load j holds
//     in its low nibble the code of (column c, input 8j + q) and in its high nibble that of
//     (column c, input 8j + 4 + q): masking and shifting give two `vpdpbusd` operands;
//   the fp16 scales of tiles 0-3, then their fp16 mins: 16 each (256 bytes);
//   w[n, k] = code * scale + min, codes in 0..15 (GGUF Q4_1's own form: w = d * q + m).
//   Per group: out[m, n] += sx[m] (scale[n] sum_k code xq[m, k] + min[n] sum_k xq[m, k]): the
//   min multiplies the rounded inputs' sum, not the exact one, so each weight meets the same
//   rounded input (llama.cpp's Q8_1 sum `s`).  With the exact sum the error of the rounded
//   inputs would meet code * scale alone, and with min ~ -8 scale (codes centred on 8) it would
//   not cancel: 9.7 % of top-1 tokens moved against fp32 instead of 4.6 %.
// int8 layout (`vnni_dot.VnniInt8.pack`): blocks [N/64, K/32, 2048] uint8, code + 128 per
//   byte: byte 64j + 4c + q of tile t's 512 is (column 16t + c, input 4j + q); scales [N] fp32.
//   Per group: out[m, n] += scale[n] sx[m] (sum_k (code + 128) xq[m, k] - 128 sum_k xq[m, k]).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

constexpr int kGroup = 32;     // inputs per record = one int4 scale group = one activation scale
constexpr int kTileCols = 16;  // output columns per tile = int32 lanes of one zmm
constexpr int kTiles = 4;      // tiles per record: 64 output columns
constexpr int kChunkRows = 4;  // activation rows sharing one unpacked weight operand
constexpr int kPrefetchRecords = 4;  // records ahead of the one in use fetched whole (1 or 2: int8 LM head 1.3-1.6x slower at one row)

// Each row of x rounded to int8 per group of 32 inputs (module header), with the group's
// scale and the sum of its int8 codes.
struct Quantized {
  std::vector<int8_t> q;      // [M, K]
  std::vector<float> scale;   // [M, G]: sx
  std::vector<int32_t> qsum;  // [M, G]: sum_k xq
};

inline __m512 load_bf16(const uint16_t* x) {
  return _mm512_cvtpbh_ps(reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))));
}

// 16 fp32 values rounded to bf16 and widened back: what `x.to(torch.bfloat16)` then the bf16
// load give, so fp32 inputs and outputs compute the same bits as the bf16 ones.
inline __m512 round_bf16(__m512 values) { return _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(values)); }
inline __m512 load_rounded(const float* x) { return round_bf16(_mm512_loadu_ps(x)); }
inline __m512 load_rounded(const uint16_t* x) { return load_bf16(x); }

template <typename In>
Quantized quantize_rows(const In* x, int64_t M, int64_t K) {
  const int64_t G = K / kGroup;
  Quantized out{std::vector<int8_t>(M * K), std::vector<float>(M * G), std::vector<int32_t>(M * G)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t at = m * K + g * kGroup;
      const __m512 lo = load_rounded(x + at), hi = load_rounded(x + at + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
      const float scale = amax / 127.0f;
      const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));  // round to nearest even
      const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q.data() + at), _mm512_cvtsepi32_epi8(qlo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q.data() + at + 16), _mm512_cvtsepi32_epi8(qhi));
      out.scale[m * G + g] = scale;
      out.qsum[m * G + g] = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
    }
  return out;
}

// Fetches the record `ahead` (the one to be read a few groups on) into L1, one line at a time.
inline void prefetch_record(const uint8_t* ahead, const uint8_t* end, int bytes) {
  if (ahead < end)
    for (int line = 0; line < bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
}

// Four int8 activations x[k .. k + 3], broadcast to every lane.
inline __m512i quad(const int8_t* x) { return _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x)); }

inline void store_rounded(uint16_t* out, __m512 values) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values)));
}
inline void store_rounded(float* out, __m512 values) { _mm512_storeu_ps(out, round_bf16(values)); }

inline __m512 half16(const uint8_t* at) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(at)));
}

template <typename Out>
struct Problem {
  const Quantized* x;
  const uint8_t* blocks;  // [N/64, G, record bytes]
  const float* scales;    // int8: [N]; int4: none (in the records)
  Out* out;               // [M, N]: bf16 bits or fp32 (rounded to bf16)
  int64_t K, N, G;
};

// ---- int4 ----

constexpr int kInt4CodeBytes = kTileCols * kGroup / 2;                          // one tile's codes: 256
constexpr int kInt4RecordBytes = kTiles * (kInt4CodeBytes + 2 * kTileCols * 2);  // + fp16 scales, mins: 1280

// Rows [row0, row0 + R) x block b's 64 columns.  Per group: each tile's codes unpack into
// 8 operands of 4 inputs per column, each multiplied with the R rows' matching int8
// activations into int32 sums, which the group's scales and min then fold into fp32.
template <int R, typename Out>
void int4_chunk(const Problem<Out>& p, int64_t row0, int64_t b) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R][kTiles];
  for (int m = 0; m < R; ++m)
    for (int t = 0; t < kTiles; ++t) acc[m][t] = _mm512_setzero_ps();
  const int8_t* xq = p.x->q.data() + row0 * p.K;
  const uint8_t* records = p.blocks + b * p.G * kInt4RecordBytes;
  for (int64_t g = 0; g < p.G; ++g) {
    const uint8_t* record = records + g * kInt4RecordBytes;
    prefetch_record(record + kPrefetchRecords * kInt4RecordBytes, records + p.G * kInt4RecordBytes, kInt4RecordBytes);
    __m512i c[R][kTiles];
    for (int m = 0; m < R; ++m)
      for (int t = 0; t < kTiles; ++t) c[m][t] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      __m512i low[kTiles], high[kTiles];
      for (int t = 0; t < kTiles; ++t) {
        const __m512i packed = _mm512_load_si512(record + t * kInt4CodeBytes + j * 64);
        low[t] = _mm512_and_si512(packed, low4);
        high[t] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
      }
      const int64_t k = g * kGroup + 8 * j;
      for (int m = 0; m < R; ++m) {
        const __m512i x_low = quad(xq + m * p.K + k), x_high = quad(xq + m * p.K + k + 4);
        for (int t = 0; t < kTiles; ++t) c[m][t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c[m][t], low[t], x_low), high[t], x_high);
      }
    }
    const uint8_t* meta = record + kTiles * kInt4CodeBytes;
    for (int t = 0; t < kTiles; ++t) {
      const __m512 scale = half16(meta + t * 32), min = half16(meta + (kTiles + t) * 32);
      for (int m = 0; m < R; ++m) {
        const int64_t mg = (row0 + m) * p.G + g;
        const __m512 sx = _mm512_set1_ps(p.x->scale[mg]);
        const __m512 dot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[m][t]), scale,
                                           _mm512_mul_ps(_mm512_set1_ps(float(p.x->qsum[mg])), min));
        acc[m][t] = _mm512_fmadd_ps(dot, sx, acc[m][t]);
      }
    }
  }
  for (int m = 0; m < R; ++m)
    for (int t = 0; t < kTiles; ++t) store_rounded(p.out + (row0 + m) * p.N + (b * kTiles + t) * kTileCols, acc[m][t]);
}

// ---- int8 ----

constexpr int kInt8TileBytes = kTileCols * kGroup;        // one tile's codes: 512
constexpr int kInt8RecordBytes = kTiles * kInt8TileBytes;  // 2048

// Rows [row0, row0 + R) x block b's 64 columns: per group, 8 dot products of 4 inputs per
// column and row, the +128 offset taken out with the row's int8 sum, the activation scale
// applied; the weight scale once at the end.
template <int R, typename Out>
void int8_chunk(const Problem<Out>& p, int64_t row0, int64_t b) {
  __m512 acc[R][kTiles];
  for (int m = 0; m < R; ++m)
    for (int t = 0; t < kTiles; ++t) acc[m][t] = _mm512_setzero_ps();
  const int8_t* xq = p.x->q.data() + row0 * p.K;
  const uint8_t* records = p.blocks + b * p.G * kInt8RecordBytes;
  for (int64_t g = 0; g < p.G; ++g) {
    const uint8_t* record = records + g * kInt8RecordBytes;
    prefetch_record(record + kPrefetchRecords * kInt8RecordBytes, records + p.G * kInt8RecordBytes, kInt8RecordBytes);
    __m512i c[R][kTiles];
    for (int m = 0; m < R; ++m)
      for (int t = 0; t < kTiles; ++t) c[m][t] = _mm512_setzero_si512();
    for (int j = 0; j < kGroup / 4; ++j) {
      __m512i w[kTiles];
      for (int t = 0; t < kTiles; ++t) w[t] = _mm512_load_si512(record + t * kInt8TileBytes + j * 64);
      const int64_t k = g * kGroup + 4 * j;
      for (int m = 0; m < R; ++m) {
        const __m512i xs = quad(xq + m * p.K + k);
        for (int t = 0; t < kTiles; ++t) c[m][t] = _mm512_dpbusd_epi32(c[m][t], w[t], xs);
      }
    }
    for (int m = 0; m < R; ++m) {
      const int64_t mg = (row0 + m) * p.G + g;
      const __m512i offset = _mm512_set1_epi32(128 * p.x->qsum[mg]);
      const __m512 scale = _mm512_set1_ps(p.x->scale[mg]);
      for (int t = 0; t < kTiles; ++t)
        acc[m][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c[m][t], offset)), scale, acc[m][t]);
    }
  }
  for (int t = 0; t < kTiles; ++t) {
    const __m512 scale = _mm512_loadu_ps(p.scales + (b * kTiles + t) * kTileCols);
    for (int m = 0; m < R; ++m)
      store_rounded(p.out + (row0 + m) * p.N + (b * kTiles + t) * kTileCols, _mm512_mul_ps(acc[m][t], scale));
  }
}

// ---- entry points ----

void check_inputs(const char* op, const at::Tensor& x, const at::Tensor& blocks, int64_t record_bytes) {
  TORCH_CHECK((x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat) && x.dim() == 2 && x.is_contiguous(),
              op, ": x must be a contiguous bf16 or fp32 [M, K] tensor");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 3 && blocks.size(2) == record_bytes &&
                  blocks.is_contiguous() && reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 64 == 0,
              op, ": blocks must be contiguous, 64-byte aligned uint8 [N/64, K/32, ", record_bytes, "]");
  TORCH_CHECK(x.size(1) == blocks.size(1) * kGroup, op, ": x has ", x.size(1), " inputs but the weights ",
              blocks.size(1) * kGroup);
}

template <int R> struct Int4Chunk {
  template <typename Out> static void run(const Problem<Out>& p, int64_t row0, int64_t b) { int4_chunk<R>(p, row0, b); }
};
template <int R> struct Int8Chunk {
  template <typename Out> static void run(const Problem<Out>& p, int64_t row0, int64_t b) { int8_chunk<R>(p, row0, b); }
};

// Quantises x, then runs Chunk<R>(row0, b) over every chunk of up to kChunkRows rows (the
// last one shorter) and every block of 64 columns, the blocks split across threads.  In and
// Out: uint16_t (bf16 bits) or float, x's dtype either way.
template <template <int> class Chunk, typename In, typename Out>
void run_typed(const at::Tensor& x, const at::Tensor& blocks, const float* scales, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), G = blocks.size(1), N = out.size(1);
  const Quantized xq = quantize_rows(reinterpret_cast<const In*>(x.data_ptr()), M, K);
  const Problem<Out> p{&xq, blocks.data_ptr<uint8_t>(), scales, reinterpret_cast<Out*>(out.data_ptr()), K, N, G};
  at::parallel_for(0, blocks.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t row0 = 0; row0 < M; row0 += kChunkRows) {
        switch (std::min<int64_t>(kChunkRows, M - row0)) {
          case 1: Chunk<1>::run(p, row0, b); break;
          case 2: Chunk<2>::run(p, row0, b); break;
          case 3: Chunk<3>::run(p, row0, b); break;
          default: Chunk<4>::run(p, row0, b); break;
        }
      }
  });
}

// bf16 x -> bf16 out; fp32 x -> fp32 out with the same bits widened (x rounded to bf16 first,
// the result rounded to bf16): an fp32 model calls the kernel without two casts per linear.
template <template <int> class Chunk>
at::Tensor run(const at::Tensor& x, const at::Tensor& blocks, const float* scales) {
  const int64_t M = x.size(0), N = blocks.size(0) * kTiles * kTileCols;
  at::Tensor out = at::empty({M, N}, x.options());
  if (M == 0) return out;
  if (x.scalar_type() == at::kFloat)
    run_typed<Chunk, float, float>(x, blocks, scales, out);
  else
    run_typed<Chunk, uint16_t, uint16_t>(x, blocks, scales, out);
  return out;
}

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& blocks) {
  check_inputs("int4_mm", x, blocks, kInt4RecordBytes);
  return run<Int4Chunk>(x, blocks, nullptr);
}

at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& blocks, const at::Tensor& scales) {
  check_inputs("int8_mm", x, blocks, kInt8RecordBytes);
  const int64_t N = blocks.size(0) * kTiles * kTileCols;
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.dim() == 1 && scales.size(0) == N && scales.is_contiguous(),
              "int8_mm: scales must be a contiguous fp32 [", N, "] tensor");
  return run<Int8Chunk>(x, blocks, scales.data_ptr<float>());
}

}  // namespace

TORCH_LIBRARY(sglang_cast_vnni, m) {
  m.def("int4_mm(Tensor x, Tensor blocks) -> Tensor");
  m.def("int8_mm(Tensor x, Tensor blocks, Tensor scales) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cast_vnni, CPU, m) {
  m.impl("int4_mm", &int4_mm);
  m.impl("int8_mm", &int8_mm);
}
