// A minimal client of Chromium's DevTools protocol for the dashboard's browser test and benchmark:
// start a child and wait for a line of its output, open the page target of a headless Chromium,
// navigate, evaluate, wait for a condition, take a screenshot.
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';

export const sleep = ms => new Promise(r => setTimeout(r, ms));

// The first Chromium on PATH, or undefined.
export function findChromium() {
  return ['chromium', 'chromium-browser', 'google-chrome'].find(
    c => spawnSync('sh', ['-c', `command -v ${c}`]).status === 0);
}

// Starts a child and resolves with it once a line of its output matches `ready`.
export function start(children, cmd, args, ready, what) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    children.push(p);
    let text = '';
    const onData = d => {
      text += d;
      const m = text.match(ready);
      if (m) resolve({ p, m });
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', onData);
    p.on('exit', code => reject(new Error(`${what} exited (${code}) before it was ready:\n${text}`)));
  });
}

export class Page {
  constructor(ws, outDir) {
    this.ws = ws; this.outDir = outDir; this.next = 1; this.pending = new Map();
    ws.on('message', m => {
      const msg = JSON.parse(m);
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      msg.error ? p.reject(new Error(JSON.stringify(msg.error))) : p.resolve(msg.result);
    });
  }
  send(method, params) {
    const id = this.next++;
    this.ws.send(JSON.stringify({ id, method, params: params || {} }));
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }
  async eval(expr) {
    const r = await this.send('Runtime.evaluate', { expression: expr, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(`${expr}: ${JSON.stringify(r.exceptionDetails)}`);
    return r.result.value;
  }
  async waitFor(expr, what, timeoutMs = 20000) {
    const t0 = Date.now();
    for (;;) {
      const v = await this.eval(expr).catch(() => null);
      if (v) return v;
      if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what} (${expr})`);
      await sleep(100);
    }
  }
  async go(url, ready) {
    await this.send('Page.navigate', { url });
    await this.waitFor(`document.body && document.body.dataset.ready === '${ready}'`, `the ${ready} view`);
  }
  async screenshot(name) {
    const r = await this.send('Page.captureScreenshot', { format: 'png' });
    writeFileSync(join(this.outDir, name), Buffer.from(r.data, 'base64'));
  }
}

export async function openPage(port, outDir) {
  const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const target = list.find(t => t.type === 'page');
  const ws = new WebSocket(target.webSocketDebuggerUrl, { perMessageDeflate: false });
  await new Promise((resolve, reject) => { ws.on('open', resolve); ws.on('error', reject); });
  const page = new Page(ws, outDir);
  await page.send('Page.enable');
  await page.send('Emulation.setDeviceMetricsOverride', { width: 1280, height: 900, deviceScaleFactor: 1, mobile: false });
  return page;
}

