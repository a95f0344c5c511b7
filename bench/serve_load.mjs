// Benchmark of `clocklm serve`: how long the runs page takes with 100 runs and a run page takes
// with a 30-minute run's metrics, in headless Chromium, and what polling costs: CPU seconds of the
// server and of the browser while a run page stays open. Needs Chromium and tests/browser's
// packages (`npm ci` there).
// Usage: node bench/serve_load.mjs CLOCKLM_BINARY [ROWS] [WATCH_SECONDS]
import { mkdtempSync, mkdirSync, cpSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const { findChromium, start, openPage, sleep } = await import(join(here, '..', 'tests', 'browser', 'cdp.mjs'));
const [clocklm, rowsArg, watchArg] = process.argv.slice(2);
const rows = Number(rowsArg || 20000), watch = Number(watchArg || 30);
const dir = mkdtempSync(join(tmpdir(), 'clocklm-serve-bench-'));
const runs = join(dir, 'runs');
const children = [];
const sample = join(here, '..', 'tests', 'data', 'runs', 'd4-muon');
for (let i = 0; i < 99; i++) cpSync(sample, join(runs, `run-${String(i).padStart(3, '0')}`), { recursive: true });
// The long run: one metrics row per step for 30 minutes, val bpb every 100 steps.
const long = join(runs, 'long');
mkdirSync(long, { recursive: true });
cpSync(join(sample, 'config.json'), join(long, 'config.json'));
cpSync(join(sample, 'run.json'), join(long, 'run.json'));
let text = '';
for (let s = 1; s <= rows; s++) {
  const r = { step: s, tokens: s * 524288, device_seconds: (1800 * s) / rows, loss: 3 + 8 / Math.sqrt(s), lr: 0.02,
    grad_norm: 0.5, tokens_per_second: 1.5e6, model_flops_per_second: 4e14, budget_fraction: s / rows };
  if (s % 100 === 0) r.val_bpb = 0.9 + 2 / Math.sqrt(s);
  text += JSON.stringify(r) + '\n';
}
writeFileSync(join(long, 'metrics.jsonl'), text);

const cpu = pid => {  // utime + stime of a process, in seconds
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
};
const { p: server, m: served } = await start(children, clocklm, ['serve', runs, '--port', '0'], /:(\d+)\//, 'clocklm serve');
const base = `http://127.0.0.1:${served[1]}/`;
const chromium = await start(children, findChromium(), ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--remote-debugging-port=0', `--user-data-dir=${join(dir, 'chromium')}`, 'about:blank'],
/DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//, 'chromium');
const page = await openPage(chromium.m[1], dir);
const timed = async (url, ready, done) => {
  await page.send('Page.navigate', { url: 'about:blank' });
  await sleep(300);
  const t0 = Date.now();
  await page.send('Page.navigate', { url });
  await page.waitFor(done, url, 30000);
  return Date.now() - t0;
};
try {
  const out = [];
  for (let i = 0; i < 3; i++) {
    out.push({
      runs_page_ms: await timed(base + '#/runs', 'runs', `document.querySelectorAll('#runs-table tbody tr').length === 100`),
      run_page_ms: await timed(base + '#/run/long', 'run',
        `Number((document.querySelector('svg.chart[data-chart="loss"]') || {dataset: {}}).dataset.points) === ${rows}`),
    });
  }
  // The browser keeps the long run's page open, polling once a second.
  const browserCpu = () => spawnSync('ps', ['-o', 'times=', '-g', String(chromium.p.pid)], { encoding: 'utf8' })
    .stdout.split('\n').filter(Boolean).reduce((a, t) => a + Number(t), 0);
  const s0 = cpu(server.pid), b0 = browserCpu();
  await sleep(watch * 1000);
  const s1 = cpu(server.pid), b1 = browserCpu();
  console.log(JSON.stringify({ rows, loads: out, watch_seconds: watch,
    server_cpu_seconds: Number((s1 - s0).toFixed(3)), server_cpu_share_of_one_core: Number(((s1 - s0) / watch).toFixed(5)),
    browser_cpu_seconds: b1 - b0, browser_cpu_share_of_one_core: Number(((b1 - b0) / watch).toFixed(5)) }));
} finally {
  page.ws.close();
  for (const p of children) try { process.kill(-p.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  rmSync(dir, { recursive: true, force: true });
}
