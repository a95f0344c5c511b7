// Writes Parquet fixtures with DuckDB (an independent writer) for clocklm's Parquet reader tests,
// and, next to each, what DuckDB itself reads back from the file.
//   node parquet_fixtures.mjs OUT_DIR
//   node parquet_fixtures.mjs --read FILE COLUMN    prints what DuckDB reads from FILE, as below
// For each fixture NAME: NAME.parquet and NAME.expected (one line per row, in file order: the
// text column's bytes in hex, or "-" for a null). OUT_DIR/fixtures.json lists the fixtures with
// their options and the encodings DuckDB's parquet_metadata reports for the text column.
import { DuckDBInstance } from '@duckdb/node-api';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const out = process.argv[2];
if (!out) {
  console.error('usage: node parquet_fixtures.mjs OUT_DIR | --read FILE COLUMN');
  process.exit(2);
}
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
const readBack = async (file, column) =>
  (await c.runAndReadAll(`SELECT hex(encode(${column})) AS h FROM read_parquet('${file}', file_row_number = true)
                          ORDER BY file_row_number`)).getRows().map((r) => (r[0] === null ? '-' : r[0]) + '\n').join('');
if (out === '--read') {
  process.stdout.write(await readBack(process.argv[3], process.argv[4]));
  process.exit(0);
}
mkdirSync(out, { recursive: true });

// Rows with varied text: ASCII, accents, CJK, emoji, newlines and quotes, empty strings, long
// strings, repeats (dictionary material) and nulls; other columns of several types around it,
// a list and a struct among them.
const mixed = (n) => `
  SELECT i AS id,
         'title ' || i AS title,
         [i, i + 1]::INTEGER[] AS nums,
         CASE WHEN i % 11 = 3 THEN NULL
              WHEN i % 13 = 5 THEN ''
              WHEN i % 7 = 0 THEN 'Grüße aus Köln, ' || i || ' — 東京の天気 🌧️ "quoted"\n\tsecond line'
              WHEN i % 5 = 0 THEN repeat('long document ' || i || ' ', 40 + i % 50)
              ELSE 'doc ' || i || ': plain ASCII text.' END AS text,
         {'a': i, 'b': 'x' || i} AS meta,
         ['t' || i, 'u']::VARCHAR[] AS tags,
         i / 3.0 AS score
  FROM range(${n}) t(i)`;
const repeated = (n) => `
  SELECT CASE WHEN i % 9 = 4 THEN NULL ELSE 'shared text number ' || (i % 6) END AS text, i AS id
  FROM range(${n}) t(i)`;
const unique = (n) => `
  SELECT md5(i::VARCHAR) || ' ' || repeat(chr((97 + i % 26)::INTEGER), (1 + i % 300)::INTEGER) || ' é' AS text, i AS id
  FROM range(${n}) t(i)`;

const fixtures = [];
async function write(name, query, opts, column = 'text') {
  const file = join(out, name + '.parquet');
  const o = Object.entries(opts).map(([k, v]) => `${k} ${v}`).join(', ');
  await c.run(`COPY (${query}) TO '${file}' (FORMAT parquet${o ? ', ' + o : ''})`);
  let encodings = [];
  if (column) {
    writeFileSync(join(out, name + '.expected'), await readBack(file, column));
    const meta = (await c.runAndReadAll(
      `SELECT DISTINCT encodings FROM parquet_metadata('${file}') WHERE path_in_schema = '${column}'`)).getRows();
    encodings = meta.map((r) => String(r[0]));
  }
  fixtures.push({ name, column, options: opts, encodings });
}

for (const codec of ['uncompressed', 'snappy', 'gzip', 'zstd']) {
  for (const version of ['v1', 'v2']) {
    await write(`mixed_${codec}_${version}`, mixed(5000), { COMPRESSION: codec, PARQUET_VERSION: version, ROW_GROUP_SIZE: 2048 });
  }
}
await write('mixed_large_groups', mixed(15000), { COMPRESSION: 'zstd', ROW_GROUP_SIZE: 100000 });
await write('repeated_v1', repeated(2000), { COMPRESSION: 'snappy', PARQUET_VERSION: 'v1', ROW_GROUP_SIZE: 500 });
await write('repeated_plain_v1', repeated(300), { COMPRESSION: 'uncompressed', PARQUET_VERSION: 'v1', ROW_GROUP_SIZE: 300 });
await write('repeated_v2', repeated(2000), { COMPRESSION: 'zstd', PARQUET_VERSION: 'v2', ROW_GROUP_SIZE: 500 });
await write('unique_v1', unique(1500), { COMPRESSION: 'gzip', PARQUET_VERSION: 'v1', ROW_GROUP_SIZE: 1024 });
await write('unique_v2', unique(1500), { COMPRESSION: 'uncompressed', PARQUET_VERSION: 'v2', ROW_GROUP_SIZE: 1024 });
// Single-column, single-row-group files that the test turns into files of DATA_PAGE_V2 pages
// (DuckDB writes v1 data page headers even with PARQUET_VERSION v2, but reads v2 pages).
const single = (n) => `SELECT CASE WHEN i % 7 = 2 THEN NULL WHEN i % 3 = 0 THEN 'dup ' || (i % 4)
                       ELSE 'single ' || i || ' ñ ' || repeat('z', (i % 40)::INTEGER) END AS text FROM range(${n}) t(i)`;
await write('v2src_uncompressed', single(30000), { COMPRESSION: 'uncompressed', ROW_GROUP_SIZE: 100000 });
await write('v2src_zstd', single(30000), { COMPRESSION: 'zstd', ROW_GROUP_SIZE: 100000 });
await write('v2src_dict', `SELECT text FROM (${repeated(3000)})`, { COMPRESSION: 'zstd', ROW_GROUP_SIZE: 100000 });
// A required (NOT NULL) text column: no definition levels at all.
await c.run(`CREATE TABLE req (text VARCHAR NOT NULL, n INTEGER)`);
await c.run(`INSERT INTO req SELECT 'required ' || i, i FROM range(300) t(i)`);
await write('required', 'SELECT * FROM req', { COMPRESSION: 'zstd', ROW_GROUP_SIZE: 100 });
// The text under another name, and files the reader must refuse.
await write('body_column', `SELECT i AS id, 'body ' || i AS body FROM range(50) t(i)`, { COMPRESSION: 'snappy' }, 'body');
await write('no_text', `SELECT i AS id, 'body ' || i AS body FROM range(10) t(i)`, { COMPRESSION: 'snappy' }, null);
await write('nested_text', `SELECT i AS id, ['a' || i] AS text FROM range(10) t(i)`, {}, null);
await write('int_text', `SELECT i AS id, i AS text FROM range(10) t(i)`, {}, null);
await write('empty', `SELECT 'x' AS text WHERE false`, {}, 'text');

writeFileSync(join(out, 'fixtures.json'), JSON.stringify({ duckdb: (await c.runAndReadAll('SELECT version()')).getRows()[0][0], fixtures }, null, 1) + '\n');
