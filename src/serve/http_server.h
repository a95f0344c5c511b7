// `clocklm serve`'s HTTP side: the routes of the dashboard over a RunIndex and a Sampler, with
// the safety rules every request passes (docs/EXPERIMENTS.md, "The live lab"): bound to loopback
// unless told otherwise, and then only answering requests addressed to a loopback name; read-only
// except the sample box; files reached only by run id and a fixed name inside the run's folder;
// a bad request gets a 4xx with a one-line JSON error and the server keeps serving.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
class Server;
}

namespace clm {

class RunIndex;
class Sampler;

struct ServeOptions {
  std::vector<std::string> roots;  // run folders (and experiment queues) to show
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port
  double refresh_seconds = 0.5;    // the index is reread at most this often, and only when asked
  std::string exe;                 // the clocklm binary the sample box runs ("" = this one)
};

class LabServer {
 public:
  explicit LabServer(ServeOptions opt);
  ~LabServer();
  // Binds the socket; returns the port (the chosen one when the option was 0). Throws Error when
  // the address cannot be bound.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void listen();
  void stop();
  const ServeOptions& options() const { return opt_; }

 private:
  void add_routes();
  void refresh_if_stale();

  ServeOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<RunIndex> index_;
  std::unique_ptr<Sampler> sampler_;
  std::mutex refresh_mu_;
  double last_refresh_ = -1e300;
  bool loopback_ = true;
};

// Whether `host` (a bind address) is a loopback address: 127.0.0.0/8, ::1 or "localhost".
bool is_loopback_host(const std::string& host);
// Whether a request's Host header names this machine's loopback ("localhost", "127.0.0.1",
// "[::1]", with any port): a page from another site that made its name resolve to 127.0.0.1
// (DNS rebinding) sends its own name, and is refused.
bool is_loopback_host_header(const std::string& value);

}  // namespace clm
