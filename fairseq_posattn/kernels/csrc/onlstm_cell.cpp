// The ON-LSTM recurrence on the CPU (Shen et al. 2019; the equations as
// numbered in Hao et al. 2019, Eq. 3-9): the loop over the time steps of a
// layer, forward and backward, each step one recurrent matmul per direction
// (oneDNN's packed weights, or addmm) and one pass over each row for the
// element-wise work instead of some twenty ATen kernels.
//
// Every tensor is float32 [D, rows, units], or a list of one [rows, units]
// per direction, with unit stride along the units (any other strides).  Gate
// units of a row, in order: f, i, o, c_hat (hidden each), master forget,
// master input (n_chunk each; master unit k covers units k*chunk ..
// k*chunk+chunk-1).  Rows are packed: time-major, step t over the
// batch_sizes[t] sentences longer than t (fairseq_posattn/kernels/onlstm_cpp.py
// lays them out and projects the inputs).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/addmm_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

// exp(x) to about 2 ulp (Cephes' expf: x = n ln 2 + r, a degree-6 polynomial
// in r, times 2^n), written without calls or branches so that the compiler
// vectorizes the loops that use it (with -fno-math-errno -fno-trapping-math,
// which let floor() vectorize and change no result).
inline float exp_(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_(-x)); }

inline float tanh_(float x) { return 2.0f * sigmoid(2.0f * x) - 1.0f; }

// A tensor that holds something (the steps pass undefined tensors for "none").
inline bool present(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

struct Rows {
  // the units of (direction d, row): of a [D, rows, units] tensor, or of the
  // d-th [rows, units] tensor of a list
  std::vector<float*> dirs;
  std::vector<int64_t> row_strides;
  explicit Rows(const at::Tensor& t) {
    for (int64_t d = 0; d < (present(t) ? t.size(0) : 0); ++d) {
      dirs.push_back(t.data_ptr<float>() + d * t.stride(0));
      row_strides.push_back(t.stride(1));
    }
  }
  explicit Rows(const std::vector<at::Tensor>& ts) {
    for (const auto& t : ts) {
      dirs.push_back(t.data_ptr<float>());
      row_strides.push_back(t.stride(0));
    }
  }
  float* operator()(int64_t d, int64_t row) const { return dirs[d] + row * row_strides[d]; }
};

// Error messages, built with std::to_string rather than by streaming numbers
// into TORCH_CHECK: on one machine (torch 2.11+cu130, Ubuntu 24.04's g++ 13.3)
// every integer streamed into a std::ostream inside this extension crashed it
// (in std::ostream::_M_insert<long>), while strings streamed fine.
void append(std::string& s, const char* part) { s += part; }
void append(std::string& s, int64_t part) { s += std::to_string(part); }
void append(std::string& s, c10::IntArrayRef part) {
  s += '[';
  for (size_t k = 0; k < part.size(); ++k) s += (k == 0 ? "" : ", ") + std::to_string(part[k]);
  s += ']';
}

template <typename... Parts>
std::string message(const Parts&... parts) {
  std::string s;
  (append(s, parts), ...);
  return s;
}

void check_layout(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.device().is_cpu(), name, ": expected a float32 CPU tensor");
  TORCH_CHECK(t.stride(-1) == 1, name, ": units must be contiguous");
}

void check(const at::Tensor& t, const char* name, int64_t num_dir, int64_t n, int64_t units) {
  TORCH_CHECK(t.dim() == 3 && t.size(0) == num_dir && t.size(1) == n && t.size(2) == units,
              message(name, ": expected [", num_dir, ", ", n, ", ", units, "], got ", t.sizes()));
  check_layout(t, name);
}

// A list of one [n, units] tensor per direction.
void check(const std::vector<at::Tensor>& ts, const char* name, int64_t num_dir, int64_t n, int64_t units) {
  const auto given = static_cast<int64_t>(ts.size());
  TORCH_CHECK(given == num_dir, message(name, ": expected ", num_dir, " tensors, got ", given));
  for (const auto& t : ts) {
    TORCH_CHECK(t.dim() == 2 && t.size(0) == n && t.size(1) == units,
                message(name, ": expected [", n, ", ", units, "] per direction, got ", t.sizes()));
    check_layout(t, name);
  }
}

