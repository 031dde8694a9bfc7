// Attention over packed rows (each sequence's tokens one after another, found by cu_seqlens) in one call:
// no padding, no grid, no per-sequence call. Each (sequence, head, block of queries) is one work item; the
// items are split between the threads by their cost, so a batch of mixed lengths keeps every core busy.
// bertlite/layers/native_attention.py builds this file once per process and checks it against SDPA.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kLanes = Vec::size();
constexpr int64_t kRows = 4;         // queries per register block
constexpr int64_t kQueryBlock = 64;  // queries per work item: long sequences split between threads

struct Item {
  int64_t start, head, first, last;  // the sequence's first row; the head; its queries
  int64_t keys_first, keys_last;     // the keys its queries see: the sequence's, or their windows'
};

#if defined(CPU_CAPABILITY_AVX512)
// The 16 x 16 block in r transposed in place (unpack 32-bit, then 64-bit pairs, then two 128-bit shuffles).
inline void transpose_block(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}
#endif

// kt[c * width + j] = key[j * stride + c] for the sequence's keys (j < length), zeros for j in [length, width).
void pack_keys(const float* key, int64_t stride, int64_t length, int64_t head_size, int64_t width, float* kt) {
#if defined(CPU_CAPABILITY_AVX512)
  if (head_size % 16 == 0) {
    for (int64_t j = 0; j < width; j += 16)
      for (int64_t c = 0; c < head_size; c += 16) {
        __m512 r[16];
        for (int64_t i = 0; i < 16; ++i)
          r[i] = j + i < length ? _mm512_loadu_ps(key + (j + i) * stride + c) : _mm512_setzero_ps();
        transpose_block(r);
        for (int64_t i = 0; i < 16; ++i) _mm512_storeu_ps(kt + (c + i) * width + j, r[i]);
      }
    return;
  }
#endif
  for (int64_t c = 0; c < head_size; ++c) std::fill(kt + c * width + length, kt + (c + 1) * width, 0.0f);
  for (int64_t j = 0; j < length; ++j)
    for (int64_t c = 0; c < head_size; ++c) kt[c * width + j] = key[j * stride + c];
}

// scores[r][0:width] = scale * q_r . K^T + mask for R queries, K^T packed as (head_size, width) with width a
// multiple of the vector width; mask is 0 for the sequence's keys and -inf past them. V keys' vectors at a time.
template <int64_t R, int64_t V>
void score_keys(const float* const* q, const float* kt, const float* mask, int64_t head_size, int64_t width,
                float scale, int64_t j, float* scores) {
  Vec acc[R][V];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t v = 0; v < V; ++v) acc[r][v] = Vec(0.0f);
  for (int64_t c = 0; c < head_size; ++c) {
    Vec k[V];
    for (int64_t v = 0; v < V; ++v) k[v] = Vec::loadu(kt + c * width + j + v * kLanes);
    for (int64_t r = 0; r < R; ++r) {
      const Vec qc(q[r][c]);
      for (int64_t v = 0; v < V; ++v) acc[r][v] = at::vec::fmadd(qc, k[v], acc[r][v]);
    }
  }
  for (int64_t v = 0; v < V; ++v) {
    const Vec m = Vec::loadu(mask + j + v * kLanes);
    for (int64_t r = 0; r < R; ++r) at::vec::fmadd(acc[r][v], Vec(scale), m).store(scores + r * width + j + v * kLanes);
  }
}

template <int64_t R>
void score_rows(const float* const* q, const float* kt, const float* mask, int64_t head_size, int64_t width,
                float scale, float* scores) {
  int64_t j = 0;
  for (; j + 2 * kLanes <= width; j += 2 * kLanes) score_keys<R, 2>(q, kt, mask, head_size, width, scale, j, scores);
  if (j < width) score_keys<R, 1>(q, kt, mask, head_size, width, scale, j, scores);
}

// Each of the R rows of scores[.][0:width] becomes exp(score - the row's max) in place (the masked keys
// zeros); writes each row's 1 / sum into inverse.
template <int64_t R>
void softmax_rows(float* scores, int64_t width, float* inverse) {
  for (int64_t r = 0; r < R; ++r) {
    float* s = scores + r * width;
    Vec vmax = Vec::loadu(s);
    for (int64_t j = kLanes; j < width; j += kLanes) vmax = at::vec::maximum(vmax, Vec::loadu(s + j));
    const Vec high(at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, vmax));
    Vec vsum(0.0f);
    for (int64_t j = 0; j < width; j += kLanes) {
      const Vec e = (Vec::loadu(s + j) - high).exp_u20();
      e.store(s + j);
      vsum = vsum + e;
    }
    inverse[r] = 1.0f / at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, vsum);
  }
}

