// End-to-end test of `clocklm mcp` through the official MCP TypeScript SDK client: initialize,
// list the tools, prepare a tiny dataset, submit a tiny experiment, poll until it is done, read its
// results and journal entry, submit a second one against it as baseline, compare them, rank them,
// sample and evaluate; then the errors a client sees (unknown tool, bad arguments, a failing tool)
// with the server still serving after each.
// Usage: node e2e.mjs CLOCKLM_BINARY. Exit status 77 (CTest's skip) when the SDK is not installed.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

let Client, StdioClientTransport, McpError;
try {
  ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
  ({ StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js'));
  ({ McpError } = await import('@modelcontextprotocol/sdk/types.js'));
} catch (e) {
  console.log(`SKIP: @modelcontextprotocol/sdk is not installed (run \`npm ci\` in tests/mcp): ${e.message}`);
  process.exit(77);
}

const clocklm = process.argv[2];
assert.ok(clocklm, 'usage: node e2e.mjs CLOCKLM_BINARY');
const dir = mkdtempSync(join(tmpdir(), 'clocklm-mcp-e2e-'));
const queue = join(dir, 'queue');

// A tiny corpus: twelve words, deterministic.
const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'far', 'away', 'home'];
let seed = 5;
const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
let train = '', val = '';
for (let i = 0; i < 3000; i++) {
  const w = words[next() % 12] + (i % 13 === 12 ? '.\n' : ' ');
  if (i < 2600) train += w; else val += w;
}
writeFileSync(join(dir, 'train.txt'), train);
writeFileSync(join(dir, 'val.txt'), val);

const tiny = ['model.n_layer=1', 'model.d_model=64', 'model.n_head=2', 'model.n_kv_head=2', 'model.head_dim=32',
  'model.seq_len=32', 'train.batch_tokens=64', 'train.micro_batch=2', 'train.val_tokens=512',
  'train.periodic_val_tokens=256', 'train.eval_every_seconds=20', 'train.max_steps=5'];

const transport = new StdioClientTransport({
  command: clocklm,
  args: ['mcp', '--queue', queue],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'clocklm-e2e', version: '1.0.0' });

// The structured result of a tool that must succeed.
async function call(name, args) {
  const r = await client.callTool({ name, arguments: args });
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  assert.ok(r.structuredContent, `${name} returned no structured content`);
  return r.structuredContent;
}

async function waitDone(id) {
  for (let i = 0; i < 600; i++) {
    const s = await call('experiment_status', { id });
    const st = s.experiment.state;
    if (st === 'done') return s;
    assert.ok(st === 'queued' || st === 'running', `${id} ended ${st}: ${s.experiment.reason}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${id} did not finish`);
}

async function expectRpcError(promise, code, text) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof McpError, `not an McpError: ${e}`);
    assert.equal(e.code, code);
    assert.ok(e.message.includes(text), e.message);
    return true;
  });
  await client.ping();  // still serving
}

