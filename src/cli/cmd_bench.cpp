// `clocklm bench train`: times full training steps of a config on synthetic tokens (no data needed)
// and reports tokens/s, model FLOP/s and the fraction of this machine's measured bf16 matmul
// ceiling. Per-phase times (forward, backward, optimizer) show where a step goes.
// `clocklm bench gemm`: one matmul shape alone (a device's matmul peak).
// `clocklm bench attention`: times the causal attention kernel alone (forward, backward) at a given
// shape and precision (--precision both: fp32 and bf16 in one run) and reports GFLOP/s and the
// device description (which attention implementation ran: CLOCKLM_CPU_ATTENTION,
// CLOCKLM_CUDA_ATTENTION), for work on that kernel.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/common.h"
#include "config/config.h"
#include "model/gpt.h"
#include "backend/backend.h"
#include "backend/profiled_backend.h"
#include "core/profiler.h"
#include "optim/optim.h"
#include "train/train_setup.h"
#include "train/train_step.h"

namespace clm {

namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string device = "auto";
  int batch = 4, seq = 256, steps = 5, warmup = 2, threads = 0;
  double ceiling = 0;
  bool json = false, fp32 = false, profile = false, no_optim = false;
};

struct GemmTime {
  double best = 0, mean = 0;  // seconds per gemm
};

// C[M,N] = A[M,K] B[N,K]^T (the linear layer's layout) in one precision on a backend, on random
// inputs: best and mean of `reps` timed runs after a warm-up.
GemmTime time_gemm(Backend& be, MatPrec prec, int64_t M, int64_t N, int64_t K, int reps) {
  const DType t = matmul_dtype(prec);
  DeviceBuffer a(be, size_t(M) * K * dtype_size(t)), b(be, size_t(N) * K * dtype_size(t));
  DeviceBuffer c(be, size_t(M) * N * 4), f(be, size_t(std::max(M, N)) * K * 4);
  std::vector<float> host(size_t(std::max(M, N)) * K);
  Rng rng(7);
  for (float& v : host) v = rng.normal();
  be.to_device(f.as<float>(), host.data(), host.size() * 4);
  be.convert(f.as<float>(), a.as<void>(), M * K, t);
  be.convert(f.as<float>(), b.as<void>(), N * K, t);
  be.prepare_gemm(prec, false, true, M, N, K);
  auto timer = be.timer();
  const GemmArgs args{.prec = prec, .trans_b = true, .M = M, .N = N, .K = K, .A = a.as<void>(), .B = b.as<void>(),
                      .C = c.as<float>()};
  be.gemm(args);  // warm-up
  GemmTime g{1e30, 0};
  for (int r = 0; r < reps; ++r) {
    timer->start();
    be.gemm(args);
    const double dt = timer->stop();
    g.best = std::min(g.best, dt);
    g.mean += dt / reps;
  }
  return g;
}

// GFLOP/s of a large square gemm in one precision on a backend: best of `reps` after a warm-up.
// A GPU needs a larger matrix than a CPU to reach its peak.
double measure_ceiling(Backend& be, MatPrec prec, int reps = 5) {
  const int64_t n = be.host_visible() ? 2048 : 8192;
  return 2.0 * double(n) * n * n / time_gemm(be, prec, n, n, n, reps).best / 1e9;
}

