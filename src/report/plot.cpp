// Plot writer (see plot.h). gnuplot gets its data through temp files and a script file, writes
// to temp outputs that are renamed into place, so a failed plot never leaves a torn image.
#include "report/plot.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/common.h"

namespace clm {

namespace fs = std::filesystem;

static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                 "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
static const int kPaletteN = 10;

std::vector<double> ema(const std::vector<double>& y, double alpha) {
  std::vector<double> out(y.size());
  double m = 0, w = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    m = alpha * y[i] + (1 - alpha) * m;
    w = alpha + (1 - alpha) * w;  // bias correction: weight mass seen so far
    out[i] = m / w;
  }
  return out;
}

std::vector<double> smooth_centered(const std::vector<double>& y, int h) {
  const long n = long(y.size());
  std::vector<double> pre(n + 1, 0.0), out(n);
  for (long i = 0; i < n; ++i) pre[i + 1] = pre[i] + y[i];
  for (long i = 0; i < n; ++i) {
    long k = std::min<long>({long(h), i, n - 1 - i});
    out[i] = (pre[i + k + 1] - pre[i - k]) / double(2 * k + 1);
  }
  return out;
}

static std::string gnuplot_exe() {
  if (const char* e = std::getenv("CLOCKLM_GNUPLOT")) return e;
  return "gnuplot";
}

static std::string shq(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool gnuplot_available() {
  std::string exe = gnuplot_exe();
  if (exe.empty() || exe == "none") return false;
  return std::system(("command -v " + shq(exe) + " >/dev/null 2>&1").c_str()) == 0;
}

// gnuplot single-quoted string: '' is a literal quote.
static std::string gq(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

static std::vector<int> colors_of(const PlotSpec& spec) {
  std::vector<int> c;
  int next = 0;
  for (const auto& s : spec.series) c.push_back(s.color >= 0 ? s.color % kPaletteN : (next++) % kPaletteN);
  return c;
}

static bool has_data(const PlotSeries& s) {
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) return true;
  return false;
}

static double max_abs(const PlotSpec& spec, bool xaxis) {
  double m = 0;
  for (const auto& s : spec.series)
    for (double v : xaxis ? s.x : s.y)
      if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

// Runs gnuplot; returns "" on success or the reason it failed.
static std::string gnuplot_plot(const PlotSpec& spec, const std::string& stem) {
  char tmpl[] = "/tmp/clocklm-plot-XXXXXX";
  if (!::mkdtemp(tmpl)) return "cannot create a temp folder for gnuplot";
  std::string tmp = tmpl;
  auto cleanup = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  };
  std::vector<int> colors = colors_of(spec);
  std::string plot_cmd;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const auto& s = spec.series[i];
    if (!has_data(s)) continue;
    std::string dat = fmt::format("{}/s{}.dat", tmp, i), text;
    for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k)
      if (std::isfinite(s.x[k]) && std::isfinite(s.y[k])) text += fmt::format("{:.10g} {:.10g}\n", s.x[k], s.y[k]);
    atomic_write(dat, text);
    // Faint lines are translucent; gnuplot takes the alpha first (#AARRGGBB, 00 = opaque).
    std::string style = s.points ? fmt::format("linespoints pt 7 ps 0.8 lw 2 lc rgb '{}'", kPalette[colors[i]])
                        : s.faint ? fmt::format("lines lw 1 lc rgb '#a0{}'", std::string(kPalette[colors[i]]).substr(1))
                                  : fmt::format("lines lw 2 lc rgb '{}'", kPalette[colors[i]]);
    if (!plot_cmd.empty()) plot_cmd += ", \\\n     ";
    plot_cmd += fmt::format("{} using 1:2 with {} title {}", gq(dat), style, gq(s.label));
  }
  std::string script;
  auto axes = [&] {
    std::string a;
    a += fmt::format("set title {}\n", gq(spec.title));
    a += fmt::format("set xlabel {}\nset ylabel {}\n", gq(spec.xlabel), gq(spec.ylabel));
    a += "set grid lc rgb '#dddddd' lt 1\nset border lc rgb '#444444'\n";
    a += "set key top right box opaque samplen 2 spacing 1.1\n";
    if (max_abs(spec, true) >= 1e4) a += "set format x '%.1s%c'\n";
    if (max_abs(spec, false) >= 1e4) a += "set format y '%.1s%c'\n";
    if (spec.logx) a += "set logscale x\n";
    if (spec.y_from_zero) a += "set yrange [0:*]\n";
    return a;
  };
  std::string body = plot_cmd.empty() ? "set label 'no data' at graph 0.5,0.5 center\nplot [0:1][0:1] NaN notitle\n"
                                      : "plot " + plot_cmd + "\n";
  script += "set terminal svg size 800,480 dynamic noenhanced font 'Sans,12' background rgb 'white'\n";
  script += fmt::format("set output {}\n", gq(stem + ".svg.tmp"));
  script += axes() + body;
  script += "set output\n";
  script += "set terminal pngcairo size 1000,600 noenhanced font 'Sans,11' background rgb 'white'\n";
  script += fmt::format("set output {}\n", gq(stem + ".png.tmp"));
  script += "replot\nset output\n";
  atomic_write(tmp + "/plot.gp", script);
  std::string err = tmp + "/err.txt";
  int rc = std::system((shq(gnuplot_exe()) + " " + shq(tmp + "/plot.gp") + " 2>" + shq(err)).c_str());
  std::string msg;
  if (rc != 0) {
    std::string e;
    try {
      e = read_file(err);
    } catch (...) {
    }
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    if (e.size() > 300) e = e.substr(e.size() - 300);
    msg = fmt::format("gnuplot failed (exit {}): {}", rc, e);
  } else {
    std::error_code ec;
    for (const char* ext : {".svg", ".png"}) {
      fs::rename(stem + ext + ".tmp", stem + ext, ec);
      if (ec) msg = fmt::format("gnuplot wrote no {} ({})", ext, ec.message());
    }
  }
  std::error_code ec;
  fs::remove(stem + ".svg.tmp", ec);
  fs::remove(stem + ".png.tmp", ec);
  cleanup();
  return msg;
}

