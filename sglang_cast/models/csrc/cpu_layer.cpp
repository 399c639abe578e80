// A decoder layer's work between its linears, as four CPU ops: RMSNorm, the residual add
// with the next RMSNorm, SwiGLU's silu(gate) * up, and RoPE + the KV-cache write + tree
// attention; and two for a step's reads of logits: the greedy token of each row (the
// target's verify) and each row's top-k children (a draft layer).  Python side:
// models/cpu_layer.py.
//
// Why: at batch 1 a layer's eager torch ops between the linears (~35 small kernels: norms,
// RoPE, views, cache copies, SDPA, casts) cost more than its linears on a 2-core CPU
// (docs/results/2026-12-04_cpu_layer_avx512.md).  These ops do the same math in one call
// each.
//
// Row independence: every output row is computed from its own inputs alone, in an order
// that does not depend on how many rows share the call; attention gives each query's
// visible keys (committed prefix, its ancestors in the scratch region, itself) the same
// sums in cache order wherever they sit, so a verify row and the one-token step that
// commits the same path give the same bits (`attend_block`).
//
// Written on ATen's `Vectorized<float>` (16 lanes with the AVX-512 build models/cpu_layer.py
// makes), whose exp is torch's own (Sleef), so silu and softmax cost what torch's do.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int kLanes = Vec::size();  // every width here is a multiple of it (models/cpu_layer.py: VECTOR)

// sum_i a[i] * b[i] over n, in kLanes partial sums reduced in a fixed order.
inline float dot(const float* a, const float* b, int64_t n) {
  Vec part(0.0f);
  for (int64_t i = 0; i < n; i += kLanes) part = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), part);
  return part.reduce_add();
}

// out = x * w / sqrt(mean(x^2) + eps) for one row of n values.
inline void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  const Vec inverse(1.0f / std::sqrt(dot(x, x, n) / float(n) + eps));
  for (int64_t i = 0; i < n; i += kLanes) (Vec::loadu(x + i) * Vec::loadu(w + i) * inverse).store(out + i);
}

void check_rows(const char* op, const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous(), op, ": ", name,
              " must be a contiguous fp32 [T, D] tensor");
  TORCH_CHECK(x.size(1) % kLanes == 0, op, ": ", name, "'s width ", x.size(1), " must be a multiple of ", kLanes);
}

void check_weight(const char* op, const at::Tensor& w, int64_t width) {
  TORCH_CHECK(w.scalar_type() == at::kFloat && w.dim() == 1 && w.size(0) == width && w.is_contiguous(), op,
              ": weight must be a contiguous fp32 [", width, "] tensor");
}

// ---- entry points ----

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows("rms_norm", x, "x");
  const int64_t T = x.size(0), D = x.size(1);
  check_weight("rms_norm", weight, D);
  at::Tensor out = at::empty_like(x);
  const float *xs = x.data_ptr<float>(), *w = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t) rms_norm_row(xs + t * D, w, float(eps), D, o + t * D);
  return out;
}

// h = x + delta (a new tensor: x is the layer's input, which its caller keeps) and
// RMSNorm(h): the attention block's residual and the MLP's input in one pass.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta,
                                               const at::Tensor& weight, double eps) {
  check_rows("add_rms_norm", x, "x");
  check_rows("add_rms_norm", delta, "delta");
  TORCH_CHECK(x.sizes() == delta.sizes(), "add_rms_norm: x ", x.sizes(), " and delta ", delta.sizes(), " differ");
  const int64_t T = x.size(0), D = x.size(1);
  check_weight("add_rms_norm", weight, D);
  at::Tensor h = at::empty_like(x), normed = at::empty_like(x);
  const float *xs = x.data_ptr<float>(), *ds = delta.data_ptr<float>(), *w = weight.data_ptr<float>();
  float *hs = h.data_ptr<float>(), *ns = normed.data_ptr<float>();
  for (int64_t i = 0; i < T * D; i += kLanes) (Vec::loadu(xs + i) + Vec::loadu(ds + i)).store(hs + i);
  for (int64_t t = 0; t < T; ++t) rms_norm_row(hs + t * D, w, float(eps), D, ns + t * D);
  return {h, normed};
}

