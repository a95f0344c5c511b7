// Subcommands for agents and the experiment queue: `clocklm mcp` (the MCP server on stdio) and
// `clocklm exp init|submit|list|status|cancel|results|journal|run`. The queue, ledger and journal
// live in src/lab/, the MCP server in src/agent/; these callbacks only parse and print.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "agent/tools.h"
#include "cli/commands.h"
#include "core/common.h"
#include "lab/exp_results.h"
#include "lab/journal.h"
#include "lab/queue.h"
#include "lab/queue_runner.h"
#include "report/report.h"
#include "report/runs.h"

namespace clm {

namespace {

std::string default_queue() {
  const char* q = std::getenv("CLOCKLM_QUEUE");
  return q && *q ? q : "experiments";
}

void add_queue_option(CLI::App* cmd, std::string& queue) {
  queue = default_queue();
  cmd->add_option("--queue", queue,
                  "Experiment queue folder (default: $CLOCKLM_QUEUE or ./experiments)");
}

std::string num_or_dash(const nlohmann::json& j, const char* k, int decimals) {
  return j.contains(k) && j[k].is_number() ? fmt_num(j[k].get<double>(), decimals) : "-";
}

std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

void print_json(const nlohmann::json& j) { std::printf("%s\n", j.dump(2).c_str()); }

void print_experiment(const nlohmann::json& e) {
  for (auto it = e.begin(); it != e.end(); ++it) {
    std::string v = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    if (!v.empty() && v != "\"\"") std::printf("%-18s %s\n", it.key().c_str(), v.c_str());
  }
}

void register_exp_init(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "init", "Create or configure a queue: device-time cap, default dataset and baseline");
  struct Opts {
    std::string queue, cap, data, baseline;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("--cap", o->cap,
                  "Device-time cap over all experiments, e.g. 10h ('none' removes it)");
  cmd->add_option("--data", o->data, "Default dataset for submissions without --data");
  cmd->add_option("--baseline", o->baseline,
                  "Default baseline (experiment id or run directory) for the journal");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    QueueSettings s = q.settings();
    if (o->cap == "none")
      s.cap_seconds = -1;
    else if (!o->cap.empty())
      s.cap_seconds = parse_duration(o->cap);
    if (!o->data.empty()) s.data = o->data;
    if (!o->baseline.empty()) s.baseline = o->baseline;
    q.configure(s);
    std::printf("queue %s: %s\n", q.dir().c_str(), q.ledger().describe().c_str());
  });
}

void register_exp_submit(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "submit", "Queue a training experiment; prints its id at once (a runner starts on demand)");
  struct Opts {
    std::string queue;
    ExperimentSpec s;
    bool no_run = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("--config", o->s.config, "Preset name or JSON config file")->required();
  cmd->add_option("--set", o->s.sets, "Override a config key: key=value (repeatable)");
  cmd->add_option("--budget", o->s.budget, "Device-time budget, e.g. 90s, 5m")->required();
  cmd->add_option("--data", o->s.data, "Prepared dataset folder (default: the queue's)");
  cmd->add_option("--hypothesis", o->s.hypothesis,
                  "What you expect and why (recorded in the journal)");
  cmd->add_option("--baseline", o->s.baseline, "Experiment id or run directory to compare with");
  cmd->add_option("--name", o->s.name, "Short label");
  cmd->add_flag("--profile", o->s.profile, "Also profile three steps into RUN/profile/");
  cmd->add_option("--device", o->s.device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  cmd->add_flag("--no-run", o->no_run, "Only queue it; do not start a runner");
  cmd->add_flag("--json", o->json, "Print the experiment as JSON");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    o->s.submitter = "cli";
    Experiment e = q.submit(o->s);
    bool started = !o->no_run && ensure_runner(q);
    if (o->json) return print_json(experiment_json(e));
    std::printf("%s queued%s\n", e.id.c_str(), started ? " (runner started)" : "");
    std::printf("ledger: %s\n", q.ledger().describe().c_str());
  });
}

void register_exp_list(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "list", "List the queue's experiments with state, device time and val bpb");
  struct Opts {
    std::string queue;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_flag("--json", o->json, "One JSON object per experiment");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    auto exps = q.list();
    if (o->json) {
      for (const auto& e : exps) std::printf("%s\n", experiment_json(e).dump().c_str());
      return;
    }
    Table t{{"id", "name", "state", "config", "budget", "device time", "steps", "val bpb",
             "hypothesis / reason"}};
    for (const auto& e : exps) {
      auto j = experiment_json(e);
      std::string why = j["reason"].get<std::string>().empty() ? e.spec.hypothesis
                                                               : j["reason"].get<std::string>();
      t.push_back({e.id, e.spec.name.empty() ? "-" : e.spec.name, e.status(), e.spec.config,
                   e.spec.budget, fmt_seconds(j["device_seconds"].get<double>()),
                   num_or_dash(j, "steps", 0), num_or_dash(j, "val_bpb", 4), shorten(why, 60)});
    }
    std::printf("%s", text_table(t).c_str());
    std::printf("ledger: %s\n", q.ledger().describe().c_str());
  });
}

