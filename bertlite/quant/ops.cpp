// Int8Linear's passes over its activations as one pass each: quantizing its input per row, and turning its
// GEMM's products into its output (scales, offset, bias, residual, activation). bertlite/quant/ops.py
// builds this file once per process and checks it against the eager ops.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

// The activations by code. GELU as 0.5 y (1 + erf(y / sqrt 2)), erf as a rational function on [-4, 4] (beyond,
// erf is +-1 in float32): x P(x^2) / Q(x^2), the approximation Eigen and XLA use for float32, here with the
// 1 / sqrt 2 folded into the coefficients, so that it is y P'(y^2) / Q'(y^2) on |y| <= kGeluEdge and GELU is
// h + h r with h = y / 2: two operations fewer per value. GELU then lands as close to the exact one as torch's
// float32 GELU does (within 1.5e-6, plus two roundings of the result), at a fraction of the cost of a
// full-precision erf. kGeluEdge is the float nearest 4 sqrt 2 at which r rounds to exactly +-1, with and without
// fused multiply-adds, so that GELU is exactly y and 0 beyond it.
constexpr int64_t kIdentity = 0;
constexpr int64_t kGelu = 1;
constexpr float kGeluEdge = 5.656857491e+00f;
constexpr float kAlpha[] = {-3.011990180e-12f, 6.122398699e-10f, -9.285302127e-08f, -5.031512501e-06f,
                            -1.299292198e-04f, -1.044608769e-03f, -1.138161402e-02f};
constexpr float kBeta[] = {-9.103794696e-07f, -2.667175613e-05f, -4.207067541e-04f, -3.686664626e-03f,
                           -1.426473912e-02f};

inline Vec gelu(Vec y) {
  const Vec clamped = at::vec::clamp(y, Vec(-kGeluEdge), Vec(kGeluEdge));
  const Vec t = clamped * clamped;
  Vec p = Vec(kAlpha[0]);
  for (int i = 1; i < 7; ++i) p = at::vec::fmadd(t, p, Vec(kAlpha[i]));
  Vec q = Vec(kBeta[0]);
  for (int i = 1; i < 5; ++i) q = at::vec::fmadd(t, q, Vec(kBeta[i]));
  const Vec half = Vec(0.5f) * y;
  return at::vec::fmadd(half, clamped * p / q, half);
}

inline float gelu(float y) {
  const float clamped = std::clamp(y, -kGeluEdge, kGeluEdge), t = clamped * clamped;
  float p = kAlpha[0], q = kBeta[0];
  for (int i = 1; i < 7; ++i) p = std::fma(t, p, kAlpha[i]);
  for (int i = 1; i < 5; ++i) q = std::fma(t, q, kBeta[i]);
  const float half = 0.5f * y;
  return std::fma(half, clamped * p / q, half);
}