// [T, 2I] gate | up -> [T, I] silu(gate) * up.
at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_rows("silu_mul", gate_up, "gate_up");
  const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  at::Tensor out = at::empty({T, I}, gate_up.options());
  const float* g = gate_up.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const Vec one(1.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; i += kLanes) {
      const Vec gate = Vec::loadu(g + t * 2 * I + i), up = Vec::loadu(g + t * 2 * I + I + i);
      (gate / (one + gate.neg().exp()) * up).store(o + t * I + i);
    }
  return out;
}

// Rotates one head's D values: out[d] = x[d] cos[d] + x[(d + D/2) mod D] sin[d], with ``sin``
// sign-folded ([-sin, sin] over the two halves, `llama.rope_cos_sin`).
inline void rope(const float* x, const float* cos, const float* sin, int64_t D, float* out) {
  const int64_t half = D / 2;
  for (int64_t d = 0; d < D; d += kLanes) {
    const Vec rolled = Vec::loadu(x + (d < half ? d + half : d - half));
    (Vec::loadu(x + d) * Vec::loadu(cos + d) + rolled * Vec::loadu(sin + d)).store(out + d);
  }
}

struct Attention {
  const float* q;       // [T, H, D] rotated queries
  const float* k;       // the layer's [S, KV, C, D] keys
  const float* v;       // values, the same layout
  const bool* mask;     // [B, n, s]
  const int64_t* slots; // [B]
  const int64_t* starts;// [B] committed length of each row's slot
  float* out;           // [T, H, D]
  int64_t n, s, H, KV, C, D;
};

constexpr int kScoreRows = 8;  // queries whose scores accumulate together (independent FMA chains)
constexpr int kValueRows = 4;  // queries whose value sums stay in registers together

// Every sum here runs over its own terms in one fixed order: over the head width for a
// score (one FMA chain per lane), over the keys in cache order for the softmax total and
// each output.  Masked keys add exact zeros (weight exp(-inf) = 0), so a query's result
// depends on its visible keys alone, wherever they sit in the cache and whatever shares
// the call: a verify row and the one-token step of its path give the same bits.

// R queries' scores against the kLanes keys of `kt` ([D, kLanes]: the keys transposed, one
// per lane), scaled, plus each query's `bias` row (0 or -inf per key), stored at `out` (query
// r's scores at out + r * stride); `kt` holds keys kb.. of the bias rows.
template <int R>
void score_rows(const float* const* q, const float* kt, int64_t D, float scale, const float* const* bias,
                int64_t kb, float* out, int64_t stride) {
  Vec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Vec(0.0f);
  for (int64_t d = 0; d < D; ++d) {
    const Vec key = Vec::loadu(kt + d * kLanes);
    for (int r = 0; r < R; ++r) acc[r] = at::vec::fmadd(Vec(q[r][d]), key, acc[r]);
  }
  for (int r = 0; r < R; ++r) (acc[r] * Vec(scale) + Vec::loadu(bias[r] + kb)).store(out + r * stride);
}

