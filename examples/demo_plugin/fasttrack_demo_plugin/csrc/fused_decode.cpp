// Native float32 kernels of the demo decode backend's fused ops (CPU).
//
// Registered as fasttrack_demo::fused_decode_qkv_rope_f32 and
// fasttrack_demo::fused_decode_mlp_f32: one dispatcher call per fused block, with the
// norms, rotary embedding and activation as plain loops and the GEMMs through the
// optimized path's own oneDNN handles (vLLM's _C::onednn_mm, looked up by name) or
// at::mm when a handle is not given (and for the chunks of a split-K down projection). Same formulas as the Python implementations in
// ops.py, which remain the reference and serve every other dtype.
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cmath>
#include <optional>

namespace {

at::Tensor gemm(const at::Tensor& x, const at::Tensor& w_t, const std::optional<at::Tensor>& handle) {
  if (handle.has_value() && handle->defined()) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("_C::onednn_mm", "")
                         .typed<void(at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                     const at::Tensor&)>();
    at::Tensor out = at::empty({x.size(0), w_t.size(1)}, x.options());
    op.call(out, x, std::nullopt, *handle);
    return out;
  }
  return at::mm(x, w_t);
}

// new_residual = hidden (+ residual); normed = new_residual * rsqrt(mean(new_residual^2) + eps) * weight
void add_rms_norm(const float* hidden, const float* residual, const float* weight, float* new_residual,
                  float* normed, int64_t rows, int64_t dim, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* h = hidden + r * dim;
    float* s = new_residual + r * dim;
    float* o = normed + r * dim;
    float acc = 0.f;
    for (int64_t i = 0; i < dim; ++i) {
      float v = residual ? h[i] + residual[r * dim + i] : h[i];
      s[i] = v;
      acc += v * v;
    }
    const float inv = 1.f / std::sqrt(acc / static_cast<float>(dim) + static_cast<float>(eps));
    for (int64_t i = 0; i < dim; ++i) o[i] = s[i] * inv * weight[i];
  }
}

// NeoX-style rotary embedding in place on rows of `heads` heads of `head_size`.
void rope_neox(float* x, const int64_t* positions, const float* cos_sin, int64_t rows, int64_t heads,
               int64_t head_size, int64_t rot_dim) {
  const int64_t half = rot_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = cos_sin + positions[r] * rot_dim;
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* p = x + (r * heads + hd) * head_size;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[i], s = cs[half + i];
        const float x1 = p[i], x2 = p[half + i];
        p[i] = x1 * c - x2 * s;
        p[half + i] = x2 * c + x1 * s;
      }
    }
  }
}

void check_f32(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.device().is_cpu(), name, " must be on the CPU");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> qkv_rope_f32(
    const at::Tensor& hidden, const std::optional<at::Tensor>& residual, const at::Tensor& norm_weight,
    const at::Tensor& w_qkv_t, const std::optional<at::Tensor>& w_qkv_handle, const at::Tensor& positions,
    const at::Tensor& cos_sin_cache, double eps, int64_t head_size, int64_t q_size, int64_t kv_size) {
  check_f32(hidden, "hidden");
  check_f32(cos_sin_cache, "cos_sin_cache");
  const int64_t rows = hidden.size(0), dim = hidden.size(1);
  TORCH_CHECK(w_qkv_t.size(1) == q_size + 2 * kv_size, "w_qkv_t has ", w_qkv_t.size(1), " columns");
  at::Tensor h = hidden.contiguous();
  at::Tensor res = residual.has_value() && residual->defined() ? residual->contiguous() : at::Tensor();
  at::Tensor w = norm_weight.contiguous();
  at::Tensor new_residual = at::empty({rows, dim}, hidden.options());
  at::Tensor normed = at::empty({rows, dim}, hidden.options());
  add_rms_norm(h.data_ptr<float>(), res.defined() ? res.data_ptr<float>() : nullptr, w.data_ptr<float>(),
               new_residual.data_ptr<float>(), normed.data_ptr<float>(), rows, dim, eps);
  at::Tensor qkv = gemm(normed, w_qkv_t, w_qkv_handle);
  at::Tensor q = qkv.narrow(1, 0, q_size).contiguous();
  at::Tensor k = qkv.narrow(1, q_size, kv_size).contiguous();
  at::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size).contiguous();
  at::Tensor pos = positions.to(at::kLong).contiguous();
  at::Tensor cache = cos_sin_cache.contiguous();
  const int64_t rot_dim = cache.size(1);
  TORCH_CHECK(rot_dim <= head_size && rot_dim % 2 == 0, "rotary dim ", rot_dim, " for head size ", head_size);
  rope_neox(q.data_ptr<float>(), pos.data_ptr<int64_t>(), cache.data_ptr<float>(), rows, q_size / head_size,
            head_size, rot_dim);
  rope_neox(k.data_ptr<float>(), pos.data_ptr<int64_t>(), cache.data_ptr<float>(), rows, kv_size / head_size,
            head_size, rot_dim);
  return {q, k, v, new_residual};
}