// A row's smallest and largest value; NaN for both where the row holds a NaN (as torch's amin and amax give).
// Plain min and max drop NaN, so a running sum carries it; four chains each, so that no one waits on the
// latency of the one before.
std::pair<float, float> row_range(const float* row, int64_t n_cols) {
  const Vec inf(std::numeric_limits<float>::infinity());
  Vec lows[4] = {inf, inf, inf, inf}, highs[4] = {-inf, -inf, -inf, -inf}, sum(0.0f);
  int64_t n = 0;
  for (; n + 4 * Vec::size() <= n_cols; n += 4 * Vec::size()) {
    for (int a = 0; a < 4; ++a) {
      const Vec v = Vec::loadu(row + n + a * Vec::size());
      lows[a] = at::vec::clamp_max(lows[a], v);
      highs[a] = at::vec::clamp_min(highs[a], v);
      sum = sum + v;
    }
  }
  for (; n + Vec::size() <= n_cols; n += Vec::size()) {
    const Vec v = Vec::loadu(row + n);
    lows[0] = at::vec::clamp_max(lows[0], v);
    highs[0] = at::vec::clamp_min(highs[0], v);
    sum = sum + v;
  }
  alignas(64) float low_lanes[Vec::size()], high_lanes[Vec::size()], sum_lanes[Vec::size()];
  at::vec::minimum(at::vec::minimum(lows[0], lows[1]), at::vec::minimum(lows[2], lows[3])).store(low_lanes);
  at::vec::maximum(at::vec::maximum(highs[0], highs[1]), at::vec::maximum(highs[2], highs[3])).store(high_lanes);
  sum.store(sum_lanes);
  float low = *std::min_element(low_lanes, low_lanes + Vec::size());
  float high = *std::max_element(high_lanes, high_lanes + Vec::size());
  bool nan = std::any_of(sum_lanes, sum_lanes + Vec::size(), [](float v) { return std::isnan(v); });
  for (; n < n_cols; ++n) {
    low = std::min(low, row[n]);
    high = std::max(high, row[n]);
    nan = nan || std::isnan(row[n]);
  }
  if (nan) return {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  return {low, high};
}

// Values in [0, 255] as uint8 rounded to nearest even, one vector's worth (saturating: a value a few ulps
// beyond the range lands on its end; the portable path also takes NaN to 0).
inline void store_codes(const Vec& values, uint8_t* out) {
#if defined(CPU_CAPABILITY_AVX512)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(values)));
#elif defined(CPU_CAPABILITY_AVX2)
  const __m256i words = _mm256_cvtps_epi32(values);
  const __m128i shorts = _mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(shorts, shorts));
#else
  alignas(64) float lanes[Vec::size()];
  values.store(lanes);
  for (int64_t j = 0; j < Vec::size(); ++j) {
    out[j] = lanes[j] >= 0.0f ? static_cast<uint8_t>(std::nearbyint(std::min(lanes[j], 255.0f))) : 0;
  }
#endif
}

const float* data_or_null(const std::optional<at::Tensor>& t, int64_t numel, const char* name) {
  if (!t.has_value()) return nullptr;
  TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == numel, name,
              " must be a contiguous float32 tensor of ", numel, " values");
  return t->data_ptr<float>();
}

// What dequantize adds to a row's scaled products besides its offset: the Linear's columns (row_sums, bias, the
// float32 channels' weight) and the rows' own (residual, the float32 channels' inputs); null where absent.
struct Addends {
  const float* sums;
  const float* biases;
  const float* residuals;    // (M, N)
  const float* kept;         // (M, k): each row's inputs on its float32 channels
  const float* kept_weight;  // (k, N): their weight, one row per channel
  int64_t n_kept;
};

// Which addends and activation a row has, as bits of dequantize_row's template argument: its loop then tests
// none of them per vector.
constexpr int kHasResidual = 1, kHasBias = 2, kHasSums = 4, kHasKept = 8, kHasGelu = 16;

template <int kForm>
void dequantize_row(float* row, int64_t m, int64_t n_cols, float row_scale, float row_offset, const Addends& a) {
  constexpr bool res = kForm & kHasResidual, bias = kForm & kHasBias, sums = kForm & kHasSums;
  constexpr bool kept = kForm & kHasKept, with_gelu = kForm & kHasGelu;
  const float* residual = res ? a.residuals + m * n_cols : nullptr;
  const float* inputs = kept ? a.kept + m * a.n_kept : nullptr;
  const Vec vscale(row_scale), voffset(row_offset);
  int64_t n = 0;
  for (; n + Vec::size() <= n_cols; n += Vec::size()) {
    Vec y = Vec::loadu(row + n) * vscale;
    if constexpr (res) y = Vec::loadu(residual + n) + y;
    else if constexpr (bias) y = Vec::loadu(a.biases + n) + y;
    if constexpr (sums) y = y + voffset * Vec::loadu(a.sums + n);
    if constexpr (res && bias) y = y + Vec::loadu(a.biases + n);
    if constexpr (kept) {
      for (int64_t j = 0; j < a.n_kept; ++j) y = y + Vec(inputs[j]) * Vec::loadu(a.kept_weight + j * n_cols + n);
    }
    (with_gelu ? gelu(y) : y).store(row + n);
  }
  for (; n < n_cols; ++n) {
    float y = row[n] * row_scale;
    if constexpr (res) y = residual[n] + y;
    else if constexpr (bias) y = a.biases[n] + y;
    if constexpr (sums) y = y + row_offset * a.sums[n];
    if constexpr (res && bias) y = y + a.biases[n];
    if constexpr (kept) {
      for (int64_t j = 0; j < a.n_kept; ++j) y = y + inputs[j] * a.kept_weight[j * n_cols + n];
    }
    row[n] = with_gelu ? gelu(y) : y;
  }
}