// Softmax of (x + b)[0..m) into p, then p's running sum into cum.
void softmax_cumsum(const float* x, const float* b, int64_t m, float* p, float* cum) {
  float top = x[0] + b[0];
#pragma omp simd reduction(max : top)
  for (int64_t k = 1; k < m; ++k) top = x[k] + b[k] > top ? x[k] + b[k] : top;
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t k = 0; k < m; ++k) {
    p[k] = exp_(x[k] + b[k] - top);
    total += p[k];
  }
  const float scale = 1.0f / total;
  float run = 0.0f;
  for (int64_t k = 0; k < m; ++k) {
    p[k] *= scale;
    run += p[k];
    cum[k] = run;  // cumax (Eq. 7)
  }
}

// Each master unit's value over its chunk: out[u] = v[u / chunk].
void expand(const float* v, int64_t hidden, int64_t chunk, float* out) {
  if (chunk == 1) {
    std::memcpy(out, v, hidden * sizeof(float));
    return;
  }
  for (int64_t u = 0; u < hidden; ++u) out[u] = v[u / chunk];
}

// Rows per thread: at least ATen's grain of element-wise work, 32768 units
// (at::internal::GRAIN_SIZE, whose header would triple the build time), so a
// step of a few short rows stays on one thread, as ATen's own kernels would.
inline int64_t grain(int64_t units) { return std::max<int64_t>(1, 32768 / units); }

// One step forward.  z + bias: pre-activations (z one [n, G] per direction,
// bias [D, 1, G]); c_prev: [D, n, hidden],
// or empty at the first step (c = 0); writes c_new and h [D, n, hidden] and,
// when act is not empty, the activated gates (sigmoid f, i, o; tanh c_hat; the
// master softmax probabilities) to act (one [n, G] per direction), which may alias z;
// c_new may alias c_prev.
void step_forward(const std::vector<at::Tensor>& z, const at::Tensor& bias, const at::Tensor& c_prev,
                  const std::vector<at::Tensor>& act, const at::Tensor& c_new, const at::Tensor& h, int64_t chunk) {
  const int64_t num_dir = c_new.size(0), n = c_new.size(1), g = bias.size(2), hidden = c_new.size(2);
  const int64_t n_chunk = hidden / chunk;
  TORCH_CHECK(g == 4 * hidden + 2 * n_chunk, message("gates: expected ", 4 * hidden + 2 * n_chunk, " units, got ", g));
  check(z, "z", num_dir, n, g);
  check(bias, "bias", num_dir, 1, g);
  check(c_new, "c_new", num_dir, n, hidden);
  check(h, "h", num_dir, n, hidden);
  const bool has_prev = present(c_prev), save = !act.empty();
  if (has_prev) check(c_prev, "c_prev", num_dir, n, hidden);
  if (save) check(act, "act", num_dir, n, g);
  const Rows zs(z), bs(bias), cps(c_prev), as(act), cs(c_new), hs(h);
  at::parallel_for(0, num_dir * n, grain(g), [&](int64_t begin, int64_t end) {
    // master gates per chunk and per unit, a zero previous cell state, and
    // where the gates go when they are not saved
    std::vector<float> buf(4 * n_chunk + 3 * hidden + g, 0.0f);
    float *pf = buf.data(), *pi = pf + n_chunk, *mf = pi + n_chunk, *mi = mf + n_chunk;
    float *mfe = mi + n_chunk, *mie = mfe + hidden, *zero = mie + hidden, *scratch = zero + hidden;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t d = r / n, row = r % n;
      const float *zr = zs(d, row), *br = bs(d, 0);
      softmax_cumsum(zr + 4 * hidden, br + 4 * hidden, n_chunk, pf, mf);  // Eq. 8: master forget gate
      softmax_cumsum(zr + 4 * hidden + n_chunk, br + 4 * hidden + n_chunk, n_chunk, pi, mi);
      for (int64_t k = 0; k < n_chunk; ++k) mi[k] = 1.0f - mi[k];  // Eq. 9: master input gate
      expand(mf, hidden, chunk, mfe);
      expand(mi, hidden, chunk, mie);
      const float* cp = has_prev ? cps(d, row) : zero;
      float *ar = save ? as(d, row) : scratch, *cr = cs(d, row), *hr = hs(d, row);
      // unit u reads z and c_prev at u before writing act and c at u: aliasing is safe
#pragma omp simd
      for (int64_t u = 0; u < hidden; ++u) {
        const float f = sigmoid(zr[u] + br[u]), i = sigmoid(zr[hidden + u] + br[hidden + u]);
        const float o = sigmoid(zr[2 * hidden + u] + br[2 * hidden + u]), c_hat = tanh_(zr[3 * hidden + u] + br[3 * hidden + u]);
        const float w = mfe[u] * mie[u];            // Eq. 3
        const float f_hat = f * w + (mfe[u] - w);   // Eq. 4
        const float i_hat = i * w + (mie[u] - w);   // Eq. 5
        const float c = f_hat * cp[u] + i_hat * c_hat;  // Eq. 6
        cr[u] = c;
        hr[u] = o * tanh_(c);
        ar[u] = f;
        ar[hidden + u] = i;
        ar[2 * hidden + u] = o;
        ar[3 * hidden + u] = c_hat;
      }
      std::memcpy(ar + 4 * hidden, pf, n_chunk * sizeof(float));
      std::memcpy(ar + 4 * hidden + n_chunk, pi, n_chunk * sizeof(float));
    }
  });
}

