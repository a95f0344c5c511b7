// The dashboard's HTTP routes and safety rules (see http_server.h).
#include "serve/http_server.h"

#include <arpa/inet.h>

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>

#include "core/common.h"
#include "core/json_parse.h"
#include "lab/process.h"
#include "serve/lab_api.h"
#include "serve/run_index.h"
#include "serve/sampler.h"
#include "serve/web_assets.h"

namespace clm {

using nlohmann::json;

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool is_loopback_host_header(const std::string& value) {
  std::string h = value;
  if (h.starts_with("[")) {  // [::1]:8080
    const size_t close = h.find(']');
    if (close == std::string::npos) return false;
    h = h.substr(1, close - 1);
  } else if (const size_t colon = h.rfind(':'); colon != std::string::npos) {
    h = h.substr(0, colon);
  }
  return is_loopback_host(h);
}

namespace {

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  // With a charset the library leaves the body uncompressed: Brotli at its default quality took
  // 4 s for a 30-minute run's 1.7 MB of metrics, and the server is on this machine.
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

// A run named by the request's `run` parameter; answers 400/404 itself and returns null then.
std::shared_ptr<const IndexedRun> requested_run(const RunIndex& index, const httplib::Request& req,
                                                httplib::Response& res) {
  if (!req.has_param("run")) {
    send_error(res, 400, "missing the run parameter");
    return nullptr;
  }
  auto r = index.find(req.get_param_value("run"));
  if (!r) send_error(res, 404, "no run '" + req.get_param_value("run") + "'");
  return r;
}

// A non-negative integer parameter, or `dflt` when absent; false (and a 400 sent) when malformed.
bool count_param(const httplib::Request& req, httplib::Response& res, const char* key, size_t dflt,
                 size_t& out) {
  out = dflt;
  if (!req.has_param(key)) return true;
  const std::string v = req.get_param_value(key);
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
    send_error(res, 400, std::string(key) + " must be a non-negative integer");
    return false;
  }
  out = std::stoull(v);
  return true;
}

void send_asset(httplib::Response& res, const WebAsset& a) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'");
  res.set_content(std::string(reinterpret_cast<const char*>(a.data), a.size), a.type);
}

// Streams a file in pieces (a trace can be large), as a download.
void send_file(httplib::Response& res, const std::string& path, const std::string& download_name) {
  auto in = std::make_shared<std::ifstream>(path, std::ios::binary);
  in->seekg(0, std::ios::end);
  const size_t size = size_t(in->tellg());
  in->seekg(0);
  res.set_header("Content-Disposition", "attachment; filename=\"" + download_name + "\"");
  res.set_content_provider(size, "application/json; charset=utf-8", [in](size_t offset, size_t length, httplib::DataSink& sink) {
    std::string buf(std::min<size_t>(length, 1 << 20), '\0');
    in->seekg(std::streamoff(offset));
    in->read(buf.data(), std::streamsize(buf.size()));
    if (in->gcount() <= 0) return false;
    sink.write(buf.data(), size_t(in->gcount()));
    return true;
  });
}

}  // namespace

LabServer::LabServer(ServeOptions opt) : opt_(std::move(opt)) {
  if (opt_.roots.empty()) fail("serve: give at least one folder of runs");
  index_ = std::make_unique<RunIndex>(opt_.roots);
  index_->refresh();  // the first page then shows at once
  last_refresh_ = now_seconds();
  sampler_ = std::make_unique<Sampler>(opt_.exe.empty() ? self_exe() : opt_.exe);
  loopback_ = is_loopback_host(opt_.host);
  http_ = std::make_unique<httplib::Server>();
  http_->set_payload_max_length(64 * 1024);
  add_routes();
}

LabServer::~LabServer() = default;

int LabServer::bind() {
  if (opt_.port == 0) {
    const int port = http_->bind_to_any_port(opt_.host);
    if (port <= 0) fail("serve: cannot listen on {} (any port)", opt_.host);
    opt_.port = port;
  } else if (!http_->bind_to_port(opt_.host, opt_.port)) {
    fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", opt_.host, opt_.port);
  }
  return opt_.port;
}

void LabServer::listen() { http_->listen_after_bind(); }
void LabServer::stop() { http_->stop(); }

void LabServer::refresh_if_stale() {
  std::lock_guard<std::mutex> g(refresh_mu_);
  if (now_seconds() - last_refresh_ < opt_.refresh_seconds) return;
  index_->refresh();
  last_refresh_ = now_seconds();
}