// out_r[0:head_size] = inverse_r * sum_j p_r[j] v_j for R queries, 2 vectors of the head at a time.
template <int64_t R>
void weigh_values(const float* p, int64_t width, const float* v, int64_t v_stride, int64_t length,
                  int64_t head_size, const float* inverse, float* const* out) {
  for (int64_t c = 0; c < head_size; c += 2 * kLanes) {
    const int64_t n0 = std::min(kLanes, head_size - c), n1 = std::clamp(head_size - c - kLanes, int64_t{0}, kLanes);
    Vec acc[R][2];
    for (int64_t r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec(0.0f);
    if (n0 == kLanes && n1 == kLanes) {
      for (int64_t j = 0; j < length; ++j) {
        const float* row = v + j * v_stride + c;
        const Vec v0 = Vec::loadu(row), v1 = Vec::loadu(row + kLanes);
        for (int64_t r = 0; r < R; ++r) {
          const Vec pj(p[r * width + j]);
          acc[r][0] = at::vec::fmadd(pj, v0, acc[r][0]);
          acc[r][1] = at::vec::fmadd(pj, v1, acc[r][1]);
        }
      }
    } else {
      for (int64_t j = 0; j < length; ++j) {
        const float* row = v + j * v_stride + c;
        const Vec v0 = Vec::loadu(row, n0), v1 = n1 > 0 ? Vec::loadu(row + kLanes, n1) : Vec(0.0f);
        for (int64_t r = 0; r < R; ++r) {
          const Vec pj(p[r * width + j]);
          acc[r][0] = at::vec::fmadd(pj, v0, acc[r][0]);
          acc[r][1] = at::vec::fmadd(pj, v1, acc[r][1]);
        }
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      (acc[r][0] * Vec(inverse[r])).store(out[r] + c, n0);
      if (n1 > 0) (acc[r][1] * Vec(inverse[r])).store(out[r] + c + kLanes, n1);
    }
  }
}

// With a sliding window, row r's query (at key index query + r) sees only the keys at most `window` away:
// the others' scores become -inf. Every row keeps its own key, so each softmax has a finite maximum.
template <int64_t R>
void mask_window(float* scores, int64_t width, int64_t keys, int64_t query, int64_t window) {
  if (window < 0) return;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < R; ++r) {
    float* s = scores + r * width;
    const int64_t low = std::clamp(query + r - window, int64_t{0}, keys);
    const int64_t high = std::clamp(query + r + window + 1, int64_t{0}, keys);
    std::fill(s, s + low, kMasked);
    std::fill(s + high, s + keys, kMasked);
  }
}

template <int64_t R>
void block(const float* const* q, const float* kt, const float* mask, const float* v, int64_t v_stride, int64_t length,
           int64_t width, int64_t head_size, float scale, int64_t query, int64_t window, float* scores,
           float* const* out) {
  float inverse[kRows];
  score_rows<R>(q, kt, mask, head_size, width, scale, scores);
  mask_window<R>(scores, width, length, query, window);
  softmax_rows<R>(scores, width, inverse);
  weigh_values<R>(scores, width, v, v_stride, length, head_size, inverse, out);
}

// Ask for the next item's query, key and value rows while this one runs: each row is a few cache lines
// one (N, 3H) row apart, a stride the hardware prefetchers do not follow across pages.
void prefetch_item(const Item& item, const float* qkv, int64_t stride, int64_t hidden, int64_t head_size) {
  for (int64_t j = item.keys_first; j < item.keys_last; ++j) {
    const char* row = reinterpret_cast<const char*>(qkv + (item.start + j) * stride + item.head * head_size);
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t byte = 0; byte < head_size * 4; byte += 64)
        __builtin_prefetch(row + part * hidden * 4 + byte, 0, 3);
  }
}