// One step backward: the gradients w.r.t. the step's pre-activations.  act:
// the activated gates, one [n, G] per direction; c, c_prev: the step's cell states and the
// previous step's (c_prev empty at the first step); dh = rec for rows below
// rec's row count (rec: one [n_rec, hidden] per direction, or none; the later
// step's recurrent gradient, upstream gradient included), else gh; dc [D, >= n, hidden] holds the later step's cell
// gradient (zero for rows that end here) and gets dc * f_hat for the earlier
// step; dg (one [n, G] per direction) gets the gate gradients (it may alias act).
void step_backward(const std::vector<at::Tensor>& act, const at::Tensor& c_prev, const at::Tensor& c,
                   const at::Tensor& gh, const std::vector<at::Tensor>& rec, const at::Tensor& dc,
                   const std::vector<at::Tensor>& dg, int64_t chunk) {
  TORCH_CHECK(!act.empty(), "act: expected one tensor per direction");
  const int64_t num_dir = c.size(0), n = c.size(1), g = act[0].size(1), hidden = c.size(2);
  const int64_t n_chunk = hidden / chunk;
  TORCH_CHECK(g == 4 * hidden + 2 * n_chunk, message("gates: expected ", 4 * hidden + 2 * n_chunk, " units, got ", g));
  check(act, "act", num_dir, n, g);
  check(c, "c", num_dir, n, hidden);
  check(gh, "gh", num_dir, n, hidden);
  check(dg, "dg", num_dir, n, g);
  check(dc, "dc", num_dir, dc.size(1), hidden);
  TORCH_CHECK(dc.size(1) >= n, "dc: fewer rows than the step");
  const bool has_prev = present(c_prev);
  if (has_prev) check(c_prev, "c_prev", num_dir, n, hidden);
  const int64_t n_rec = rec.empty() ? 0 : rec[0].size(0);
  if (n_rec > 0) check(rec, "rec", num_dir, n_rec, hidden);
  TORCH_CHECK(n_rec <= n, "rec: more rows than the step");
  const Rows as(act), cps(c_prev), cs(c), ghs(gh), recs(rec), dcs(dc), dgs(dg);
  at::parallel_for(0, num_dir * n, grain(g), [&](int64_t begin, int64_t end) {
    // master gates and their gradients per chunk and per unit, a zero previous cell state
    std::vector<float> buf(6 * n_chunk + 5 * hidden, 0.0f);
    float *pf = buf.data(), *pi = pf + n_chunk, *mf = pi + n_chunk, *mi = mf + n_chunk;
    float *dmf = mi + n_chunk, *dmi = dmf + n_chunk;
    float *mfe = dmi + n_chunk, *mie = mfe + hidden, *dmfe = mie + hidden, *dmie = dmfe + hidden;
    float* zero = dmie + hidden;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t d = r / n, row = r % n;
      const float* ar = as(d, row);
      std::memcpy(pf, ar + 4 * hidden, n_chunk * sizeof(float));
      std::memcpy(pi, ar + 4 * hidden + n_chunk, n_chunk * sizeof(float));
      float run_f = 0.0f, run_i = 0.0f;
      for (int64_t k = 0; k < n_chunk; ++k) {
        run_f += pf[k];
        run_i += pi[k];
        mf[k] = run_f;
        mi[k] = 1.0f - run_i;
      }
      expand(mf, hidden, chunk, mfe);
      expand(mi, hidden, chunk, mie);
      const float* cp = has_prev ? cps(d, row) : zero;
      const float *cr = cs(d, row), *dh = row < n_rec ? recs(d, row) : ghs(d, row);
      float *dcr = dcs(d, row), *dgr = dgs(d, row);
      // unit u reads act at u before writing dg at u: aliasing is safe
#pragma omp simd
      for (int64_t u = 0; u < hidden; ++u) {
        const float f = ar[u], i = ar[hidden + u], o = ar[2 * hidden + u], c_hat = ar[3 * hidden + u];
        const float w = mfe[u] * mie[u], nf = 1.0f - f, ni = 1.0f - i;
        const float tc = tanh_(cr[u]);
        // h = o * tanh(c);  c = f_hat * c_prev + i_hat * c_hat (Eq. 6)
        const float dcu = dcr[u] + dh[u] * o * (1.0f - tc * tc);
        const float f_hat = mfe[u] - w * nf, i_hat = mie[u] - w * ni;  // Eq. 4, 5
        const float d_f_hat = dcu * cp[u], d_i_hat = dcu * c_hat;
        const float neg_dw = d_f_hat * nf + d_i_hat * ni;  // -dL/dw (Eq. 3)
        dgr[u] = d_f_hat * w * f * nf;
        dgr[hidden + u] = d_i_hat * w * i * ni;
        dgr[2 * hidden + u] = dh[u] * tc * o * (1.0f - o);
        dgr[3 * hidden + u] = dcu * i_hat * (1.0f - c_hat * c_hat);
        dmfe[u] = d_f_hat - neg_dw * mie[u];  // dL/d cumax of each unit (Eq. 8, 9)
        dmie[u] = neg_dw * mfe[u] - d_i_hat;
        dcr[u] = dcu * f_hat;
      }
      if (chunk == 1) {
        std::memcpy(dmf, dmfe, hidden * sizeof(float));
        std::memcpy(dmi, dmie, hidden * sizeof(float));
      } else {  // a master unit's gradient: its chunk's sum
        for (int64_t k = 0; k < n_chunk; ++k) dmf[k] = dmi[k] = 0.0f;
        for (int64_t u = 0; u < hidden; ++u) {
          dmf[u / chunk] += dmfe[u];
          dmi[u / chunk] += dmie[u];
        }
      }
      // cumsum backward (suffix sums), then softmax backward (Eq. 7)
      float total_f = 0.0f, total_i = 0.0f;
      for (int64_t k = n_chunk - 1; k >= 0; --k) {
        total_f += dmf[k];
        total_i += dmi[k];
        dmf[k] = total_f;
        dmi[k] = total_i;
      }
      float dot_f = 0.0f, dot_i = 0.0f;
#pragma omp simd reduction(+ : dot_f, dot_i)
      for (int64_t k = 0; k < n_chunk; ++k) {
        dot_f += pf[k] * dmf[k];
        dot_i += pi[k] * dmi[k];
      }
      for (int64_t k = 0; k < n_chunk; ++k) {
        dgr[4 * hidden + k] = pf[k] * (dmf[k] - dot_f);
        dgr[4 * hidden + n_chunk + k] = pi[k] * (dmi[k] - dot_i);
      }
    }
  });
}