// out[r] = sum_key p[key][r] v[key] / total[r] for R queries, DV vectors of head width, their
// sums in registers; `p` key-major [length, kLanes].
template <int R, int DV>
void value_rows(const float* p, const float* values, int64_t length, const float* total, float* const* out) {
  Vec acc[R][DV];
  for (int r = 0; r < R; ++r)
    for (int dv = 0; dv < DV; ++dv) acc[r][dv] = Vec(0.0f);
  for (int64_t key = 0; key < length; ++key) {
    Vec value[DV];
    for (int dv = 0; dv < DV; ++dv) value[dv] = Vec::loadu(values + (key * DV + dv) * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec weight(p[key * kLanes + r]);
      for (int dv = 0; dv < DV; ++dv) acc[r][dv] = at::vec::fmadd(weight, value[dv], acc[r][dv]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int dv = 0; dv < DV; ++dv) (acc[r][dv] / Vec(total[r])).store(out[r] + dv * kLanes);
}

template <int DV>
void values_of(const float* p, int rows, const float* values, int64_t length, const float* total, float* const* out) {
  for (int r0 = 0; r0 < rows; r0 += kValueRows) {
    const float* part = p + r0;  // the weights of queries r0..
    switch (std::min(kValueRows, rows - r0)) {
      case 1: value_rows<1, DV>(part, values, length, total + r0, out + r0); break;
      case 2: value_rows<2, DV>(part, values, length, total + r0, out + r0); break;
      case 3: value_rows<3, DV>(part, values, length, total + r0, out + r0); break;
      default: value_rows<4, DV>(part, values, length, total + r0, out + r0); break;
    }
  }
}

// Queries [q0, q1) of batch row b and KV head kv (query i: row i / groups, head kv groups +
// i % groups) over that row's keys: its committed prefix, then the scratch entries each
// query's mask row selects.  The keys are transposed once (one key per lane, kLanes keys a
// block), then kLanes queries at a time: scores, softmax, weighted values.
void attend_block(const Attention& a, int64_t b, int64_t kv, int64_t q0, int64_t q1) {
  const int64_t groups = a.H / a.KV, start = a.starts[b], length = start + a.s, D = a.D;
  const int64_t Lp = (length + kLanes - 1) / kLanes * kLanes;  // keys padded to whole vectors
  const float* keys = a.k + (a.slots[b] * a.KV + kv) * a.C * D;
  const float* values = a.v + (a.slots[b] * a.KV + kv) * a.C * D;
  const float masked = -std::numeric_limits<float>::infinity();
  std::vector<float> kt(Lp * D, 0.0f);  // [Lp / kLanes, D, kLanes]
  for (int64_t kb = 0; kb < length; kb += kLanes)
    at::vec::transpose_mxn<float>(keys + kb * D, D, kt.data() + kb * D, kLanes,
                                  int(std::min<int64_t>(kLanes, length - kb)), int(D));
  // bias [the mask rows of these queries, Lp]: 0 where the key is visible, -inf elsewhere
  const int64_t j0 = q0 / groups, j1 = (q1 - 1) / groups + 1;
  std::vector<float> bias((j1 - j0) * Lp, 0.0f);
  for (int64_t j = j0; j < j1; ++j) {
    float* row = bias.data() + (j - j0) * Lp;
    const bool* visible = a.mask + (b * a.n + j) * a.s;
    for (int64_t c = 0; c < a.s; ++c)
      if (!visible[c]) row[start + c] = masked;
    std::fill(row + length, row + Lp, masked);
  }
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> scores(kLanes * Lp), p(Lp * kLanes);
  for (int64_t first = q0; first < q1; first += kLanes) {
    const int rows = int(std::min<int64_t>(kLanes, q1 - first));
    const float* q[kLanes];
    const float* bias_rows[kLanes];
    float* out[kLanes];
    for (int r = 0; r < rows; ++r) {
      const int64_t i = first + r, j = i / groups, t = (b * a.n + j) * a.H + kv * groups + i % groups;
      q[r] = a.q + t * D;
      out[r] = a.out + t * D;
      bias_rows[r] = bias.data() + (j - j0) * Lp;
    }
    for (int64_t kb = 0; kb < Lp; kb += kLanes)  // scores [rows, Lp]
      for (int r0 = 0; r0 < rows; r0 += kScoreRows) {
        const float* const* qs = q + r0;
        const float* const* bs = bias_rows + r0;
        const float* block = kt.data() + kb * D;
        float* at = scores.data() + r0 * Lp + kb;
        switch (std::min(kScoreRows, rows - r0)) {
          case 1: score_rows<1>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 2: score_rows<2>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 3: score_rows<3>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 4: score_rows<4>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 5: score_rows<5>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 6: score_rows<6>(qs, block, D, scale, bs, kb, at, Lp); break;
          case 7: score_rows<7>(qs, block, D, scale, bs, kb, at, Lp); break;
          default: score_rows<8>(qs, block, D, scale, bs, kb, at, Lp); break;
        }
      }
    for (int r = 0; r < rows; ++r) {  // softmax numerators, max-shifted
      float* row = scores.data() + r * Lp;
      Vec top(masked);
      for (int64_t i = 0; i < Lp; i += kLanes) top = at::vec::maximum(top, Vec::loadu(row + i));
      const Vec shift(top.reduce_max());
      for (int64_t i = 0; i < Lp; i += kLanes) (Vec::loadu(row + i) - shift).exp().store(row + i);
    }
    // key-major weights p [Lp, kLanes] (lane r: query r) and the totals, summed in key order
    std::fill(p.begin(), p.end(), 0.0f);
    for (int64_t kb = 0; kb < Lp; kb += kLanes)
      at::vec::transpose_mxn<float>(scores.data() + kb, Lp, p.data() + kb * kLanes, kLanes, rows, kLanes);
    Vec sums(0.0f);
    for (int64_t key = 0; key < length; ++key) sums = sums + Vec::loadu(p.data() + key * kLanes);
    float total[kLanes];
    sums.store(total);
    switch (D / kLanes) {
      case 2: values_of<2>(p.data(), rows, values, length, total, out); break;
      case 4: values_of<4>(p.data(), rows, values, length, total, out); break;
      default: values_of<8>(p.data(), rows, values, length, total, out); break;
    }
  }
}

// qkv [B·n, (H + 2 KV) D] (q, k, v side by side: the stacked projection's output) ->
// [B·n, H·D] attention output, o_proj's input.  Rotates q and k with cos/sin [B, n, D],
// writes k and v into the layer's cache at starts[b] + s - n + j (the scratch region's
// newest n entries), then attends each query row over its visible keys (tree_mask
// [B, n, s]: which scratch entries row j of batch row b sees, itself included).
at::Tensor rope_attention(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
                          const at::Tensor& v_cache, int64_t layer, const at::Tensor& slots, const at::Tensor& starts,
                          const at::Tensor& tree_mask, int64_t heads, int64_t kv_heads) {
  check_rows("rope_attention", qkv, "qkv");
  TORCH_CHECK(tree_mask.scalar_type() == at::kBool && tree_mask.dim() == 3 && tree_mask.is_contiguous(),
              "rope_attention: tree_mask must be a contiguous bool [B, n, s] tensor");
  const int64_t B = tree_mask.size(0), n = tree_mask.size(1), s = tree_mask.size(2);
  TORCH_CHECK(k_cache.scalar_type() == at::kFloat && k_cache.dim() == 5 && k_cache.is_contiguous() &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.is_contiguous(),
              "rope_attention: the caches must be contiguous fp32 [layers, slots, KV, C, D] tensors");
  const int64_t S = k_cache.size(1), KV = k_cache.size(2), C = k_cache.size(3), D = k_cache.size(4);
  TORCH_CHECK(layer >= 0 && layer < k_cache.size(0), "rope_attention: layer ", layer, " not in [0, ", k_cache.size(0), ")");
  TORCH_CHECK(kv_heads == KV && heads % KV == 0, "rope_attention: ", heads, " heads over ", kv_heads,
              " KV heads against a cache of ", KV);
  TORCH_CHECK(D == 2 * kLanes || D == 4 * kLanes || D == 8 * kLanes, "rope_attention: the head width ", D,
              " must be ", 2 * kLanes, ", ", 4 * kLanes, " or ", 8 * kLanes);
  TORCH_CHECK(qkv.size(0) == B * n && qkv.size(1) == (heads + 2 * KV) * D, "rope_attention: qkv ", qkv.sizes(),
              " is not [", B * n, ", ", (heads + 2 * KV) * D, "]");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && cos.is_contiguous() && cos.numel() == B * n * D &&
                  sin.scalar_type() == at::kFloat && sin.is_contiguous() && sin.numel() == B * n * D,
              "rope_attention: cos and sin must be contiguous fp32 [B, n, D] (or [B, 1, n, D]) tensors");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.numel() == B && starts.scalar_type() == at::kLong &&
                  starts.numel() == B && slots.is_contiguous() && starts.is_contiguous(),
              "rope_attention: slots and starts must be contiguous int64 [B] tensors");
  const int64_t *slot = slots.data_ptr<int64_t>(), *start = starts.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(slot[b] >= 0 && slot[b] < S && start[b] >= 0 && start[b] + s <= C, "rope_attention: row ", b,
                " (slot ", slot[b], ", ", start[b], " committed + ", s, " scratch) does not fit the cache [", S, ", ", C, "]");

  const int64_t width = (heads + 2 * KV) * D, layer_size = S * KV * C * D;
  float* k = k_cache.data_ptr<float>() + layer * layer_size;
  float* v = v_cache.data_ptr<float>() + layer * layer_size;
  at::Tensor q = at::empty({B * n, heads, D}, qkv.options());
  const float *x = qkv.data_ptr<float>(), *c = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
  float* qs = q.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = b * n + j, at_index = start[b] + s - n + j;
      const float *row = x + t * width, *row_cos = c + t * D, *row_sin = sn + t * D;
      for (int64_t h = 0; h < heads; ++h) rope(row + h * D, row_cos, row_sin, D, qs + (t * heads + h) * D);
      for (int64_t h = 0; h < KV; ++h) {
        const int64_t entry = ((slot[b] * KV + h) * C + at_index) * D;
        rope(row + (heads + h) * D, row_cos, row_sin, D, k + entry);
        std::copy(row + (heads + KV + h) * D, row + (heads + KV + h + 1) * D, v + entry);
      }
    }

  at::Tensor out = at::empty({B * n, heads * D}, qkv.options());
  const Attention a{qs, k, v, tree_mask.data_ptr<bool>(), slot, start, out.data_ptr<float>(), n, s, heads, KV, C, D};
  // Tasks: (batch row, KV head, a share of its queries), about two per thread, each
  // transposing its keys once; queries are split only beyond one vector of them (a decode
  // step's few would transpose the keys again for little).  Small calls run on one thread,
  // where waking the pool would cost more than they do.
  const int64_t queries = n * (heads / KV), pairs = B * KV;
  const int64_t shares = queries <= kLanes ? 1 : std::min((queries + kLanes - 1) / kLanes,
                                                          (2 * at::get_num_threads() + pairs - 1) / pairs);
  const int64_t share = (queries + shares - 1) / shares;
  const int64_t keys = *std::max_element(start, start + B) + s, work = pairs * queries * keys * D;
  const int64_t tasks = pairs * shares, grain = work < (int64_t(1) << 17) ? tasks : 1;
  at::parallel_for(0, tasks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t part = task % shares, kv = (task / shares) % KV, b = task / (shares * KV);
      if (part * share < queries) attend_block(a, b, kv, part * share, std::min(queries, (part + 1) * share));
    }
  });
  return out;
}