void run_bench_train(const BenchArgs& a) {
  std::vector<std::string> sets = a.sets;
  if (a.fp32) sets.push_back("model.matmul_precision=fp32");
  RunConfig rc = load_config(a.config, sets);
  // Presets like d<N> take the vocabulary from the dataset; synthetic tokens use a 32K vocabulary.
  if (rc.model.vocab_size == 0) rc.model.vocab_size = 32768;
  validate(rc);
  ModelConfig& mc = rc.model;
  if (a.batch <= 0 || a.seq <= 0 || a.steps <= 0 || a.warmup < 0)
    fail("bench: batch, seq and steps must be positive");
  int threads = a.threads > 0 ? a.threads : default_threads();

  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  TrainSetupOptions setup_options;
  setup_options.batch = a.batch;
  setup_options.seq_len = a.seq;
  setup_options.seed = 1234;
  setup_options.optimizer = !a.no_optim;
  TrainSetup setup = build_train_setup(rc, *be, setup_options);
  GPT& model = *setup.model;
  std::unique_ptr<Optimizer>& opt = setup.optimizer;
  const std::string ns_prec = prec_name(resolve_precision(rc.optim.matrix.ns_precision, *be));
  std::string opt_desc = a.no_optim ? "none (forward+backward only)"
                                    : fmt::format("matrix={} embed={} head={} scalar={}",
                                                  rc.optim.matrix.kind, rc.optim.embed.kind,
                                                  rc.optim.head.kind, rc.optim.scalar.kind);
  const int64_t N = int64_t(a.batch) * a.seq;
  std::vector<int32_t> in(N), tg(N);
  fill_synthetic_tokens(42, mc.vocab_size, in, tg);

  Profiler prof;
  if (a.profile) {
    model.set_profiler(&prof);
    if (opt) opt->set_profiler(&prof);
  }
  const ScheduleValues sched{1.0f, 1.0f, rc.optim.matrix.momentum};
  // Recorded steps (train.graph) where the device records and no profile is asked for: they have
  // no phase boundaries to time, so the phases are then reported as 0.
  StepGraph graph(graph_mode_from_name(rc.train.graph));
  const bool recorded = graph.active(*be) && !a.profile;
  StepOptions so;
  so.phase_times = !recorded;
  so.graph = recorded ? &graph : nullptr;
  double t_fwd = 0, t_bwd = 0, t_opt = 0, t_step = 0, best_step = 1e30;
  double loss = 0;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    StepResult r = train_step(model, opt.get(), in.data(), tg.data(), 1, a.batch, a.seq, sched, so);
    loss = r.loss;
    if (s + 1 == a.warmup) prof.clear();
    if (s >= a.warmup) {
      t_fwd += r.forward_seconds;
      t_bwd += r.backward_seconds;
      t_opt += r.optimizer_seconds;
      t_step += r.seconds;
      best_step = std::min(best_step, r.seconds);
    }
  }
  double step = t_step / a.steps;
  double tps = double(N) / step;
  double fpt = model.flops_per_token(a.seq);
  double mflops = tps * fpt;
  // The faster of the two matmul ceilings is the one a well-chosen precision can approach.
  double ceil_bf16 = 0, ceil_fp32 = 0, ceiling = a.ceiling;
  if (ceiling <= 0) {
    ceil_bf16 = measure_ceiling(*be, MatPrec::BF16);
    ceil_fp32 = measure_ceiling(*be, MatPrec::F32);
    ceiling = std::max(ceil_bf16, ceil_fp32);
  }
  nlohmann::json j = {
      {"config", a.config},
      {"params", model.num_params()},
      {"batch", a.batch},
      {"seq", a.seq},
      {"threads", threads},
      {"steps", a.steps},
      {"device", be->description()},
      {"matmul_precision", prec_name(model.matmul_precision())},
      {"ns_precision", ns_prec},
      {"optimizer", opt_desc},
      {"step_seconds", step},
      {"best_step_seconds", best_step},
      {"forward_seconds", t_fwd / a.steps},
      {"backward_seconds", t_bwd / a.steps},
      {"optimizer_seconds", t_opt / a.steps},
      {"tokens_per_second", tps},
      {"flops_per_token", fpt},
      {"model_flops_per_second", mflops},
      {"matmul_ceiling_gflops", ceiling},
      {"fraction_of_ceiling", mflops / (ceiling * 1e9)},
      {"loss", loss},
      {"graph", recorded ? fmt::format("{} ({} of {} steps replayed)", rc.train.graph, graph.stats().replayed,
                                       a.warmup + a.steps)
                         : std::string("off")},
  };
  if (ceil_bf16 > 0) {
    j["matmul_ceiling_bf16_gflops"] = ceil_bf16;
    j["matmul_ceiling_fp32_gflops"] = ceil_fp32;
  }
  if (a.profile) {  // per-op totals over the timed steps
    struct Agg { double t = 0, fl = 0, by = 0; int n = 0; };
    std::map<std::string, Agg> agg;
    for (auto& e : prof.events) {
      auto& g = agg[std::string(e.name) + "/" + e.phase];
      g.t += e.end - e.start; g.fl += e.flops; g.by += e.bytes; g.n++;
    }
    std::vector<std::pair<std::string, Agg>> rows(agg.begin(), agg.end());
    std::sort(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.second.t > y.second.t; });
    double tot = t_step;
    std::fprintf(stderr, "device: %s\n", be->description().c_str());
    std::fprintf(stderr, "%-26s %9s %6s %9s %8s\n", "op/phase", "ms/step", "%", "GFLOP/s", "GB/s");
    for (auto& [k, g] : rows)
      std::fprintf(stderr, "%-26s %9.2f %6.1f %9.1f %8.1f\n", k.c_str(), g.t / a.steps * 1e3,
                   100 * g.t / tot, g.fl / g.t / 1e9, g.by / g.t / 1e9);
  }
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench train  config=%s  params=%.2fM  batch=%dx%d  device=%s  threads=%d  matmul=%s  ns=%s  optimizer=%s\n",
              a.config.c_str(), model.num_params() / 1e6, a.batch, a.seq, be->name().c_str(), threads,
              prec_name(model.matmul_precision()), ns_prec.c_str(), opt_desc.c_str());
  if (recorded)
    std::printf("  step %.1f ms (best %.1f), recorded: %s\n", step * 1e3, best_step * 1e3,
                j["graph"].get<std::string>().c_str());
  else
    std::printf("  step %.1f ms (best %.1f)  = fwd %.1f + bwd %.1f + optim %.1f ms\n", step * 1e3,
                best_step * 1e3, t_fwd / a.steps * 1e3, t_bwd / a.steps * 1e3, t_opt / a.steps * 1e3);
  std::printf("  tokens/s %.0f   model GFLOP/s %.1f   ceiling %.0f GFLOP/s   fraction %.1f%%\n", tps,
              mflops / 1e9, ceiling, 100.0 * mflops / (ceiling * 1e9));
}

