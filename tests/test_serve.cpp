// `clocklm serve` without a browser: the run index (statuses, incremental metrics, what it never
// follows), the lab's queue reading, the sample box's bounds, and the HTTP safety rules driven
// through a raw socket (path escapes, bad requests, foreign Host headers), the server still
// serving after each. The browser test is tests/browser/lab_e2e.mjs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "core/common.h"
#include "core/file_lock.h"
#include "serve/http_server.h"
#include "serve/lab_api.h"
#include "serve/run_index.h"
#include "serve/sampler.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ServeDir {
  fs::path path;
  ServeDir() {
    char tmpl[] = "/tmp/clocklm-serve-XXXXXX";
    path = mkdtemp(tmpl);
    fs::copy(fs::path(CLOCKLM_SOURCE_DIR) / "tests" / "data" / "runs", path / "runs", fs::copy_options::recursive);
  }
  ~ServeDir() { fs::remove_all(path); }
  fs::path runs() const { return path / "runs"; }
};

void append(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::app);
  f << text;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
}

std::map<std::string, std::shared_ptr<const clm::IndexedRun>> by_id(const clm::RunIndex& index) {
  std::map<std::string, std::shared_ptr<const clm::IndexedRun>> m;
  for (const auto& r : index.runs()) m[r->id] = r;
  return m;
}

