// Runs an exported model.onnx with ONNX Runtime (onnxruntime-node, CPU execution provider): the
// logits of batches of token rows, and optionally a greedy continuation of a prompt (the model run
// on the whole prefix for each new token, the first index of the largest logit taken).
//   node onnx_run.mjs MODEL.onnx IN.json OUT.json
// IN.json:  {"batches": [[[ids of row 1], [ids of row 2], ...], ...],   rows of a batch equally long
//            "greedy": {"prompt": [ids], "tokens": N}}                  optional
// OUT.json: {"logits": [[floats of batch 1, B x T x V row-major], ...], "dims": [[B, T, V], ...],
//            "greedy": [N continuation ids]}
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
writeFileSync(outPath, JSON.stringify(result));