// ---- the greedy tokens of a step's logits ----

// The index of the first maximum of row[0, n) (of the first NaN if there is one: torch's
// argmax).  Two vector passes, the maximum and then where it first occurs: torch's CPU
// argmax is scalar (~60 us over a 49,152-entry row) and the blocked torch version it
// replaced took five ops, each paid again after a forward has evicted the caches.
int64_t first_max(const float* row, int64_t n) {
  const Vec low(-std::numeric_limits<float>::infinity());
  Vec m0 = low, m1 = low, m2 = low, m3 = low;  // four chains: a maximum's latency, not its throughput
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {  // NaN sticks (at::vec::maximum propagates it)
    m0 = at::vec::maximum(m0, Vec::loadu(row + i));
    m1 = at::vec::maximum(m1, Vec::loadu(row + i + kLanes));
    m2 = at::vec::maximum(m2, Vec::loadu(row + i + 2 * kLanes));
    m3 = at::vec::maximum(m3, Vec::loadu(row + i + 3 * kLanes));
  }
  for (; i + kLanes <= n; i += kLanes) m0 = at::vec::maximum(m0, Vec::loadu(row + i));
  const Vec best_lanes = at::vec::maximum(at::vec::maximum(m0, m1), at::vec::maximum(m2, m3));
  auto larger = [](float a, float b) { return std::isnan(a) ? a : (std::isnan(b) || b > a ? b : a); };  // NaN sticks
  float lanes[kLanes];
  best_lanes.store(lanes);
  float best = lanes[0];
  for (int l = 1; l < kLanes; ++l) best = larger(best, lanes[l]);
  for (int64_t j = i; j < n; ++j) best = larger(best, row[j]);
  const bool nan = std::isnan(best);
  const Vec target(best);
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const Vec v = Vec::loadu(row + i);
    const int not_hit = nan ? v.isnan().zero_mask() : (v == target).zero_mask();  // a bit per lane that is 0
    const int hit = ~not_hit & ((1 << kLanes) - 1);
    if (hit) return i + __builtin_ctz(hit);
  }
  for (; i < n; ++i)
    if (nan ? std::isnan(row[i]) : row[i] == best) return i;
  return 0;  // unreachable: best is one of the row's values
}

