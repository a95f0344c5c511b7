// End-to-end test of `clocklm serve` in headless Chromium, driven over its DevTools protocol:
// a real tiny training run goes on while the dashboard is open, and the test checks that the runs
// table lists it, that its live curve gains points while it trains, that the compare view overlays
// two runs with their config differences highlighted, that a sample comes back from a checkpoint
// and that the lab page shows a queued experiment. A screenshot of each page is written to OUT.
// Usage: node lab_e2e.mjs CLOCKLM_BINARY OUT_DIR. Exit status 77 (CTest's skip) when Chromium or
// the `ws` package is missing.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

let findChromium, start, openPage, sleep;
try {
  ({ findChromium, start, openPage, sleep } = await import('./cdp.mjs'));
} catch (e) {
  console.log(`SKIP: the ws package is not installed (run \`npm ci\` in tests/browser): ${e.message}`);
  process.exit(77);
}
const chromium = findChromium();
if (!chromium) {
  console.log('SKIP: Chromium is not installed (apt-get install chromium)');
  process.exit(77);
}

const [clocklm, outDir] = process.argv.slice(2);
assert.ok(clocklm && outDir, 'usage: node lab_e2e.mjs CLOCKLM_BINARY OUT_DIR');
mkdirSync(outDir, { recursive: true });
const dir = mkdtempSync(join(tmpdir(), 'clocklm-serve-e2e-'));
const runs = join(dir, 'runs');
mkdirSync(runs);
const children = [];