struct BenchGemmArgs {
  std::string device = "auto", precision = "bf16";
  int64_t m = 4096, n = 4096, k = 4096;
  int reps = 10, threads = 0;
  bool json = false;
};

// One gemm shape alone: the matmul peak of a device in a precision (fp32 accumulation).
void run_bench_gemm(const BenchGemmArgs& a) {
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.reps <= 0) fail("bench gemm: m, n, k and reps must be positive");
  int threads = a.threads > 0 ? a.threads : default_threads();
  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  const MatPrec prec = resolve_precision(a.precision, *be);
  const GemmTime g = time_gemm(*be, prec, a.m, a.n, a.k, a.reps);
  const double flops = 2.0 * double(a.m) * double(a.n) * double(a.k);
  if (a.json) {
    nlohmann::json j = {{"bench", "gemm"}, {"device", be->description()}, {"precision", prec_name(prec)},
                        {"m", a.m}, {"n", a.n}, {"k", a.k}, {"reps", a.reps}, {"ms_best", g.best * 1e3},
                        {"ms_mean", g.mean * 1e3}, {"gflops", flops / g.best / 1e9},
                        {"gflops_mean", flops / g.mean / 1e9}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench gemm  %lldx%lldx%lld  %s  device=%s  best %.3f ms  mean %.3f ms  %.1f GFLOP/s\n",
              (long long)a.m, (long long)a.n, (long long)a.k, prec_name(prec), be->name().c_str(), g.best * 1e3,
              g.mean * 1e3, flops / g.best / 1e9);
}