using DequantizeRow = void (*)(float*, int64_t, int64_t, float, float, const Addends&);

// dequantize_row of each form, indexed by its bits.
template <int... kForms>
constexpr std::array<DequantizeRow, sizeof...(kForms)> forms_of(std::integer_sequence<int, kForms...>) {
  return {&dequantize_row<kForms>...};
}
constexpr auto kDequantizeRows = forms_of(std::make_integer_sequence<int, 2 * kHasGelu>{});

// out = products * scale + bias + offset * row_sums, or products * scale + residual + offset * row_sums + bias,
// in place, in the order Int8Linear's eager ops compute it; then plus kept @ kept_weight (the float32
// channels' products), then the activation.
at::Tensor dequantize(at::Tensor products, const at::Tensor& scale, const std::optional<at::Tensor>& offset,
                      const std::optional<at::Tensor>& row_sums, const std::optional<at::Tensor>& bias,
                      const std::optional<at::Tensor>& residual, const std::optional<at::Tensor>& kept,
                      const std::optional<at::Tensor>& kept_weight, int64_t activation) {
  TORCH_CHECK(products.dim() == 2 && products.is_contiguous() && products.scalar_type() == at::kFloat,
              "products must be a contiguous 2-D float32 tensor");
  TORCH_CHECK(activation == kIdentity || activation == kGelu, "unknown activation code ", activation);
  TORCH_CHECK(!(residual.has_value() && activation != kIdentity), "an activation goes without a residual");
  TORCH_CHECK(offset.has_value() == row_sums.has_value(), "offset and row_sums go together");
  TORCH_CHECK(kept.has_value() == kept_weight.has_value(), "kept and kept_weight go together");
  const int64_t n_rows = products.size(0), n_cols = products.size(1);
  const int64_t n_kept = kept.has_value() ? kept->size(-1) : 0;
  const float* scales = data_or_null(scale, n_rows, "scale");
  const float* offsets = data_or_null(offset, n_rows, "offset");
  const Addends addends{data_or_null(row_sums, n_cols, "row_sums"),
                        data_or_null(bias, n_cols, "bias"),
                        data_or_null(residual, n_rows * n_cols, "residual"),
                        data_or_null(kept, n_rows * n_kept, "kept"),
                        data_or_null(kept_weight, n_kept * n_cols, "kept_weight"),
                        n_kept};
  const int form = (addends.residuals ? kHasResidual : 0) | (addends.biases ? kHasBias : 0) |
                   (addends.sums ? kHasSums : 0) | (n_kept ? kHasKept : 0) | (activation == kGelu ? kHasGelu : 0);
  const DequantizeRow dequantize_row = kDequantizeRows[form];
  float* out = products.data_ptr<float>();
  at::parallel_for(0, n_rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      dequantize_row(out + m * n_cols, m, n_cols, scales[m], offsets ? offsets[m] : 0.0f, addends);
    }
  });
  return products;
}

// A row's codes: asymmetric, round((x - low) * inverse); symmetric, round(x * inverse + zero_point) (the zero
// point added before rounding, as the eager ops' quantize_per_tensor does). No clamp to [0, top] in the vector
// loop: x - low is within [0, high - low] and |x| within max|x|, so a value lies in the range but for the
// rounding of inverse (a few ulps), which store_codes' saturation and rounding absorb.
template <bool kAsymmetric>
void store_row_codes(const float* row, int64_t n_cols, uint8_t* q, float low_or_zero, float inverse, float top) {
  const Vec vshift(low_or_zero), vinverse(inverse);
  int64_t n = 0;
  for (; n + Vec::size() <= n_cols; n += Vec::size()) {
    const Vec v = Vec::loadu(row + n);
    store_codes(kAsymmetric ? (v - vshift) * vinverse : v * vinverse + vshift, q + n);
  }
  for (; n < n_cols; ++n) {
    const float r = kAsymmetric ? (row[n] - low_or_zero) * inverse : row[n] * inverse + low_or_zero;
    q[n] = static_cast<uint8_t>(std::nearbyint(std::clamp(r, 0.0f, top)));
  }
}