// logits [..., V] fp32 -> [...] int64: each row's greedy token, rows split across threads.
// One row runs on the calling thread (at::parallel_for does so for a single iteration):
// waking the thread team cost more than the row (in a B = 1 step, 58 us a read with the
// columns split across the threads against 28 inline).
at::Tensor greedy_tokens(const at::Tensor& logits) {
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.dim() >= 1 && logits.size(-1) > 0,
              "greedy_tokens: logits must be an fp32 [..., V] tensor with V >= 1");
  const at::Tensor rows = logits.reshape({-1, logits.size(-1)}).contiguous();
  const int64_t R = rows.size(0), V = rows.size(1);
  at::Tensor out = at::empty({R}, logits.options().dtype(at::kLong));
  const float* x = rows.data_ptr<float>();
  int64_t* o = out.data_ptr<int64_t>();
  at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) o[r] = first_max(x + r * V, V);
  });
  return out.view(logits.sizes().slice(0, logits.dim() - 1));
}

// ---- a draft layer's children: each row's top k, with their softmax probabilities ----

// The k largest of row[0, V) by value (the lower index first among equals), best first, into
// values/indices; a vector compare skips the 16-entry stretches that hold none of them.
void top_k(const float* row, int64_t V, int64_t k, float* values, int64_t* indices) {
  int64_t held = 0;
  auto offer = [&](float v, int64_t i) {
    if (held == k && !(v > values[k - 1])) return;
    int64_t at = held < k ? held++ : k - 1;
    for (; at > 0 && v > values[at - 1]; --at) values[at] = values[at - 1], indices[at] = indices[at - 1];
    values[at] = v, indices[at] = i;
  };
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    const Vec v = Vec::loadu(row + i);
    const float floor = held == k ? values[k - 1] : -std::numeric_limits<float>::infinity();
    const int below = (v > Vec(floor)).zero_mask();  // a bit per lane not above the floor
    if (held == k && below == (1 << kLanes) - 1) continue;
    for (int l = 0; l < kLanes; ++l) offer(row[i + l], i + l);
  }
  for (; i < V; ++i) offer(row[i], i);
}