std::tuple<at::Tensor, at::Tensor> mlp_f32(const at::Tensor& attn_out, const at::Tensor& residual,
                                           const at::Tensor& w_o_t, const std::optional<at::Tensor>& w_o_handle,
                                           const at::Tensor& norm_weight, const at::Tensor& w_gate_up_t,
                                           const std::optional<at::Tensor>& w_gate_up_handle,
                                           const at::Tensor& w_down_t,
                                           const std::optional<at::Tensor>& w_down_handle, double eps,
                                           int64_t split_k) {
  check_f32(attn_out, "attn_out");
  at::Tensor hidden = gemm(attn_out.contiguous(), w_o_t, w_o_handle);
  const int64_t rows = hidden.size(0), dim = hidden.size(1);
  at::Tensor res = residual.contiguous();
  at::Tensor w = norm_weight.contiguous();
  at::Tensor new_residual = at::empty({rows, dim}, hidden.options());
  at::Tensor normed = at::empty({rows, dim}, hidden.options());
  add_rms_norm(hidden.data_ptr<float>(), res.data_ptr<float>(), w.data_ptr<float>(), new_residual.data_ptr<float>(),
               normed.data_ptr<float>(), rows, dim, eps);
  at::Tensor gate_up = gemm(normed, w_gate_up_t, w_gate_up_handle);
  const int64_t inter = gate_up.size(1) / 2;
  at::Tensor act = at::empty({rows, inter}, hidden.options());
  const float* gu = gate_up.data_ptr<float>();
  float* a = act.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const float g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
      a[r * inter + i] = g / (1.f + std::exp(-g)) * u;
    }
  }
  if (split_k <= 1) return {gemm(act, w_down_t, w_down_handle), new_residual};
  // split-K down projection: K chunks of inter / split_k (the last takes the rest), summed in order
  const int64_t chunk = inter / split_k;
  at::Tensor out = at::mm(act.narrow(1, 0, chunk), w_down_t.narrow(0, 0, chunk));
  for (int64_t i = 1; i < split_k; ++i) {
    const int64_t lo = i * chunk, hi = i == split_k - 1 ? inter : (i + 1) * chunk;
    out.add_(at::mm(act.narrow(1, lo, hi - lo), w_down_t.narrow(0, lo, hi - lo)));
  }
  return {out, new_residual};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(fasttrack_demo, m) {
  m.def(
      "fused_decode_qkv_rope_f32(Tensor hidden, Tensor? residual, Tensor norm_weight, Tensor w_qkv_t, "
      "Tensor? w_qkv_handle, Tensor positions, Tensor cos_sin_cache, float eps, int head_size, int q_size, "
      "int kv_size) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "fused_decode_mlp_f32(Tensor attn_out, Tensor residual, Tensor w_o_t, Tensor? w_o_handle, "
      "Tensor norm_weight, Tensor w_gate_up_t, Tensor? w_gate_up_handle, Tensor w_down_t, "
      "Tensor? w_down_handle, float eps, int split_k) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(fasttrack_demo, CPU, m) {
  m.impl("fused_decode_qkv_rope_f32", &qkv_rope_f32);
  m.impl("fused_decode_mlp_f32", &mlp_f32);
}