struct AttnArgs {
  std::string device = "auto", precision = "fp32";
  int batch = 8, heads = 4, kv_heads = 0, seq = 1024, head_dim = 64, reps = 5, threads = 0, window = 0;
  bool json = false;
};

// The precisions `bench attention --precision` names, in the order they run.
std::vector<MatPrec> attention_bench_precisions(const std::string& p) {
  if (p == "fp32") return {MatPrec::F32};
  if (p == "bf16") return {MatPrec::BF16};
  if (p == "both") return {MatPrec::F32, MatPrec::BF16};
  fail("bench attention: --precision must be fp32, bf16 or both, not '{}'", p);
}

// Times attention forward and backward at one matmul precision; the backend's description then
// names the kernel that ran (on the CPU: fp32 or bf16 products). Returns the lines to print, so
// that nothing is printed before the first kernel call (which may fail, e.g. on CLOCKLM_CPU_ISA).
std::string bench_attention_at(const AttnArgs& a, MatPrec prec, int threads) {
  const int Hkv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  const int B = a.batch, H = a.heads, T = a.seq, hd = a.head_dim;
  const size_t nq = (size_t)B * H * T * hd, nkv = (size_t)B * Hkv * T * hd;
  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  auto buf = [&](size_t n) { return DeviceBuffer(*be, n * 4); };
  DeviceBuffer q = buf(nq), k = buf(nkv), v = buf(nkv), o = buf(nq), lse = buf((size_t)B * H * T), dout = buf(nq),
               dq = buf(nq), dk = buf(nkv), dv = buf(nkv);
  Rng rng(7);
  std::vector<float> host;
  for (auto* x : {&q, &k, &v, &dout}) {
    host.resize(x->bytes() / 4);
    for (float& f : host) f = (float)(rng.uniform() * 2 - 1);
    be->to_device(x->as<float>(), host.data(), x->bytes());
  }
  auto timer = be->timer();
  // Causal: query i sees i+1 keys (at most the window); Q K^T and P V are 2 flops per multiply-add
  // each -> forward 4*hd per (query, key) pair; backward recomputes S and forms dP, dV, dK, dQ:
  // 10*hd per pair.
  const double pairs = (double)B * H * T * mean_attended_keys(T, a.window);
  const double fwd_flops = 4.0 * hd * pairs, bwd_flops = 10.0 * hd * pairs;
  auto time_best = [&](auto fn) {
    fn();  // warm-up
    double best = 1e30, sum = 0;
    for (int r = 0; r < a.reps; r++) {
      timer->start();
      fn();
      double dt = timer->stop();
      best = std::min(best, dt);
      sum += dt;
    }
    return std::pair<double, double>{best, sum / a.reps};
  };
  auto [fb, fm] = time_best([&] {
    be->attention_fwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .Tq = T, .Tk = T, .Tk_cap = T,
                       .window = a.window, .prec = prec, .q = q.as<float>(), .k = k.as<float>(),
                       .v = v.as<float>(), .o = o.as<float>(), .lse = lse.as<float>()});
  });
  auto [bb, bm] = time_best([&] {
    be->attention_bwd({.shape = {.B = B, .H = H, .Hkv = Hkv, .hd = hd}, .T = T, .window = a.window,
                       .prec = prec, .q = q.as<float>(), .k = k.as<float>(), .v = v.as<float>(),
                       .o = o.as<float>(), .lse = lse.as<float>(), .dout = dout.as<float>(),
                       .dq = dq.as<float>(), .dk = dk.as<float>(), .dv = dv.as<float>()});
  });
  if (a.json) {
    nlohmann::json j = {{"bench", "attention"}, {"batch", B}, {"heads", H}, {"kv_heads", Hkv}, {"seq", T},
                        {"head_dim", hd}, {"window", a.window}, {"threads", threads}, {"reps", a.reps},
                        {"precision", prec_name(prec)},
                        {"forward_ms_best", fb * 1e3}, {"forward_ms_mean", fm * 1e3}, {"forward_gflops", fwd_flops / fb / 1e9},
                        {"backward_ms_best", bb * 1e3}, {"backward_ms_mean", bm * 1e3}, {"backward_gflops", bwd_flops / bb / 1e9},
                        {"device", be->description()}, {"version", CLOCKLM_VERSION}};
    return j.dump() + "\n";
  }
  return fmt::format("  precision {}, device: {}\n", prec_name(prec), be->description()) +
         fmt::format("  {:<9} {:10.2f} {:10.2f} {:10.1f}\n", "forward", fb * 1e3, fm * 1e3, fwd_flops / fb / 1e9) +
         fmt::format("  {:<9} {:10.2f} {:10.2f} {:10.1f}\n", "backward", bb * 1e3, bm * 1e3, bwd_flops / bb / 1e9);
}