// One HTTP exchange over a fresh connection: the raw response (status line, headers, body).
std::string http_raw(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  // No half-close: the server answers, then closes (Connection: close, or an error).
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

struct Reply {
  int status = 0;
  std::string headers, body;
};

Reply http(int port, const std::string& method, const std::string& target, const std::string& body = "",
           const std::string& extra_headers = "Content-Type: application/json\r\n",
           const std::string& host = "127.0.0.1") {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" +
                    extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string raw = http_raw(port, req);
  Reply r;
  if (raw.size() >= 12) r.status = std::atoi(raw.substr(9, 3).c_str());
  const size_t split = raw.find("\r\n\r\n");
  r.headers = raw.substr(0, split);
  if (split != std::string::npos) r.body = raw.substr(split + 4);
  return r;
}

// A LabServer on a free port, serving from a thread until destroyed.
struct RunningServer {
  clm::LabServer server;
  int port;
  std::thread thread;
  explicit RunningServer(clm::ServeOptions o) : server((o.port = 0, o.refresh_seconds = 0, o)), port(server.bind()) {
    thread = std::thread([this] { server.listen(); });
    for (int i = 0; i < 200 && http(port, "GET", "/api/runs").status != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~RunningServer() {
    server.stop();
    thread.join();
  }
};

}  // namespace

TEST(ServeIndex, ListsRunsWithStatusAndReadsOnlyNewMetricsRows) {
  ServeDir d;
  clm::RunIndex index({d.runs().string()});
  index.refresh();
  auto runs = by_id(index);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs["d4-muon"]->status, clm::RunStatus::done);
  EXPECT_EQ(runs["d6-unfinished"]->status, clm::RunStatus::failed);
  const size_t rows = runs["d6-unfinished"]->data.metrics.size();
  EXPECT_EQ(rows, clm::load_run((d.runs() / "d6-unfinished").string()).metrics.size());

  // A complete line and a torn one: only the complete one is read, then the rest once finished.
  const fs::path m = d.runs() / "d6-unfinished" / "metrics.jsonl";
  append(m, "{\"step\": 1000, \"loss\": 3.5, \"device_seconds\": 500}\n{\"step\": 1001, \"lo");
  index.refresh();
  auto after = by_id(index);
  EXPECT_EQ(after["d6-unfinished"]->data.metrics.size(), rows + 1);
  EXPECT_EQ(after["d4-muon"], runs["d4-muon"]) << "an unchanged run is reused, not reread";
  append(m, "ss\": 3.4, \"device_seconds\": 501}\n");
  index.refresh();
  EXPECT_EQ(by_id(index)["d6-unfinished"]->data.metrics.size(), rows + 2);
  EXPECT_EQ(by_id(index)["d6-unfinished"]->data.last_loss(), 3.4);

  // A resumed run rewrites the file: it is read again from the start.
  write(m.string() + ".new", "{\"step\": 1, \"loss\": 9.0}\n");
  fs::rename(m.string() + ".new", m);
  index.refresh();
  EXPECT_EQ(by_id(index)["d6-unfinished"]->data.metrics.size(), 1u);

  const json page = clm::metrics_json(*by_id(index)["d4-muon"], 68, 100);
  EXPECT_EQ(page["from"], 68);
  EXPECT_EQ(page["next"], page["total"]);
  EXPECT_EQ(page["rows"].size(), page["total"].get<size_t>() - 68);
}

TEST(ServeIndex, WhatItReadsOfARunIsBounded) {
  ServeDir d;
  const fs::path m = d.runs() / "d6-unfinished" / "metrics.jsonl";
  const uint64_t shown = fs::file_size(m);
  const size_t rows = clm::load_run((d.runs() / "d6-unfinished").string()).metrics.size();
  append(m, "{\"step\": 1000, \"loss\": 3.5}\n" + std::string(4000, ' ') + "\n");
  write(d.runs() / "d4-adamw" / "summary.json", "{\"pad\": \"" + std::string(5000, 'x') + "\"}");
  const clm::ServeReadLimits lim{.json_bytes = 4096, .metrics_bytes = shown + 100};
  clm::RunIndex index({d.runs().string()}, lim);
  index.refresh();
  auto runs = by_id(index);
  // metrics.jsonl: the rows up to the limit, one warning, and nothing more on later refreshes.
  const auto& unfinished = *runs["d6-unfinished"];
  EXPECT_EQ(unfinished.data.metrics.size(), rows + 1) << "the row that ends within the limit";
  ASSERT_EQ(unfinished.metrics_offset, lim.metrics_bytes);
  ASSERT_FALSE(unfinished.data.warnings.empty());
  EXPECT_NE(unfinished.data.warnings.back().find("only its first"), std::string::npos);
  append(m, "{\"step\": 1001, \"loss\": 3.4}\n");
  index.refresh();
  EXPECT_EQ(by_id(index)["d6-unfinished"]->data.metrics.size(), unfinished.data.metrics.size());
  // A JSON file over the limit: the run is not loaded and the error names the file in one line.
  EXPECT_EQ(runs.count("d4-adamw"), 0u);
  bool named = false;
  for (const std::string& e : index.errors())
    named |= e.find("summary.json") != std::string::npos && e.find('\n') == std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_THROW(clm::read_shown_json((d.runs() / "d4-adamw" / "summary.json").string(), 4096), clm::Error);
  EXPECT_TRUE(clm::read_shown_json((d.runs() / "nope.json").string()).is_null());
}

TEST(ServeIndex, RunHoldingItsLockIsRunning) {
  ServeDir d;
  clm::RunIndex index({d.runs().string()});
  const std::string lock = (d.runs() / "d6-unfinished" / ".lock").string();
  EXPECT_FALSE(clm::lock_is_held(lock));
  {
    clm::FileLock held(lock, "run folder");
    EXPECT_TRUE(clm::lock_is_held(lock));
    index.refresh();
    EXPECT_EQ(by_id(index)["d6-unfinished"]->status, clm::RunStatus::running);
  }
  index.refresh();
  EXPECT_EQ(by_id(index)["d6-unfinished"]->status, clm::RunStatus::failed);
}

TEST(ServeIndex, NothingOutsideTheFoldersIsReached) {
  ServeDir d;
  fs::copy(d.runs() / "d4-muon", d.path / "outside", fs::copy_options::recursive);
  fs::create_directory_symlink(d.path / "outside", d.runs() / "link-out");
  fs::create_directories(d.runs() / "d4-muon" / "profile");
  fs::create_symlink("/etc/passwd", d.runs() / "d4-muon" / "profile" / "trace.json");
  clm::RunIndex index({d.runs().string()});
  index.refresh();
  auto runs = by_id(index);
  EXPECT_EQ(runs.count("link-out"), 0u);
  EXPECT_EQ(clm::file_inside_run(*runs["d4-muon"], "profile/trace.json"), "");
  EXPECT_EQ(clm::file_inside_run(*runs["d4-muon"], "../d4-adamw/config.json"), "");
  EXPECT_NE(clm::file_inside_run(*runs["d4-muon"], "config.json"), "");
}

TEST(ServeIndex, QueuedExperimentsAndTheLedger) {
  ServeDir d;
  const fs::path q = d.runs() / "queue";
  write(q / "queue.json", R"({"cap_device_seconds": 600})");
  write(q / "exp-0001" / "experiment.json",
        R"({"name": "wait", "config": "d4", "budget": "30s", "budget_seconds": 30, "hypothesis": "h"})");
  write(q / "exp-0001" / "state.json", R"({"state": "queued", "attempts": []})");
  write(q / "exp-0002" / "experiment.json", R"({"name": "base", "config": "d4", "budget": "2m", "budget_seconds": 120})");
  write(q / "exp-0002" / "state.json", R"({"state": "done", "attempts": [{"device_seconds": 118}]})");
  fs::copy(d.runs() / "d4-muon", q / "exp-0002" / "run", fs::copy_options::recursive);

  clm::RunIndex index({d.runs().string()});
  index.refresh();
  auto runs = by_id(index);
  ASSERT_EQ(runs.count("queue/exp-0001/run"), 1u);
  EXPECT_EQ(runs["queue/exp-0001/run"]->status, clm::RunStatus::queued);
  EXPECT_EQ(runs["queue/exp-0002/run"]->status, clm::RunStatus::done);

  const json lab = clm::lab_json({d.runs().string()});
  ASSERT_EQ(lab.size(), 1u);
  EXPECT_EQ(lab[0]["experiments"].size(), 2u);
  EXPECT_DOUBLE_EQ(lab[0]["ledger"]["spent"].get<double>(), 118);
  EXPECT_DOUBLE_EQ(lab[0]["ledger"]["reserved"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(lab[0]["ledger"]["remaining"].get<double>(), 452);
  EXPECT_TRUE(lab[0]["runner"].is_null());
  EXPECT_FALSE(fs::exists(q / "queue.lock")) << "reading the lab takes no lock";
  EXPECT_FALSE(fs::exists(q / "runner.lock"));
}

TEST(ServeHttp, PathEscapesAndBadRequestsGetA4xxAndTheServerKeepsServing) {
  ServeDir d;
  fs::create_directories(d.runs() / "d4-muon" / "profile");
  fs::create_symlink("/etc/passwd", d.runs() / "d4-muon" / "profile" / "trace.json");
  clm::ServeOptions o;
  o.roots = {d.runs().string()};
  RunningServer s(o);

  Reply page = http(s.port, "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<title>clocklm lab</title>"), std::string::npos);
  EXPECT_NE(page.headers.find("Content-Security-Policy"), std::string::npos);
  EXPECT_EQ(json::parse(http(s.port, "GET", "/api/runs").body)["runs"].size(), 3u);

  for (const std::string target :
       {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd", "/app.js/../../../etc/passwd",
        "/api/run?run=..%2F..%2F..%2Fetc", "/api/run?run=/etc", "/api/trace?run=d4-muon",
        "/api/metrics?run=../d4-muon", "/api/compare?run=d4-muon&run=%2Fetc%2Fpasswd"}) {
    Reply r = http(s.port, "GET", target);
    EXPECT_GE(r.status, 400) << target;
    EXPECT_LT(r.status, 500) << target;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << target;
    EXPECT_TRUE(json::parse(r.body).contains("error")) << target << ": " << r.body;
  }
  struct Bad {
    std::string method, target, body, headers, host;
    int status;
  };
  const std::string json_type = "Content-Type: application/json\r\n";
  const std::vector<Bad> bad = {
      {"GET", "/api/metrics?run=d4-muon&from=-1", "", json_type, "127.0.0.1", 400},
      {"GET", "/api/metrics?run=d4-muon&limit=1e9", "", json_type, "127.0.0.1", 400},
      {"GET", "/api/metrics", "", json_type, "127.0.0.1", 400},
      {"GET", "/api/runs", "", json_type, "evil.example:8080", 403},
      {"GET", "/api/runs", "", json_type, "127.0.0.1.evil.example", 403},
      {"DELETE", "/api/runs", "", json_type, "127.0.0.1", 405},
      {"PUT", "/api/sample", "{}", json_type, "127.0.0.1", 405},
      {"POST", "/api/sample", "run=d4-muon", "Content-Type: application/x-www-form-urlencoded\r\n", "127.0.0.1", 415},
      {"POST", "/api/sample", "{\"run\": ", json_type, "127.0.0.1", 400},
      {"POST", "/api/sample", std::string(30000, '[') + std::string(30000, ']'), json_type, "127.0.0.1", 400},
      {"POST", "/api/sample", std::string(100000, ' '), json_type, "127.0.0.1", 413},
      {"POST", "/api/sample", R"({"run": "d4-muon", "prompt": "hi"})", json_type, "127.0.0.1", 400},  // no checkpoint
      {"POST", "/api/sample", R"({"run": "nope", "prompt": "hi"})", json_type, "127.0.0.1", 404},
      {"POST", "/api/sample", R"({"run": "d4-muon", "prompt": 5})", json_type, "127.0.0.1", 400},
      {"GET", "/api/nothing", "", json_type, "127.0.0.1", 404},
      {"GET", "/api/compare", "", json_type, "127.0.0.1", 400},
  };
  for (const Bad& b : bad) {
    Reply r = http(s.port, b.method, b.target, b.body, b.headers, b.host);
    EXPECT_EQ(r.status, b.status) << b.method << " " << b.target << ": " << r.body;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << b.target << ": " << r.body;
  }
  // Not HTTP at all, and a request line past the length limit.
  EXPECT_EQ(http_raw(s.port, "GARBAGE\r\nConnection: close\r\n\r\n").substr(9, 3), "400");
  EXPECT_EQ(http_raw(s.port, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").substr(9, 3), "414");
  Reply still = http(s.port, "GET", "/api/run?run=d4-muon");
  EXPECT_EQ(still.status, 200);
  EXPECT_EQ(json::parse(still.body)["row"]["status"], "done");
}

TEST(ServeHttp, LoopbackRulesFollowTheBindAddress) {
  EXPECT_TRUE(clm::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(clm::is_loopback_host("localhost"));
  EXPECT_FALSE(clm::is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(clm::is_loopback_host("127.0.0.1.evil.example"));
  EXPECT_TRUE(clm::is_loopback_host_header("localhost:8080"));
  EXPECT_TRUE(clm::is_loopback_host_header("[::1]:8080"));
  EXPECT_FALSE(clm::is_loopback_host_header("localhost.evil.example:8080"));
  EXPECT_FALSE(clm::is_loopback_host_header(""));
}

namespace {

// A stand-in for `clocklm sample`: prints what it was given after `seconds`, or fails.
std::string fake_sampler(const fs::path& dir, const std::string& body) {
  const fs::path p = dir / "fake-clocklm";
  write(p, "#!/bin/sh\n" + body);
  fs::permissions(p, fs::perms::owner_all);
  return p.string();
}

}  // namespace

TEST(ServeSampler, OneAtATimeBoundedAndItsErrorsAreOneLine) {
  ServeDir d;
  clm::SampleRequest req;
  req.checkpoint = "ckpt";
  req.prompt = "-- not an option";
  {
    clm::Sampler s(fake_sampler(d.path, "sleep 1; echo \"$4\"\n"));
    auto first = std::async(std::launch::async, [&] { return s.run(req); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    clm::SampleResult second = s.run(req);
    EXPECT_EQ(second.kind, clm::SampleResult::busy);
    clm::SampleResult r = first.get();
    EXPECT_EQ(r.kind, clm::SampleResult::ok) << r.error;
    EXPECT_EQ(r.text, "--prompt=-- not an option");
  }
  {
    clm::SampleLimits lim;
    lim.max_seconds = 0.3;
    clm::Sampler s(fake_sampler(d.path, "sleep 30\n"), lim);
    clm::SampleResult r = s.run(req);
    EXPECT_EQ(r.kind, clm::SampleResult::failed);
    EXPECT_NE(r.error.find("longer than"), std::string::npos) << r.error;
    EXPECT_LT(r.seconds, 5);
  }
  clm::Sampler s(fake_sampler(d.path, "echo 'clocklm: error: sample: the checkpoint is damaged' >&2; exit 1\n"));
  clm::SampleResult r = s.run(req);
  EXPECT_EQ(r.kind, clm::SampleResult::failed);
  EXPECT_EQ(r.error, "sample: the checkpoint is damaged");
  const std::vector<std::function<void(clm::SampleRequest&)>> bads = {
      [](clm::SampleRequest& q) { q.tokens = 0; }, [](clm::SampleRequest& q) { q.tokens = 100000; },
      [](clm::SampleRequest& q) { q.prompt = std::string(5000, 'a'); },
      [](clm::SampleRequest& q) { q.temperature = -1; }, [](clm::SampleRequest& q) { q.checkpoint = ""; }};
  for (const auto& bad : bads) {
    clm::SampleRequest q = req;
    bad(q);
    EXPECT_EQ(s.run(q).kind, clm::SampleResult::bad_request);
  }
}
