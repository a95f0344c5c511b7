// Runs an exported model.onnx with ONNX Runtime (onnxruntime-node, CPU execution provider): the
// logits of batches of token rows, and optionally a greedy continuation of a prompt (the model run
// on the whole prefix for each new token, the first index of the largest logit taken), and the
// same continuation through the generation variant (model_with_past.onnx: the prompt once, then
// one token per call with the returned keys and values fed back).
//   node onnx_run.mjs MODEL.onnx IN.json OUT.json
// IN.json:  {"batches": [[[ids of row 1], [ids of row 2], ...], ...],   rows of a batch equally long
//            "greedy": {"prompt": [ids], "tokens": N},                  optional
//            "incremental": {"model": "model_with_past.onnx", "prompt": [ids], "tokens": N,
//                            "kv_heads": Hkv, "head_dim": hd}}          optional
// OUT.json: {"logits": [[floats of batch 1, B x T x V row-major], ...], "dims": [[B, T, V], ...],
//            "greedy": [N continuation ids],
//            "incremental": [N ids], "incremental_logits": [N x V floats: the last position's
//            logits of each call, from which each id was taken]}
import { readFileSync, writeFileSync } from 'node:fs';
import ort from 'onnxruntime-node';

const [modelPath, inPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node onnx_run.mjs MODEL.onnx IN.json OUT.json');
  process.exit(2);
}
const job = JSON.parse(readFileSync(inPath, 'utf8'));
const session = await ort.InferenceSession.create(modelPath, { executionProviders: ['cpu'] });

async function logits(rows) {
  const T = rows[0].length;
  if (rows.some((r) => r.length !== T)) throw new Error('rows of a batch must have one length');
  const ids = new BigInt64Array(rows.length * T);
  rows.forEach((r, b) => r.forEach((t, i) => { ids[b * T + i] = BigInt(t); }));
  const out = await session.run({ input_ids: new ort.Tensor('int64', ids, [rows.length, T]) });
  return out.logits;
}

const result = { logits: [], dims: [] };
for (const rows of job.batches ?? []) {
  const z = await logits(rows);
  result.logits.push(Array.from(z.data));
  result.dims.push(z.dims.map(Number));
}
if (job.greedy) {
  const seq = [...job.greedy.prompt];
  const cont = [];
  for (let n = 0; n < job.greedy.tokens; ++n) {
    const z = await logits([seq]);
    const V = Number(z.dims[2]);
    const last = z.data.subarray((seq.length - 1) * V, seq.length * V);
    let best = 0;
    for (let j = 1; j < V; ++j) if (last[j] > last[best]) best = j;
    cont.push(best);
    seq.push(best);
  }
  result.greedy = cont;
}
function argmaxLast(z, rows) {
  const V = Number(z.dims[2]);
  const last = z.data.subarray((rows - 1) * V, rows * V);
  let best = 0;
  for (let j = 1; j < V; ++j) if (last[j] > last[best]) best = j;
  return best;
}

if (job.incremental) {
  const inc = job.incremental;
  const gen = await ort.InferenceSession.create(inc.model, { executionProviders: ['cpu'] });
  const layers = gen.inputNames.filter((n) => /^past\.\d+\.key$/.test(n)).length;
  const feeds = {};
  for (let l = 0; l < layers; ++l)
    for (const kv of ['key', 'value'])
      feeds[`past.${l}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, inc.kv_heads, 0, inc.head_dim]);
  let step = inc.prompt;
  let prev = 0;
  const cont = [], steps = [];
  for (let n = 0; n < inc.tokens; ++n) {
    feeds.input_ids = new ort.Tensor('int64', BigInt64Array.from(step.map(BigInt)), [1, step.length]);
    if (gen.inputNames.includes('prev_ids')) feeds.prev_ids = new ort.Tensor('int64', BigInt64Array.from([BigInt(prev)]), [1, 1]);
    const out = await gen.run(feeds);
    const V = Number(out.logits.dims[2]);
    steps.push(...out.logits.data.subarray((step.length - 1) * V, step.length * V));
    const next = argmaxLast(out.logits, step.length);
    cont.push(next);
    prev = step[step.length - 1];
    step = [next];
    for (let l = 0; l < layers; ++l)
      for (const kv of ['key', 'value']) feeds[`past.${l}.${kv}`] = out[`present.${l}.${kv}`];
  }
  result.incremental = cont;
  result.incremental_logits = steps;
}
writeFileSync(outPath, JSON.stringify(result));