function cli(args) {
  const r = spawnSync(clocklm, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, `clocklm ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

function cleanup() {
  for (const p of children) try { process.kill(-p.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  rmSync(dir, { recursive: true, force: true });
}

try {
  // A tiny corpus and dataset.
  const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'far', 'away', 'home'];
  let seed = 7, text = '';
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
  for (let i = 0; i < 6000; i++) text += words[rnd() % 12] + (i % 13 === 12 ? '.\n\n' : ' ');
  writeFileSync(join(dir, 'corpus.txt'), text);
  const data = join(dir, 'data');
  cli(['prepare', '--input', join(dir, 'corpus.txt'), '--txt-doc-bytes', '200', '--val-fraction', '0.2', '--vocab-size', '300', '--out', data, '--quiet']);
  const tiny = ['model.n_layer=1', 'model.d_model=64', 'model.n_head=2', 'model.n_kv_head=2', 'model.head_dim=32',
    'model.seq_len=32', 'train.batch_tokens=64', 'train.micro_batch=2', 'train.val_tokens=512',
    'train.periodic_val_tokens=256', 'train.log_every=1', 'train.threads=1'];
  const sets = list => list.flatMap(s => ['--set', s]);

  // Run "a" finishes first (a checkpoint to sample from); run "b", with another learning rate,
  // trains for its whole budget while the browser watches, measuring val bpb twice a second.
  cli(['train', '--config', 'd4', ...sets([...tiny, 'train.max_steps=20']), '--data', data, '--budget', '60s',
    '--out', join(runs, 'a'), '--quiet']);
  cli(['exp', 'submit', '--no-run', '--queue', join(runs, 'queue'), '--config', 'd4', ...sets(tiny), '--budget', '30s',
    '--data', data, '--hypothesis', 'a queued experiment shows on the lab page', '--name', 'waiting']);
  const train = spawn(clocklm, ['train', '--config', 'd4',
    ...sets([...tiny, 'optim.matrix.lr=0.01', 'train.eval_every_seconds=0.5']),
    '--data', data, '--budget', '45s', '--out', join(runs, 'b'), '--quiet'], { stdio: 'ignore', detached: true });
  children.push(train);

  const { m: served } = await start(children, clocklm, ['serve', runs, '--port', '0'], /http:\/\/127\.0\.0\.1:(\d+)\//, 'clocklm serve');
  const base = `http://127.0.0.1:${served[1]}/`;
  const { m: devtools } = await start(children, chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--remote-debugging-port=0', `--user-data-dir=${join(dir, 'chromium')}`, 'about:blank'],
  /DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//, 'chromium');
  const page = await openPage(devtools[1], outDir);

  // 1. The runs table lists both runs (b running) and the queued experiment.
  while (!existsSync(join(runs, 'b', 'metrics.jsonl'))) await sleep(100);
  await page.go(base + '#/runs', 'runs');
  await page.waitFor(`document.querySelector('#runs-table tr[data-run-id="b"][data-status="running"]')`, 'run b listed as running');
  assert.ok(await page.eval(`!!document.querySelector('#runs-table tr[data-run-id="a"][data-status="done"]')`), 'run a listed as done');
  assert.ok(await page.eval(`!!document.querySelector('#runs-table tr[data-run-id="queue/exp-0001/run"][data-status="queued"]')`),
    'the queued experiment is listed');
  const runningParams = await page.eval(`fetch('/api/runs').then(r => r.json())
    .then(j => j.runs.find(r => r.id === "b").params)`);
  assert.ok(runningParams > 0, `the running run's parameter count is shown (got ${runningParams})`);
  await page.screenshot('runs.png');

  // 2. The live curve of b gains points while it trains, within a few seconds.
  await page.go(base + '#/run/b', 'run');
  const points = () => page.eval(`Number(document.querySelector('svg.chart[data-chart="loss"]').dataset.points)`);
  await page.waitFor(`Number(document.querySelector('svg.chart[data-chart="loss"]').dataset.points) > 2`, 'first points of b');
  const n0 = await points(), t0 = Date.now();
  await page.waitFor(`Number(document.querySelector('svg.chart[data-chart="loss"]').dataset.points) > ${n0}`,
    'the live curve to gain points', 5000);
  console.log(`live curve: ${n0} -> ${await points()} points in ${Date.now() - t0} ms`);
  assert.ok(await page.eval(`!!document.querySelector('svg.chart[data-chart="loss"] line.budget')`), 'the budget end is marked');
  await page.screenshot('run-live.png');

  // 3. Compare overlays the two runs and highlights the learning rate that differs.
  await page.go(base + '#/compare?run=a&run=b', 'compare');
  await page.waitFor(`document.querySelector('svg.chart[data-chart="loss"]').dataset.series === '2'`, 'two overlaid curves');
  await page.waitFor(`[...document.querySelectorAll('#compare-table tr.differs td:first-child')].some(td => td.textContent === 'optim.matrix.lr')`,
    'optim.matrix.lr highlighted as a difference');
  await page.screenshot('compare.png');

  // 4. A sample comes back from run a's checkpoint through the page's sample box.
  await page.go(base + '#/run/a', 'run');
  await page.waitFor(`document.querySelector('#sample-go')`, 'the sample box');
  await page.eval(`document.querySelector('#sample-prompt').value = 'the cat'; document.querySelector('#sample-tokens').value = '12'; document.querySelector('#sample-go').click(); true`);
  await page.waitFor(`document.querySelector('#sample-output').dataset.done`, 'a sample', 60000);
  const sample = await page.eval(`document.querySelector('#sample-output').textContent`);
  assert.equal(await page.eval(`document.querySelector('#sample-output').dataset.done`), '1', `sampling failed: ${sample}`);
  assert.ok(sample.startsWith('the cat') && sample.length > 'the cat'.length, `sample: ${sample}`);
  console.log(`sample: ${JSON.stringify(sample)}`);
  await page.screenshot('run-sample.png');

  // 5. The lab page shows the queue, its ledger and the waiting experiment.
  await page.go(base + '#/lab', 'lab');
  assert.ok(await page.eval(`!!document.querySelector('.queue-table tr[data-exp-id="exp-0001"]')`), 'the experiment on the lab page');
  await page.screenshot('lab.png');
  page.ws.close();
  console.log(`ok: screenshots in ${outDir}`);
} catch (e) {
  console.error(e.stack || String(e));
  cleanup();
  process.exit(1);
}
cleanup();