try {
  await client.connect(transport);
  assert.equal(client.getServerVersion().name, 'clocklm');
  assert.ok(client.getServerCapabilities().tools);
  assert.match(client.getInstructions(), /bits per byte/);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ['describe_device', 'list_configs', 'show_config', 'prepare_data', 'submit_experiment',
    'list_experiments', 'experiment_status', 'cancel_experiment', 'experiment_results', 'compare_runs',
    'leaderboard', 'evaluate_checkpoint', 'sample_text', 'journal']) {
    assert.ok(names.includes(n), `tool ${n} missing`);
  }
  for (const t of tools) assert.equal(t.inputSchema.type, 'object');

  const data = await call('prepare_data', {
    out: join(dir, 'data'), inputs: [join(dir, 'train.txt')], val: [join(dir, 'val.txt')], vocab_size: 300,
  });
  assert.ok(data.vocab_size > 256 && data.vocab_size <= 300, `vocab ${data.vocab_size}`);
  const shown = await call('show_config', { config: 'd4', set: tiny, vocab_size: 300 });
  assert.equal(shown.config.model.n_layer, 1);

  // The research loop: a baseline, then one change against it.
  const a = await call('submit_experiment', {
    config: 'd4', set: tiny, budget: '60s', data: data.dataset, name: 'base',
    hypothesis: 'the tiny model learns the twelve-word language',
  });
  const idA = a.experiment.id;
  assert.match(idA, /^exp-\d{4}$/);
  await waitDone(idA);
  const resA = await call('experiment_results', { id: idA, metrics_tail: 3 });
  assert.ok(Number.isFinite(resA.summary.val_bpb));
  assert.equal(resA.metrics_tail.length, 3);
  assert.equal(resA.journal.hypothesis, 'the tiny model learns the twelve-word language');

  const b = await call('submit_experiment', {
    config: 'd4', set: [...tiny, 'optim.matrix.lr=0.01'], budget: '60s', data: data.dataset, name: 'lr0.01',
    baseline: idA, hypothesis: 'half the matrix learning rate is about as good',
  });
  const idB = b.experiment.id;
  assert.notEqual(idB, idA);
  const doneB = await waitDone(idB);
  assert.ok(doneB.queue.ledger.spent_device_seconds > 0);
  const resB = await call('experiment_results', { id: idB });
  assert.equal(resB.journal.baseline.ref, idA);
  assert.ok(Number.isFinite(resB.journal.delta.val_bpb));
  assert.deepEqual(resB.journal.config_diff.map((d) => d.key), ['optim.matrix.lr']);

  const cmp = await call('compare_runs', { runs: [idA, idB] });
  assert.equal(cmp.ranking.length, 2);
  assert.ok(cmp.config_differences.some((d) => d.key === 'optim.matrix.lr'));
  const board = await call('leaderboard', {});
  assert.deepEqual(board.runs.map((r) => r.run).sort(), [idA, idB]);
  const listed = await call('list_experiments', { state: 'done' });
  assert.equal(listed.experiments.length, 2);
  const journal = await call('journal', {});
  assert.ok(journal.markdown.includes('half the matrix learning rate is about as good'));
  assert.equal(journal.entries.length, 2);

  const sample = await call('sample_text', { run: idA, prompt: 'the cat', tokens: 8, temperature: 0 });
  assert.ok(sample.text.startsWith('the cat'));
  const ev = await call('evaluate_checkpoint', { run: idB, metric: 'bpb', val_tokens: 256 });
  assert.ok(Number.isFinite(ev.result.bpb));

  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === 'clocklm://docs/AGENTS.md'));
  const summary = await client.readResource({ uri: `clocklm://experiments/${idB}/run/summary.json` });
  assert.equal(JSON.parse(summary.contents[0].text).val_bpb, resB.summary.val_bpb);

  // Errors: protocol-level ones reject the call; a failing tool returns isError with its message.
  await expectRpcError(client.callTool({ name: 'no_such_tool', arguments: {} }), -32602, "unknown tool 'no_such_tool'");
  await expectRpcError(client.callTool({ name: 'submit_experiment', arguments: { config: 'd4', budget: 5, hypothesis: 'h' } }),
    -32602, 'arguments.budget: expected string');
  const bad = await client.callTool({ name: 'submit_experiment',
    arguments: { config: 'no-such-preset', budget: '1m', data: data.dataset, hypothesis: 'h' } });
  assert.equal(bad.isError, true);
  const cli = spawnSync(clocklm, ['exp', 'submit', '--no-run', '--queue', queue, '--config', 'no-such-preset',
    '--budget', '1m', '--data', data.dataset], { encoding: 'utf8' });
  assert.equal(cli.stderr, `clocklm: error: ${bad.content[0].text}\n`);
  await client.ping();
  console.log(`ok: ${idA} and ${idB} trained, compared and journaled through the MCP SDK client`);
} finally {
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