// Each row of x (times input_scale) to uint8: symmetric, q = round(x / scale + zero_point) with scale =
// max|x| / (zero_point - 1); asymmetric, q = round((x - min) / scale) with scale = (max - min) / top. The
// channels in `skipped` count as zeros (the Linear keeps them in float32). Returns q, scale, the row minimum and
// each row's values on the skipped channels (as x holds them).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x,
                                                             const std::optional<at::Tensor>& input_scale,
                                                             const at::Tensor& skipped, bool asymmetric,
                                                             int64_t top, int64_t zero_point) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "x must be a contiguous 2-D float32 tensor");
  TORCH_CHECK(skipped.scalar_type() == at::kLong && skipped.is_contiguous(), "skipped must be int64 channels");
  const int64_t n_rows = x.size(0), n_cols = x.size(1), n_skipped = skipped.numel();
  const float* scaling = data_or_null(input_scale, n_cols, "input_scale");
  const int64_t* channels = skipped.data_ptr<int64_t>();
  for (int64_t j = 0; j < n_skipped; ++j) {
    TORCH_CHECK(channels[j] >= 0 && channels[j] < n_cols, "skipped channel ", channels[j], " out of range");
  }
  auto codes = at::empty({n_rows, n_cols}, x.options().dtype(at::kByte));
  auto scales = at::empty({n_rows, 1}, x.options());
  auto lows = at::empty({n_rows, 1}, x.options());
  auto kept = at::empty({n_rows, n_skipped}, x.options());
  const float* in = x.data_ptr<float>();
  float* kept_out = kept.data_ptr<float>();
  uint8_t* code_data = codes.data_ptr<uint8_t>();
  float* scale_out = scales.data_ptr<float>();
  float* low_out = lows.data_ptr<float>();
  const float ftop = static_cast<float>(top), fzero = static_cast<float>(zero_point);
  at::parallel_for(0, n_rows, 16, [&](int64_t begin, int64_t end) {
    // The row as quantized, where it is not x's own: scaled, its skipped channels zeroed.
    std::vector<float> buffer(scaling || n_skipped ? n_cols : 0);
    for (int64_t m = begin; m < end; ++m) {
      const float* row = in + m * n_cols;
      for (int64_t j = 0; j < n_skipped; ++j) kept_out[m * n_skipped + j] = row[channels[j]];
      if (!buffer.empty()) {
        int64_t n = 0;
        for (; n + Vec::size() <= n_cols; n += Vec::size()) {
          Vec v = Vec::loadu(row + n);
          if (scaling) v = v * Vec::loadu(scaling + n);
          v.store(buffer.data() + n);
        }
        for (; n < n_cols; ++n) buffer[n] = scaling ? row[n] * scaling[n] : row[n];
        for (int64_t j = 0; j < n_skipped; ++j) buffer[channels[j]] = 0.0f;
        row = buffer.data();
      }
      const auto [low, high] = row_range(row, n_cols);
      const float step = asymmetric ? std::max((high - low) / ftop, 1e-30f)
                                    : std::max(std::max(high, -low) / (fzero - 1.0f), 1e-30f);
      const float inverse = 1.0f / step;
      scale_out[m] = step;
      low_out[m] = low;
      uint8_t* q = code_data + m * n_cols;
      if (!std::isfinite(step)) {  // a NaN or an infinity in the row: its scale carries that into its output
        std::fill(q, q + n_cols, uint8_t{0});
      } else if (asymmetric) {
        store_row_codes<true>(row, n_cols, q, low, inverse, ftop);
      } else {
        store_row_codes<false>(row, n_cols, q, fzero, inverse, ftop);
      }
    }
  });
  return {codes, scales, lows, kept};
}

}  // namespace

TORCH_LIBRARY(bertlite_int8, m) {
  m.def(
      "dequantize(Tensor(a!) products, Tensor scale, Tensor? offset, Tensor? row_sums, Tensor? bias, "
      "Tensor? residual, Tensor? kept, Tensor? kept_weight, int activation) -> Tensor(a!)");
  m.def(
      "quantize_rows(Tensor x, Tensor? input_scale, Tensor skipped, bool asymmetric, int top, int zero_point) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(bertlite_int8, CPU, m) {
  m.impl("dequantize", &dequantize);
  m.impl("quantize_rows", &quantize_rows);
}