// ---- built-in SVG renderer ---------------------------------------------------------------

static std::string xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

// "Nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over [lo, hi].
static double nice_step(double lo, double hi, int n) {
  double raw = (hi - lo) / n;
  if (!(raw > 0)) return 1;
  double p = std::pow(10, std::floor(std::log10(raw)));
  double f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

static std::string tick_label(double v, double step) {
  double a = std::fabs(v);
  if (a < step * 1e-6) return "0";
  const char* suf = "";
  double d = 1;
  if (a >= 1e9) suf = "G", d = 1e9;
  else if (a >= 1e6) suf = "M", d = 1e6;
  else if (a >= 1e4) suf = "k", d = 1e3;
  double s = step / d;
  int dec = s >= 1 ? 0 : int(std::ceil(-std::log10(s) - 1e-9));
  return fmt::format("{:.{}f}{}", v / d, std::clamp(dec, 0, 6), suf);
}

std::string svg_plot(const PlotSpec& spec, int W, int H) {
  const double L = 78, R = 20, T = 40, B = 56;  // margins
  double pw = W - L - R, ph = H - T - B;
  double x0 = HUGE_VAL, x1 = -HUGE_VAL, y0 = HUGE_VAL, y1 = -HUGE_VAL;
  auto X = [&](double v) { return spec.logx ? std::log10(std::max(v, 1e-300)) : v; };
  for (const auto& s : spec.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (spec.logx && s.x[i] <= 0)) continue;
      x0 = std::min(x0, X(s.x[i])), x1 = std::max(x1, X(s.x[i]));
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  bool empty = x0 > x1;
  if (empty) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (spec.y_from_zero) y0 = std::min(y0, 0.0);
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  double ys = nice_step(y0, y1, 6), xs = nice_step(x0, x1, 7);
  y0 = std::floor(y0 / ys) * ys, y1 = std::ceil(y1 / ys) * ys;
  if (!spec.logx) x0 = std::floor(x0 / xs) * xs, x1 = std::ceil(x1 / xs) * xs;
  auto px = [&](double v) { return L + (X(v) - x0) / (x1 - x0) * pw; };
  auto py = [&](double v) { return T + (1 - (v - y0) / (y1 - y0)) * ph; };
  std::string o;
  o += fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
                   "width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"13\">\n",
                   W, H, W, H);
  o += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", W, H);
  o += fmt::format("<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n", L + pw / 2,
                   xml(spec.title));
  // Grid and ticks.
  for (double v = y0; v <= y1 + ys * 1e-6; v += ys) {
    double y = py(v);
    o += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#dddddd\"/>\n", L, y, L + pw, y);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 6, y + 4, tick_label(v, ys));
  }
  if (spec.logx) {
    for (double e = std::ceil(x0); e <= x1 + 1e-9; e += 1) {
      double x = L + (e - x0) / (x1 - x0) * pw;
      o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#dddddd\"/>\n", x, T, x, T + ph);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, T + ph + 18,
                       tick_label(std::pow(10, e), std::pow(10, e)));
    }
  } else {
    for (double v = x0; v <= x1 + xs * 1e-6; v += xs) {
      double x = L + (v - x0) / (x1 - x0) * pw;
      o += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#dddddd\"/>\n", x, T, x, T + ph);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, T + ph + 18,
                       tick_label(v, xs));
    }
  }
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444444\"/>\n", L, T, pw, ph);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + pw / 2, H - 12, xml(spec.xlabel));
  o += fmt::format("<text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">{}</text>\n",
                   T + ph / 2, T + ph / 2, xml(spec.ylabel));
  if (empty)
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n", L + pw / 2, T + ph / 2);
  // Data.
  std::vector<int> colors = colors_of(spec);
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const auto& s = spec.series[i];
    std::string pts;
    for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k) {
      if (!std::isfinite(s.x[k]) || !std::isfinite(s.y[k]) || (spec.logx && s.x[k] <= 0)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(s.x[k]), py(s.y[k]));
    }
    if (pts.empty()) continue;
    const char* col = kPalette[colors[i]];
    o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
                     "stroke-opacity=\"{}\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
                     col, s.faint ? 1 : 2, s.faint ? 0.35 : 1.0, pts);
    if (s.points)
      for (size_t k = 0; k < std::min(s.x.size(), s.y.size()); ++k)
        if (std::isfinite(s.x[k]) && std::isfinite(s.y[k]))
          o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(s.x[k]), py(s.y[k]), col);
  }
  // Legend (top right, boxed).
  size_t longest = 0;
  int n = 0;
  for (const auto& s : spec.series) longest = std::max(longest, s.label.size()), n += !s.label.empty();
  if (n > 0) {
    double lw = 40 + 7.2 * double(longest), lh = 8 + 18.0 * n, lx = L + pw - lw - 8, ly = T + 8;
    o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"white\" "
                     "fill-opacity=\"0.9\" stroke=\"#999999\"/>\n", lx, ly, lw, lh);
    int row = 0;
    for (size_t i = 0; i < spec.series.size(); ++i) {
      const auto& s = spec.series[i];
      if (s.label.empty()) continue;
      double y = ly + 16 + 18.0 * row++;
      o += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"{}\" "
                       "stroke-opacity=\"{}\"/>\n", lx + 6, y - 4, lx + 30, y - 4, kPalette[colors[i]],
                       s.faint ? 1 : 2, s.faint ? 0.35 : 1.0);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 36, y, xml(s.label));
    }
  }
  o += "</svg>\n";
  return o;
}

PlotResult write_plot(const PlotSpec& spec, const std::string& stem) {
  PlotResult r;
  std::string why;
  if (gnuplot_available()) {
    why = gnuplot_plot(spec, stem);
    if (why.empty()) {
      r.files = {stem + ".svg", stem + ".png"};
      return r;
    }
  } else {
    why = "gnuplot not found (install gnuplot-nox for PNG plots)";
  }
  atomic_write(stem + ".svg", svg_plot(spec));
  r.files = {stem + ".svg"};
  r.note = why + "; wrote SVG only";
  return r;
}

}  // namespace clm
