// Line plots for reports and comparisons, as SVG and PNG. gnuplot (Debian gnuplot-nox: svg and
// pngcairo terminals) draws both when it is installed; without it a built-in SVG writer draws the
// SVG and the PNG is skipped with a note.
#pragma once
#include <string>
#include <vector>

namespace clm {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  bool faint = false;   // thin, light line (raw noisy data under a smoothed curve)
  bool points = false;  // markers at each point (sparse data, e.g. periodic val bpb)
  int color = -1;       // palette index; -1 = next in order
};

struct PlotSpec {
  std::string title, xlabel, ylabel;
  std::vector<PlotSeries> series;
  bool logx = false;
  bool y_from_zero = false;  // start the y axis at 0 (rates, where the baseline matters)
};

struct PlotResult {
  std::vector<std::string> files;  // paths written
  std::string note;                // e.g. why the PNG is missing; "" when all went well
};

// Writes <stem>.svg and <stem>.png. The gnuplot executable is $CLOCKLM_GNUPLOT if set ("none"
// disables it), else `gnuplot` on PATH. Throws Error only if not even the SVG could be written.
PlotResult write_plot(const PlotSpec& spec, const std::string& stem);
// The built-in renderer (no dependencies): a complete SVG document.
std::string svg_plot(const PlotSpec& spec, int width = 800, int height = 480);
bool gnuplot_available();
// Exponential moving average with bias correction; alpha in (0, 1]. Lags a falling curve.
std::vector<double> ema(const std::vector<double>& y, double alpha);
// Centered moving average over y[i-h .. i+h] (window shrinks symmetrically at the ends, so the
// first and last points stay put): smooths a noisy loss curve without shifting it in time.
std::vector<double> smooth_centered(const std::vector<double>& y, int h);

}  // namespace clm