// logits [..., V] fp32, k, offsets [V] int64 (or empty) -> [..., 2k] fp64: each row's k
// likeliest tokens under its softmax, best first: their probabilities, then their ids (exact
// in fp64), each id moved by offsets[id] (an EAGLE-3 head's draft-to-target map).  One op
// and one host array where torch took eight ops (softmax, topk, the id map, casts, the
// copy), each paid again after a forward has evicted the caches.
at::Tensor top_children(const at::Tensor& logits, int64_t k, const at::Tensor& offsets) {
  TORCH_CHECK(logits.scalar_type() == at::kFloat && logits.dim() >= 1, "top_children: logits must be fp32 [..., V]");
  const at::Tensor rows = logits.reshape({-1, logits.size(-1)}).contiguous();
  const int64_t R = rows.size(0), V = rows.size(1);
  TORCH_CHECK(1 <= k && k <= V, "top_children: k must be in [1, ", V, "], got ", k);
  const bool mapped = offsets.numel() > 0;
  TORCH_CHECK(!mapped || (offsets.scalar_type() == at::kLong && offsets.dim() == 1 && offsets.size(0) == V &&
                          offsets.is_contiguous()),
              "top_children: offsets must be empty or a contiguous int64 [", V, "] tensor");
  std::vector<int64_t> out_shape(logits.sizes().begin(), logits.sizes().end());
  out_shape.back() = 2 * k;
  at::Tensor out = at::empty({R, 2 * k}, logits.options().dtype(at::kDouble));
  const float* x = rows.data_ptr<float>();
  const int64_t* shift = mapped ? offsets.data_ptr<int64_t>() : nullptr;
  double* o = out.data_ptr<double>();
  at::parallel_for(0, R, 4, [&](int64_t r0, int64_t r1) {
    std::vector<float> values(k);
    std::vector<int64_t> ids(k);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * V;
      top_k(row, V, k, values.data(), ids.data());
      const float top = values[0];
      Vec sums(0.0f);
      int64_t i = 0;
      for (; i + kLanes <= V; i += kLanes) sums = sums + (Vec::loadu(row + i) - Vec(top)).exp();
      float total = sums.reduce_add();
      for (; i < V; ++i) total += std::exp(row[i] - top);
      for (int64_t j = 0; j < k; ++j) {
        o[r * 2 * k + j] = std::exp(values[j] - top) / total;
        o[r * 2 * k + k + j] = double(mapped ? ids[j] + shift[ids[j]] : ids[j]);
      }
    }
  });
  return out.view(out_shape);
}

}  // namespace

TORCH_LIBRARY(sglang_cast_layer, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor delta, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("rope_attention(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, int layer, "
        "Tensor slots, Tensor starts, Tensor tree_mask, int heads, int kv_heads) -> Tensor");
  m.def("greedy_tokens(Tensor logits) -> Tensor");
  m.def("top_children(Tensor logits, int k, Tensor offsets) -> Tensor");
}

TORCH_LIBRARY_IMPL(sglang_cast_layer, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_mul", &silu_mul);
  m.impl("rope_attention", &rope_attention);
  m.impl("greedy_tokens", &greedy_tokens);
  m.impl("top_children", &top_children);
}