void LabServer::add_routes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    if (loopback_ && !is_loopback_host_header(req.get_header_value("Host"))) {
      send_error(res, 403, "this server answers only requests addressed to localhost");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != "GET" && req.method != "HEAD" && !(req.method == "POST" && req.path == "/api/sample")) {
      send_error(res, 405, "method " + req.method + " is not allowed on " + req.path);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, 404, "no page " + req.path);
    else if (res.status == 413) send_error(res, 413, "the request is larger than 64 KiB");
    else if (res.status == 414) send_error(res, 414, "the address is too long");
    else send_error(res, res.status, "malformed request");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const Error& e) {
      send_error(res, 400, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });

  // Pages: the single page and its script and style, by exact name only.
  s.Get("/", [](const httplib::Request&, httplib::Response& res) { send_asset(res, *find_web_asset("index.html")); });
  s.Get(R"(/([a-z0-9_-]+\.(?:js|css|html|svg)))", [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* a = find_web_asset(req.matches[1].str());
    if (!a) return send_error(res, 404, "no page " + req.path);
    send_asset(res, *a);
  });

  s.Get("/api/runs", [this](const httplib::Request&, httplib::Response& res) {
    refresh_if_stale();
    send_json(res, {{"roots", opt_.roots}, {"runs", runs_json(index_->runs())}, {"errors", index_->errors()}});
  });
  s.Get("/api/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    size_t from = 0, limit = 0;
    if (!count_param(req, res, "from", 0, from) || !count_param(req, res, "limit", 200000, limit)) return;
    index_->refresh_one(req.get_param_value("run"));
    if (auto r = requested_run(*index_, req, res)) send_json(res, metrics_json(*r, from, std::min<size_t>(limit, 200000)));
  });
  s.Get("/api/run", [this](const httplib::Request& req, httplib::Response& res) {
    index_->refresh_one(req.get_param_value("run"));
    if (auto r = requested_run(*index_, req, res)) send_json(res, run_page_json(*r));
  });
  s.Get("/api/trace", [this](const httplib::Request& req, httplib::Response& res) {
    refresh_if_stale();
    auto r = requested_run(*index_, req, res);
    if (!r) return;
    const std::string path = file_inside_run(*r, "profile/trace.json");
    if (path.empty()) return send_error(res, 404, "run '" + r->id + "' has no profile/trace.json");
    send_file(res, path, r->data.name + "-trace.json");
  });
  s.Get("/api/compare", [this](const httplib::Request& req, httplib::Response& res) {
    refresh_if_stale();
    const size_t n = req.get_param_value_count("run");
    if (n < 1 || n > 16) return send_error(res, 400, "compare takes 1 to 16 run parameters");
    std::vector<std::shared_ptr<const IndexedRun>> runs;
    for (size_t i = 0; i < n; ++i) {
      auto r = index_->find(req.get_param_value("run", i));
      if (!r) return send_error(res, 404, "no run '" + req.get_param_value("run", i) + "'");
      runs.push_back(r);
    }
    send_json(res, compare_json(runs));
  });
  s.Get("/api/lab", [this](const httplib::Request&, httplib::Response& res) { send_json(res, lab_json(opt_.roots)); });
  s.Post("/api/sample", [this](const httplib::Request& req, httplib::Response& res) {
    // A JSON body only: a form on another site cannot post one without the browser asking first.
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0)
      return send_error(res, 415, "the sample request must be JSON (Content-Type: application/json)");
    json body;
    try {
      body = parse_json(req.body, "the sample request");
    } catch (const Error& e) {
      return send_error(res, 400, e.what());
    }
    if (!body.is_object() || !body.contains("run") || !body["run"].is_string() ||
        !body.value("prompt", json("")).is_string())
      return send_error(res, 400, "the sample request needs {\"run\": id, \"prompt\": text}");
    refresh_if_stale();
    auto r = index_->find(body["run"].get<std::string>());
    if (!r) return send_error(res, 404, "no run '" + body["run"].get<std::string>() + "'");
    SampleRequest sr;
    sr.checkpoint = run_checkpoint(*r);
    sr.prompt = body.value("prompt", "");
    try {
      sr.tokens = body.value("tokens", 64);
      sr.temperature = body.value("temperature", 0.8);
      sr.top_k = body.value("top_k", 50);
      sr.seed = body.value("seed", uint64_t(42));
    } catch (const json::exception&) {
      return send_error(res, 400, "tokens, top_k and seed must be integers and temperature a number");
    }
    const SampleResult out = sampler_->run(sr);
    switch (out.kind) {
      case SampleResult::ok:
        return send_json(res, {{"text", out.text}, {"checkpoint", sr.checkpoint}, {"seconds", out.seconds}});
      case SampleResult::busy: return send_error(res, 429, out.error);
      case SampleResult::bad_request: return send_error(res, 400, out.error);
      case SampleResult::failed: return send_error(res, 500, out.error);
    }
  });
}

}  // namespace clm