// base[d] + h[d] @ w[d] for every direction: oneDNN's matmul on packed[d]
// (the weight laid out by torch.ops.mkldnn._reorder_linear_weight) with the
// sum fused in, or addmm on w [D, K, M] when packed is empty.
std::vector<at::Tensor> recurrent_matmuls(const std::vector<at::Tensor>& base, const std::vector<at::Tensor>& h,
                                          const at::Tensor& w, const std::vector<at::Tensor>& packed) {
  static const auto linear = c10::Dispatcher::singleton()
      .findSchemaOrThrow("mkldnn::_linear_pointwise", "binary")
      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                        c10::string_view)>();
  std::vector<at::Tensor> out;
  for (size_t d = 0; d < base.size(); ++d) {
    out.push_back(packed.empty() ? at::_ops::addmm::call(base[d], h[d], w.select(0, static_cast<int64_t>(d)), 1, 1)
                                 : linear.call(h[d], base[d], packed[d], std::nullopt, "add"));
  }
  return out;
}

// Steps of packed rows: each of at least one row, none longer than the one
// before, total rows in all.
void check_steps(const std::vector<int64_t>& batch_sizes, int64_t total, const char* name) {
  int64_t sum = 0;
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    TORCH_CHECK(batch_sizes[t] > 0 && (t == 0 || batch_sizes[t] <= batch_sizes[t - 1]),
                message("batch_sizes: expected positive and non-increasing, got ", batch_sizes));
    sum += batch_sizes[t];
  }
  TORCH_CHECK(sum == total, message(name, ": expected ", sum, " rows (the sum of batch_sizes), got ", total));
}