void run_bench_attention(const AttnArgs& a) {
  const int Hkv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  if (a.batch <= 0 || a.heads <= 0 || a.seq <= 0 || a.head_dim <= 0 || a.reps <= 0 || a.heads % Hkv != 0)
    fail("bench attention: batch, heads, seq, head-dim and reps must be positive and heads a multiple of kv-heads");
  const std::vector<MatPrec> precs = attention_bench_precisions(a.precision);
  const int threads = a.threads > 0 ? a.threads : default_threads();
  std::string out;
  for (MatPrec prec : precs) out += bench_attention_at(a, prec, threads);
  if (!a.json) {
    std::printf("bench attention  B=%d H=%d Hkv=%d T=%d hd=%d  threads=%d  (causal, best of %d)\n", a.batch,
                a.heads, Hkv, a.seq, a.head_dim, threads, a.reps);
    std::printf("  %-9s %10s %10s %10s\n", "pass", "best ms", "mean ms", "GFLOP/s");
  }
  std::fputs(out.c_str(), stdout);
}

struct NsArgs {
  std::string device = "auto", precision = "auto", coeffs = "quintic", shapes, config;
  std::vector<std::string> sets;
  int64_t rows = 512, cols = 2048;
  int steps = 5, reps = 5, threads = 0, copies = 1;
  bool json = false, one_by_one = false;
};

// "192x576,192x768" -> {{192, 576}, {192, 768}}; throws Error on anything else.
std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    long long r = 0, c = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lldx%lld%c", &r, &c, &tail) != 2 || r <= 0 || c <= 0)
      fail("bench ns: --shapes item '{}' is not ROWSxCOLS (e.g. 192x768)", item);
    out.emplace_back(r, c);
    at = end + 1;
  }
  return out;
}