void register_exp_status(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "status", "The queue's device-time ledger and runner, or one experiment's state");
  struct Opts {
    std::string queue, id;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("id", o->id, "Experiment id (omit for the queue)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    if (!q.exists())
      fail("no experiment queue at {} (submit creates one; or clocklm exp init)", q.dir());
    nlohmann::json j = {{"queue", queue_status(q)}};
    if (!o->id.empty()) j["experiment"] = experiment_json(q.get(o->id));
    if (o->json) return print_json(j);
    if (!o->id.empty()) return print_experiment(j["experiment"]);
    const auto& s = j["queue"];
    std::printf("queue   %s\nledger  %s\n", q.dir().c_str(),
                s["ledger_text"].get<std::string>().c_str());
    std::printf("runner  %s\n", s["runner"].is_null()
                                    ? "not running"
                                    : fmt::format("pid {} since {}", s["runner"].value("pid", 0),
                                                  s["runner"].value("started", ""))
                                          .c_str());
    std::string counts;
    for (auto it = s["counts"].begin(); it != s["counts"].end(); ++it)
      counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", it.value().get<int>(), it.key());
    std::printf("counts  %s\n", counts.empty() ? "no experiments" : counts.c_str());
  });
}

void register_exp_cancel(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "cancel", "Cancel a queued experiment, or stop a running one (it checkpoints first)");
  struct Opts {
    std::string queue, id;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("id", o->id, "Experiment id")->required();
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    Experiment e = q.cancel(o->id);
    std::printf(
        "%s %s\n", e.id.c_str(),
        e.status() == "running" ? "asked to stop (it will be marked cancelled)" : "cancelled");
  });
}

void register_exp_results(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "results", "One experiment's summary, last metrics, profile table and journal entry");
  struct Opts {
    std::string queue, id;
    int tail = 5;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("id", o->id, "Experiment id")->required();
  cmd->add_option("--tail", o->tail, "Metrics rows to show")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    Experiment e = q.get(o->id);
    nlohmann::json r = experiment_results(q, e, o->tail);
    if (o->json) return print_json(r);
    print_experiment(r["experiment"]);
    if (!r["summary"].is_null()) std::printf("\nsummary.json\n%s\n", r["summary"].dump(2).c_str());
    if (!r["metrics_tail"].empty()) {
      std::printf("\nlast metrics rows\n");
      for (const auto& row : r["metrics_tail"]) std::printf("%s\n", row.dump().c_str());
    }
    if (r["profile_table"].is_string())
      std::printf("\nprofile\n%s", r["profile_table"].get<std::string>().c_str());
    const auto& d = r["journal"]["delta"];
    if (d.is_object())
      std::printf(
          "\nagainst baseline %s: val bpb %+.4f, tokens/s x%.3f\n",
          r["journal"]["baseline"]["ref"].get<std::string>().c_str(), d["val_bpb"].get<double>(),
          d["tokens_per_second_ratio"].is_number() ? d["tokens_per_second_ratio"].get<double>()
                                                   : NAN);
  });
}

void register_exp_journal(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "journal",
      "Render the journal (hypotheses, config differences, results, deltas) as markdown");
  struct Opts {
    std::string queue, out;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("--out", o->out, "Markdown file (default QUEUE/journal.md)");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    JournalFiles f = write_journal(q, o->out);
    for (const auto& n : f.notes) std::fprintf(stderr, "clocklm: note: %s\n", n.c_str());
    std::printf("wrote %s (%zu experiments) and %zu plot files\n", f.markdown.c_str(),
                f.entries.size(), f.plots.size());
  });
}

void register_exp_run(CLI::App* exp) {
  auto* cmd = exp->add_subcommand(
      "run", "Run the queue in the foreground until no experiment is queued (the runner)");
  struct Opts {
    std::string queue, exe;
  };
  auto o = std::make_shared<Opts>();
  add_queue_option(cmd, o->queue);
  cmd->add_option("--exe", o->exe, "clocklm executable for the training runs (default: this one)");
  cmd->callback([o] {
    ExperimentQueue q(o->queue);
    int n = run_queue(q, o->exe, stderr);
    if (n < 0) {
      std::printf("another runner is active on %s\n", q.dir().c_str());
      return;
    }
    std::printf("ran %d attempt(s); ledger: %s\n", n, q.ledger().describe().c_str());
  });
}

void register_mcp(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "mcp", "Serve the Model Context Protocol on stdin/stdout for AI agents (docs/AGENTS.md)");
  auto queue = std::make_shared<std::string>();
  add_queue_option(cmd, *queue);
  cmd->callback([queue] {
    // stdout carries the protocol only: keep a private copy of it for the server and point fd 1 at
    // stderr, so that no library message printed on stdout can corrupt a JSON-RPC message.
    int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (out < 0) fail("mcp: cannot duplicate stdout");
    std::fflush(stdout);
    ::dup2(2, 1);
    AgentContext ctx{ExperimentQueue(*queue), ""};
    McpServer server = make_clocklm_server(ctx);
    server.serve(0, out);
    ::close(out);
  });
}

}  // namespace

void register_agent_commands(CLI::App& app) {
  auto* exp = app.add_subcommand(
      "exp", "The experiment queue: submit, list, status, cancel, results, journal, run");
  exp->require_subcommand(1);
  register_exp_init(exp);
  register_exp_submit(exp);
  register_exp_list(exp);
  register_exp_status(exp);
  register_exp_cancel(exp);
  register_exp_results(exp);
  register_exp_journal(exp);
  register_exp_run(exp);
  register_mcp(app);
}

}  // namespace clm