std::vector<at::Tensor> rows_of(const std::vector<at::Tensor>& ts, int64_t start, int64_t n) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.narrow(0, start, n));
  return out;
}

std::vector<at::Tensor> unbind(const at::Tensor& t) {
  std::vector<at::Tensor> out;
  for (int64_t d = 0; d < t.size(0); ++d) out.push_back(t.select(0, d));
  return out;
}

}  // namespace

// The forward over all steps.  xg: the input projections, one [N, G] per
// direction (the bias [D, 1, G] is added here); w_hh [D, hidden, G] and
// packed (its oneDNN layouts, or none): the recurrent weights; out
// [D, >= N, hidden] gets the hidden states.  To save for the backward, act
// is one [N, G] per direction (it may be xg itself) and gets the activated
// gates (sigmoid f, i, o; tanh c_hat; the master softmax probabilities),
// and cells [D, N, hidden] every step's cell state; else act is empty and
// cells [D, >= batch_sizes[0], hidden] holds one step's.
void forward(const std::vector<at::Tensor>& xg, const at::Tensor& bias, const at::Tensor& w_hh,
             const std::vector<at::Tensor>& packed, std::vector<int64_t> batch_sizes,
             const std::vector<at::Tensor>& act, const at::Tensor& cells, const at::Tensor& out, int64_t chunk) {
  TORCH_CHECK(!xg.empty(), "xg: expected one tensor per direction");
  check_steps(batch_sizes, xg[0].size(0), "xg");
  const bool save = !act.empty();
  int64_t start = 0, prev = 0;  // the first rows of this step and of the previous one
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    const int64_t n = batch_sizes[t];
    const auto rows = rows_of(xg, start, n);
    const auto z = t == 0 ? rows : recurrent_matmuls(rows, unbind(out.narrow(1, prev, n)), w_hh, packed);
    const at::Tensor c_new = cells.narrow(1, save ? start : 0, n);
    const at::Tensor c_prev = t == 0 ? at::Tensor() : (save ? cells.narrow(1, prev, n) : c_new);
    step_forward(z, bias, c_prev, save ? rows_of(act, start, n) : act, c_new, out.narrow(1, start, n), chunk);
    prev = start;
    start += n;
  }
}

// The backward over all steps (back-propagation through time): the gate
// gradients overwrite the gates act (one [N, G] per direction) step by
// step.  grad_hs [D, >= N, hidden]: the gradient w.r.t. the hidden states;
// w_t [D, G, hidden] and packed_t (its oneDNN layouts, or none): the
// transposed recurrent weights; cells: every step's cell state; dc
// [D, batch_sizes[0], hidden]: zeros, the cell gradient's buffer.
void backward(const at::Tensor& grad_hs, const at::Tensor& w_t, const std::vector<at::Tensor>& packed_t,
              const std::vector<at::Tensor>& act, const at::Tensor& cells, std::vector<int64_t> batch_sizes,
              const at::Tensor& dc, int64_t chunk) {
  TORCH_CHECK(!act.empty(), "act: expected one tensor per direction");
  check_steps(batch_sizes, act[0].size(0), "act");
  std::vector<int64_t> starts(batch_sizes.size(), 0);
  for (size_t t = 1; t < batch_sizes.size(); ++t) starts[t] = starts[t - 1] + batch_sizes[t - 1];
  std::vector<at::Tensor> rec;  // dh from the later step, upstream gradient included
  for (int64_t t = static_cast<int64_t>(batch_sizes.size()) - 1; t >= 0; --t) {
    const int64_t start = starts[t], n = batch_sizes[t];
    const auto rows = rows_of(act, start, n);
    const at::Tensor c_prev = t > 0 ? cells.narrow(1, starts[t - 1], n) : at::Tensor();
    step_backward(rows, c_prev, cells.narrow(1, start, n), grad_hs.narrow(1, start, n), rec, dc, rows, chunk);
    if (t > 0) rec = recurrent_matmuls(unbind(grad_hs.narrow(1, starts[t - 1], n)), rows, w_t, packed_t);
  }
}

// torch.ops.fairseq_posattn_onlstm.forward / backward (they write into their
// tensor arguments as documented above, and return nothing)
TORCH_LIBRARY(fairseq_posattn_onlstm, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
}