// Newton-Schulz over several matrices (--shapes, each --copies times): one newton_schulz_many call,
// or with --one-by-one one newton_schulz per matrix (what the optimizer did before batching).
void run_bench_ns_many(const NsArgs& a) {
  if (a.steps <= 0 || a.reps <= 0 || a.copies <= 0) fail("bench ns: steps, reps and copies must be positive");
  const int threads = a.threads > 0 ? a.threads : default_threads();
  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  const MatPrec prec = resolve_precision(a.precision, *be);
  const NsSchedule sched = ns_schedule(a.coeffs, a.steps);
  std::vector<int64_t> rows, cols, off;
  int64_t total = 0;
  double flops = 0;
  for (int k = 0; k < a.copies; ++k)
    for (auto [r, c] : parse_shapes(a.shapes)) {
      rows.push_back(r);
      cols.push_back(c);
      off.push_back(total);
      total += r * c;
      flops += op_cost::newton_schulz(r, c, a.steps, prec).flops;
    }
  DeviceBuffer g(*be, size_t(total) * 4), out(*be, size_t(total) * 4);
  std::vector<float> host(static_cast<size_t>(total));
  Rng rng(3);
  for (float& v : host) v = rng.normal();
  be->to_device(g.as<float>(), host.data(), host.size() * 4);
  std::vector<const float*> in;
  std::vector<float*> outs;
  for (int64_t o : off) {
    in.push_back(g.as<float>() + o);
    outs.push_back(out.as<float>() + o);
  }
  auto run = [&] {
    if (a.one_by_one) {
      for (size_t i = 0; i < rows.size(); ++i) be->newton_schulz(in[i], outs[i], rows[i], cols[i], sched, prec);
    } else {
      be->newton_schulz_many({.count = int(rows.size()), .G = in.data(), .out = outs.data(), .rows = rows.data(),
                              .cols = cols.data(), .sched = &sched, .prec = prec});
    }
  };
  auto timer = be->timer();
  run();  // warm-up
  double best = 1e30, sum = 0;
  for (int r = 0; r < a.reps; ++r) {
    timer->start();
    run();
    const double dt = timer->stop();
    best = std::min(best, dt);
    sum += dt;
  }
  const char* mode = a.one_by_one ? "one-by-one" : "batched";
  if (a.json) {
    nlohmann::json j = {{"bench", "newton_schulz_many"}, {"shapes", a.shapes}, {"copies", a.copies},
                        {"matrices", rows.size()}, {"mode", mode}, {"steps", a.steps},
                        {"precision", prec_name(prec)}, {"threads", threads}, {"ms_best", best * 1e3},
                        {"ms_mean", sum / a.reps * 1e3}, {"gflops", flops / best / 1e9}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench ns  %zu matrices (%s x%d)  %s  steps=%d  precision=%s  threads=%d  best %.2f ms  mean %.2f ms  "
              "%.1f GFLOP/s\n",
              rows.size(), a.shapes.c_str(), a.copies, mode, a.steps, prec_name(prec), threads, best * 1e3,
              sum / a.reps * 1e3, flops / best / 1e9);
}

// Muon's Newton-Schulz of one training step of a config (--config): the model and optimizer built
// on the device as for training, then the optimizer's newton_schulz_pass timed (its batches, the
// config's schedules and precisions): ms per step.
void run_bench_ns_config(const NsArgs& a) {
  if (a.reps <= 0) fail("bench ns: reps must be positive");
  RunConfig rc = load_config(a.config, a.sets);
  if (rc.model.vocab_size == 0) rc.model.vocab_size = 32768;  // as bench train: no dataset
  validate(rc);
  const int threads = a.threads > 0 ? a.threads : default_threads();
  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  TrainSetupOptions setup_options;
  setup_options.seq_len = 64;  // the activations play no part; keep them small
  TrainSetup setup = build_train_setup(rc, *be, setup_options);
  Optimizer& opt = *setup.optimizer;
  const NsPassInfo info = opt.newton_schulz_info();
  opt.warmup();
  auto timer = be->timer();
  double best = 1e30, sum = 0;
  for (int r = 0; r < a.reps; ++r) {
    timer->start();
    opt.newton_schulz_pass();
    const double dt = timer->stop();
    best = std::min(best, dt);
    sum += dt;
  }
  const std::string prec = prec_name(resolve_precision(rc.optim.matrix.ns_precision, *be));
  if (a.json) {
    nlohmann::json j = {{"bench", "newton_schulz_config"}, {"config", a.config}, {"device", be->description()},
                        {"matrices", info.matrices}, {"calls", info.calls}, {"shapes", info.shapes},
                        {"matrix_ns_precision", prec}, {"threads", threads}, {"ms_best", best * 1e3},
                        {"ms_mean", sum / a.reps * 1e3}, {"gflops", info.flops / best / 1e9}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench ns  config=%s  %d matrices (%d shapes) in %d newton_schulz_many calls  precision=%s  "
              "threads=%d  device=%s\n  per step: best %.2f ms  mean %.2f ms  %.1f GFLOP/s\n",
              a.config.c_str(), info.matrices, info.shapes, info.calls, prec.c_str(), threads,
              be->description().c_str(), best * 1e3, sum / a.reps * 1e3, info.flops / best / 1e9);
}

// Newton-Schulz alone on one matrix shape: Muon's cost per matrix and step, and its GFLOP/s.
void run_bench_ns(const NsArgs& a) {
  if (!a.config.empty()) return run_bench_ns_config(a);
  if (!a.shapes.empty()) return run_bench_ns_many(a);
  if (a.rows <= 0 || a.cols <= 0 || a.steps <= 0 || a.reps <= 0) fail("bench ns: rows, cols, steps and reps must be positive");
  int threads = a.threads > 0 ? a.threads : default_threads();
  std::shared_ptr<Backend> be = make_backend(a.device);
  be->set_threads(threads);
  const MatPrec prec = resolve_precision(a.precision, *be);
  const NsSchedule sched = ns_schedule(a.coeffs, a.steps);
  const int64_t n = a.rows * a.cols;
  DeviceBuffer g(*be, size_t(n) * 4), out(*be, size_t(n) * 4);
  std::vector<float> host(static_cast<size_t>(n));
  Rng rng(3);
  for (float& v : host) v = rng.normal();
  be->to_device(g.as<float>(), host.data(), host.size() * 4);
  auto timer = be->timer();
  be->newton_schulz(g.as<float>(), out.as<float>(), a.rows, a.cols, sched, prec);  // warm-up
  double best = 1e30, sum = 0;
  for (int r = 0; r < a.reps; ++r) {
    timer->start();
    be->newton_schulz(g.as<float>(), out.as<float>(), a.rows, a.cols, sched, prec);
    double dt = timer->stop();
    best = std::min(best, dt);
    sum += dt;
  }
  const double flops = op_cost::newton_schulz(a.rows, a.cols, a.steps, prec).flops;
  if (a.json) {
    nlohmann::json j = {{"bench", "newton_schulz"}, {"rows", a.rows}, {"cols", a.cols}, {"steps", a.steps},
                        {"precision", prec_name(prec)}, {"threads", threads}, {"ms_best", best * 1e3},
                        {"ms_mean", sum / a.reps * 1e3}, {"gflops", flops / best / 1e9}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench ns  %lldx%lld  steps=%d  precision=%s  threads=%d  best %.2f ms  mean %.2f ms  %.1f GFLOP/s\n",
              (long long)a.rows, (long long)a.cols, a.steps, prec_name(prec), threads, best * 1e3,
              sum / a.reps * 1e3, flops / best / 1e9);
}

}  // namespace

void register_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks of this machine and build");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* tr = bench->add_subcommand("train", "time full training steps on synthetic tokens");
  tr->add_option("--config", args->config, "preset name or config .json")->required();
  tr->add_option("--set", args->sets,
                 "override key=value (repeatable), e.g. optim.matrix.kind=adamw for all-AdamW");
  tr->add_option("--batch", args->batch, "rows per step")->capture_default_str();
  tr->add_option("--seq", args->seq, "tokens per row")->capture_default_str();
  tr->add_option("--steps", args->steps, "timed steps")->capture_default_str();
  tr->add_option("--warmup", args->warmup, "untimed steps first")->capture_default_str();
  tr->add_option("--threads", args->threads, "worker threads (0 = default)");
  tr->add_option("--ceiling", args->ceiling,
                 "matmul ceiling in GFLOP/s (0 = measure square bf16 and fp32 gemms now, 2048^3 on the CPU and "
                 "8192^3 on a GPU, and take the faster)");
  tr->add_flag("--no-optim", args->no_optim, "time forward+backward only");
  tr->add_flag("--fp32", args->fp32, "same as --set model.matmul_precision=fp32");
  tr->add_option("--device", args->device, "backend: cpu | cuda[:N] | auto")->capture_default_str();
  tr->add_flag("--profile", args->profile, "print per-op times (stderr)");
  tr->add_flag("--json", args->json, "print one JSON object");
  tr->callback([args] { run_bench_train(*args); });
  auto ga = std::make_shared<BenchGemmArgs>();
  auto* gm = bench->add_subcommand("gemm", "time one matmul shape C[m,n] = A[m,k] B[n,k]^T (the device's peak)");
  gm->add_option("--m", ga->m, "rows of C")->capture_default_str();
  gm->add_option("--n", ga->n, "columns of C")->capture_default_str();
  gm->add_option("--k", ga->k, "inner dimension")->capture_default_str();
  gm->add_option("--precision", ga->precision, "bf16 | fp32 | auto")->capture_default_str();
  gm->add_option("--reps", ga->reps, "timed repetitions (best and mean reported)")->capture_default_str();
  gm->add_option("--threads", ga->threads, "worker threads (0 = default)");
  gm->add_option("--device", ga->device, "backend: cpu | cuda[:N] | auto")->capture_default_str();
  gm->add_flag("--json", ga->json, "print one JSON object");
  gm->callback([ga] { run_bench_gemm(*ga); });
  auto aa = std::make_shared<AttnArgs>();
  auto* at = bench->add_subcommand("attention", "time the causal attention kernel (forward and backward)");
  at->add_option("--batch", aa->batch, "rows")->capture_default_str();
  at->add_option("--heads", aa->heads, "query heads")->capture_default_str();
  at->add_option("--kv-heads", aa->kv_heads, "key/value heads (0 = heads)");
  at->add_option("--seq", aa->seq, "tokens per row")->capture_default_str();
  at->add_option("--head-dim", aa->head_dim, "dimension per head")->capture_default_str();
  at->add_option("--window", aa->window, "sliding window in keys (0 = full causal)")->capture_default_str();
  at->add_option("--reps", aa->reps, "timed repetitions (best and mean reported)")->capture_default_str();
  at->add_option("--threads", aa->threads, "worker threads (0 = default)");
  at->add_option("--precision", aa->precision,
                 "matmul precision handed to the op: fp32 | bf16 | both (bf16: on the CPU, bf16 products "
                 "where AVX512_BF16 exists and CLOCKLM_CPU_ATTENTION is auto)")->capture_default_str();
  at->add_flag("--json", aa->json, "print one JSON object per precision");
  at->add_option("--device", aa->device, "backend: cpu | cuda[:N] | auto")->capture_default_str();
  at->callback([aa] { run_bench_attention(*aa); });
  auto na = std::make_shared<NsArgs>();
  auto* ns = bench->add_subcommand("ns", "time Muon's Newton-Schulz orthogonalisation of one matrix (or several: --shapes)");
  ns->add_option("--rows", na->rows, "matrix rows")->capture_default_str();
  ns->add_option("--cols", na->cols, "matrix columns")->capture_default_str();
  ns->add_option("--steps", na->steps, "iterations")->capture_default_str();
  ns->add_option("--precision", na->precision, "auto | bf16 | fp32")->capture_default_str();
  ns->add_option("--coeffs", na->coeffs, "quintic | polar")->capture_default_str();
  ns->add_option("--reps", na->reps, "timed repetitions")->capture_default_str();
  ns->add_option("--threads", na->threads, "worker threads (0 = default)");
  ns->add_option("--device", na->device, "backend: cpu | cuda[:N] | auto")->capture_default_str();
  ns->add_option("--shapes", na->shapes,
                 "several matrices, ROWSxCOLS,... (e.g. speedrun-10m's 576x192,192x192,768x192,192x768), timed "
                 "as one batched call; --rows/--cols ignored");
  ns->add_option("--copies", na->copies, "with --shapes: each shape this many times (e.g. the layer count)")
      ->capture_default_str();
  ns->add_flag("--one-by-one", na->one_by_one, "with --shapes: one call per matrix instead of one batched call");
  ns->add_option("--config", na->config,
                 "time the Muon Newton-Schulz of one training step of this config (preset or .json): the "
                 "optimizer's batches with the config's schedules and precisions; --shapes, --rows, --cols, "
                 "--steps, --coeffs and --precision ignored (CLOCKLM_CUDA_NS picks the CUDA path)");
  ns->add_option("--set", na->sets, "with --config: override key=value (repeatable)");
  ns->add_flag("--json", na->json, "print one JSON object");
  ns->callback([na] { run_bench_ns(*na); });
}

}  // namespace clm