void run_item(const Item& item, const float* qkv, int64_t stride, int64_t hidden, int64_t head_size, float scale,
              int64_t window, float* out, std::vector<float>& kt, std::vector<float>& mask,
              std::vector<float>& scores) {
  const int64_t keys = item.keys_last - item.keys_first, width = (keys + kLanes - 1) / kLanes * kLanes;
  kt.resize(head_size * width);
  const float* key = qkv + (item.start + item.keys_first) * stride + hidden + item.head * head_size;
  pack_keys(key, stride, keys, head_size, width, kt.data());
  mask.assign(width, 0.0f);
  std::fill(mask.begin() + keys, mask.end(), -std::numeric_limits<float>::infinity());
  scores.resize(kRows * width);
  const float* value = qkv + (item.start + item.keys_first) * stride + 2 * hidden + item.head * head_size;
  for (int64_t i = item.first; i < item.last; i += kRows) {
    const int64_t rows = std::min(kRows, item.last - i), query = i - item.keys_first;
    const float* q[kRows];
    float* o[kRows];
    for (int64_t r = 0; r < rows; ++r) {
      q[r] = qkv + (item.start + i + r) * stride + item.head * head_size;
      o[r] = out + (item.start + i + r) * hidden + item.head * head_size;
    }
    const float* k = kt.data();
    const float* m = mask.data();
    float* p = scores.data();
    switch (rows) {
      case 4: block<4>(q, k, m, value, stride, keys, width, head_size, scale, query, window, p, o); break;
      case 3: block<3>(q, k, m, value, stride, keys, width, head_size, scale, query, window, p, o); break;
      case 2: block<2>(q, k, m, value, stride, keys, width, head_size, scale, query, window, p, o); break;
      default: block<1>(q, k, m, value, stride, keys, width, head_size, scale, query, window, p, o); break;
    }
  }
}

// (N, 3H) float32 query|key|value rows, (B + 1) int64 sequence offsets -> (N, H) context; window >= 0: each query
// sees only the keys of its sequence at most `window` positions away (a sliding window), -1: all of them.
at::Tensor packed_attention(const at::Tensor& qkv, const at::Tensor& cu_seqlens, int64_t heads, double scale,
                            int64_t window) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.stride(1) == 1,
              "qkv must be (N, 3H) float32 rows with contiguous columns");
  TORCH_CHECK(heads > 0 && qkv.size(1) % (3 * heads) == 0, "qkv's width must be 3 x heads x head_size");
  TORCH_CHECK(window >= -1, "window must be -1 (none) or a number of positions");
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1 &&
                  (cu_seqlens.scalar_type() == at::kInt || cu_seqlens.scalar_type() == at::kLong),
              "cu_seqlens must be (B + 1) int32 or int64");
  const auto offsets = cu_seqlens.to(at::kLong).contiguous();
  const int64_t* cu = offsets.data_ptr<int64_t>();
  const int64_t sequences = offsets.size(0) - 1, hidden = qkv.size(1) / 3, head_size = hidden / heads;
  TORCH_CHECK(cu[0] == 0 && cu[sequences] == qkv.size(0), "cu_seqlens must run from 0 to qkv's row count");
  auto out = at::empty({qkv.size(0), hidden}, qkv.options().memory_format(at::MemoryFormat::Contiguous));

  std::vector<Item> items;
  std::vector<double> cost{0.0};  // cumulative: a block's queries x (its keys + a fixed overhead)
  for (int64_t b = 0; b < sequences; ++b) {
    const int64_t length = cu[b + 1] - cu[b];
    TORCH_CHECK(length >= 0, "cu_seqlens must not decrease");
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t first = 0; first < length; first += kQueryBlock) {
        const int64_t last = std::min(length, first + kQueryBlock);
        const int64_t keys_first = window < 0 ? 0 : std::max<int64_t>(0, first - window);
        const int64_t keys_last = window < 0 ? length : std::min(length, last + window);
        items.push_back({cu[b], h, first, last, keys_first, keys_last});
        cost.push_back(cost.back() + static_cast<double>(last - first) * (keys_last - keys_first + 16) * head_size);
      }
  }
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), items.size()));
  std::vector<int64_t> split(threads + 1, static_cast<int64_t>(items.size()));
  split[0] = 0;
  for (int64_t t = 1; t < threads; ++t)
    split[t] = std::lower_bound(cost.begin(), cost.end(), cost.back() * t / threads) - cost.begin();
  const float* data = qkv.data_ptr<float>();
  float* context = out.data_ptr<float>();
  const int64_t stride = qkv.stride(0);
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kt, mask, scores;
    for (int64_t t = begin; t < end; ++t)
      for (int64_t i = split[t]; i < split[t + 1]; ++i) {
        if (i + 1 < split[t + 1]) prefetch_item(items[i + 1], data, stride, hidden, head_size);
        run_item(items[i], data, stride, hidden, head_size, static_cast<float>(scale), window, context, kt, mask,
                 scores);
      }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(bertlite_attention, m) {
  m.def("packed_attention(Tensor qkv, Tensor cu_seqlens, int heads, float scale, int window=-1) -> Tensor");
}

TORCH_LIBRARY_IMPL(bertlite_attention, CPU, m) { m.impl("packed_attention", &packed_attention); }
