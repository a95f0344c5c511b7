// DuckDB's side of bench/parquet_vs_jsonl.sh.
//   node parquet_bench.mjs make SHARED_TRAIN_DIR TEXT_MB OUT_DIR   writes OUT_DIR/shard.parquet
//     (zstd, ROW_GROUP_SIZE 1024: DuckDB makes row groups of 2048) and OUT_DIR/shard.jsonl.zst ({"text": ...} lines) with
//     the same documents: the Wikipedia files' documents in order, up to TEXT_MB of text.
//   node parquet_bench.mjs read FILE.parquet   reads the text column; prints documents, bytes, seconds.
import { DuckDBInstance } from '@duckdb/node-api';

const [mode, ...args] = process.argv.slice(2);
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
if (mode === 'make') {
  const [train, mb, out] = args;
  await c.run(`CREATE TABLE docs AS SELECT text FROM read_json('${train}/wiki2015-*.jsonl.zst',
                 columns = {text: 'VARCHAR'}, format = 'newline_delimited')`);
  await c.run(`CREATE TABLE sel AS SELECT rowid AS r, text FROM (
                 SELECT rowid, text, sum(strlen(text)) OVER (ORDER BY rowid) AS upto FROM docs)
               WHERE upto <= ${Number(mb) * 1e6}`);
  await c.run(`COPY (SELECT text FROM sel ORDER BY r) TO '${out}/shard.parquet'
                 (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1024)`);
  await c.run(`COPY (SELECT text FROM sel ORDER BY r) TO '${out}/shard.jsonl.zst' (FORMAT json, COMPRESSION zstd)`);
  const r = (await c.runAndReadAll(`SELECT count(*), sum(strlen(text)) FROM sel`)).getRows()[0];
  console.log(`${r[0]} documents, ${(Number(r[1]) / 1e6).toFixed(1)} MB of text`);
} else if (mode === 'read') {
  const t0 = performance.now();
  const r = (await c.runAndReadAll(`SELECT count(text), sum(strlen(text)) FROM read_parquet('${args[0]}')`)).getRows()[0];
  const s = (performance.now() - t0) / 1000;
  console.log(`duckdb: ${r[0]} documents, ${(Number(r[1]) / 1e6).toFixed(1)} MB of text in ${s.toFixed(2)} s`);
} else {
  console.error('usage: node parquet_bench.mjs make TRAIN_DIR TEXT_MB OUT_DIR | read FILE.parquet');
  process.exit(2);
}
