// `clocklm serve`: the live lab in the browser over folders of runs (pages in docs/EXPERIMENTS.md,
// "The live lab"). Ctrl-C or SIGTERM stops it.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "core/common.h"
#include "serve/http_server.h"

namespace clm {

void register_serve_commands(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Watch, compare and sample runs in the browser (a local web server)");
  cmd->add_option("dirs", o->roots, "Folders of runs and experiment queues (default: .)");
  cmd->add_option("--port", o->port, "Port (0 = any free port, printed at start)")->capture_default_str();
  cmd->add_option("--host", o->host,
                  "Address to listen on; other machines can reach it only when this is not a loopback address")
      ->capture_default_str();
  cmd->callback([o] {
    if (o->roots.empty()) o->roots.push_back(".");
    if (o->port < 0 || o->port > 65535) fail("serve: --port must be between 0 and 65535");
    // SIGINT and SIGTERM are taken by one thread that stops the server; every other thread,
    // the server's included, has them blocked.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    LabServer server(*o);
    const int port = server.bind();
    std::string dirs;
    for (const auto& d : o->roots) dirs += (dirs.empty() ? "" : ", ") + d;
    std::printf("clocklm serve: http://%s:%d/ showing %s%s\n",
                o->host.find(':') != std::string::npos ? ("[" + o->host + "]").c_str() : o->host.c_str(), port,
                dirs.c_str(), is_loopback_host(o->host) ? "" : " (reachable from other machines)");
    std::fflush(stdout);
    // The stopper ends on a signal; when the server stops by itself it is sent one.
    std::thread stopper([&server, stop_signals] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (sig == SIGINT || sig == SIGTERM) server.stop();
    });
    server.listen();
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
  });
}

}  // namespace clm
