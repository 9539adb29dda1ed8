// The browser half of tests/posthog_js.rs: posthog-js (npm) records a page in headless Chromium
// and sends to Sextant unchanged; rrweb's Replayer (npm) plays the recording Sextant returns.
//
//   node posthog_replay.mjs record <api_host> <project_token>
//     prints {session_id, distinct_id, sent_events, snapshot_requests, marker}: what posthog-js
//     sent to /s/ and Sextant acknowledged with 200.
//   node posthog_replay.mjs play <recording.json>
//     prints {given, cast, errors, warnings, input_value, items}: the Replayer's run over the
//     `events` of a GET /api/replays/{id} answer, and the replayed page at its end.
//
// Pages are served from 127.0.0.1 by this script, posthog-js and rrweb from node_modules:
// nothing is fetched from the internet.

import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, 'node_modules');
const CHROMIUM = process.env.SEXTANT_CHROMIUM || '/usr/bin/chromium';
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
// A step that takes longer than this fails the run.
const STEP_MS = 30_000;

function fail(message) {
  process.stderr.write(`posthog_replay: ${message}\n`);
  process.exit(1);
}

/** Serves `routes` (path -> [content type, body]) on a loopback port. */
async function serve(routes) {
  const server = createServer((req, res) => {
    const route = routes[new URL(req.url, 'http://x').pathname];
    if (!route) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': route[0], 'cache-control': 'no-store' }).end(route[1]);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

/**
 * Chromium with a fresh profile. Debian's Chromium now and then dies with SIGSEGV while it
 * starts in a container (before any page exists); such a launch is tried again, twice at most.
 */
async function launch() {
  for (let attempt = 1; ; attempt++) {
    const profile = mkdtempSync(join(tmpdir(), 'sextant-chromium-'));
    try {
      const context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        headless: true,
        args: FLAGS,
        timeout: STEP_MS,
      });
      return { context, profile };
    } catch (e) {
      rmSync(profile, { recursive: true, force: true });
      if (attempt === 3 || !String(e).includes('has been closed')) throw e;
      console.error(`Chromium died while starting (attempt ${attempt}); starting it again`);
    }
  }
}

/** Chromium with a fresh profile, removed when `work` is done. */
async function withBrowser(work) {
  const { context, profile } = await launch();
  try {
    return await work(context);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** Waits until `check()` is truthy, polling; fails after STEP_MS. */
async function until(what, check) {
  const deadline = Date.now() + STEP_MS;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 50));
  }
}

/** An rrweb event as recorded: posthog-js gzips some fields into latin1 strings ("cv"). */
function expand(event) {
  if (!event || !event.cv) return event;
  const inflate = (s) => (typeof s === 'string' ? JSON.parse(gunzipSync(Buffer.from(s, 'latin1')).toString()) : s);
  if (event.type === 2) return { ...event, data: inflate(event.data) };
  const data = { ...event.data };
  for (const f of ['texts', 'attributes', 'removes', 'adds']) if (f in data) data[f] = inflate(data[f]);
  return { ...event, data };
}

/** The events of a posthog-js capture body: JSON or gzip (by its magic bytes), one or many. */
function captureEvents(buffer) {
  const text = buffer[0] === 0x1f && buffer[1] === 0x8b ? gunzipSync(buffer).toString() : buffer.toString();
  const body = JSON.parse(text);
  return Array.isArray(body) ? body : body.batch ?? [body];
}

async function record(apiHost, token) {
  const marker = `typed-${process.pid}`;
  const page = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>recorded page</title>
<style>li { color: rgb(0, 90, 200) }</style>
<script src="/posthog/array.full.js"></script>
<script>
  posthog.init(${JSON.stringify(token)}, {
    api_host: ${JSON.stringify(apiHost)},
    // Headless Chromium says so in its user agent: not a bot here.
    opt_out_useragent_filter: true,
    request_queue_config: { flush_interval_ms: 200 },
    // Inputs are masked by default; unmasked, the replayed input shows what was typed.
    session_recording: { maskAllInputs: false },
  });
</script></head>
<body>
  <h1>Orders</h1>
  <input id="name" placeholder="name">
  <button id="add" onclick="
    const li = document.createElement('li');
    li.textContent = document.getElementById('name').value;
    document.getElementById('items').appendChild(li);
  ">Add</button>
  <ul id="items"></ul>
</body></html>`;
  const { server, url } = await serve({
    '/': ['text/html', page],
    '/posthog/array.full.js': ['text/javascript', readFileSync(join(modules, 'posthog-js/dist/array.full.js'))],
  });
  try {
    return await withBrowser(async (context) => {
      const tab = await context.newPage();
      const errors = [];
      tab.on('pageerror', (e) => errors.push(String(e)));
      // What posthog-js sends to /s/, and what Sextant answered.
      const pending = new Set();
      const answered = [];
      let lastActivity = Date.now();
      tab.on('request', (r) => {
        if (new URL(r.url()).pathname === '/s/') {
          pending.add(r);
          lastActivity = Date.now();
        }
      });
      const settle = async (r) => {
        if (!pending.delete(r)) return;
        const response = await r.response().catch(() => null);
        answered.push({ status: response ? response.status() : 0, body: r.postDataBuffer() });
        lastActivity = Date.now();
      };
      tab.on('requestfinished', settle);
      tab.on('requestfailed', settle);

      await tab.goto(url, { timeout: STEP_MS });
      await until('posthog-js to start recording', () =>
        tab.evaluate(() => window.posthog?.sessionRecordingStarted?.() === true),
      );
      await tab.click('#name');
      await tab.keyboard.type(marker, { delay: 5 });
      await tab.click('#add');
      await tab.waitForSelector('li');
      // Until Sextant has acknowledged the typed text, then nothing more is sent.
      const sent = () =>
        answered.flatMap((a) => captureEvents(a.body)).filter((e) => e.event === '$snapshot');
      await until('the recording of the typing to be sent', () =>
        answered.length > 0 && JSON.stringify(sent().flatMap((e) => e.properties.$snapshot_data).map(expand)).includes(marker),
      );
      await tab.evaluate(() => window.posthog.stopSessionRecording());
      await until('the last snapshots to be sent', () => pending.size === 0 && Date.now() - lastActivity > 1500);
      if (errors.length) fail(`the recorded page failed: ${errors.join('; ')}`);
      const refused = answered.filter((a) => a.status !== 200);
      if (refused.length) fail(`Sextant refused ${refused.length} recording requests: ${refused.map((a) => a.status)}`);
      const snapshots = sent();
      const ids = await tab.evaluate(() => ({
        session_id: window.posthog.get_session_id(),
        distinct_id: window.posthog.get_distinct_id(),
      }));
      const sessions = new Set(snapshots.map((e) => e.properties.$session_id));
      if (sessions.size !== 1 || !sessions.has(ids.session_id)) {
        fail(`snapshots of sessions ${[...sessions]}, the page's is ${ids.session_id}`);
      }
      const data = (e) => e.properties.$snapshot_data;
      return {
        ...ids,
        marker,
        snapshot_requests: answered.length,
        sent_events: snapshots.reduce((n, e) => n + (Array.isArray(data(e)) ? data(e).length : 1), 0),
        // Events posthog-js compressed itself ("cv"), which Sextant must have expanded.
        compressed_events: snapshots.flatMap(data).filter((e) => e && e.cv).length,
      };
    });
  } finally {
    server.close();
  }
}

async function play(file) {
  const recording = JSON.parse(readFileSync(file, 'utf8'));
  const page = `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<link rel="stylesheet" href="/rrweb/style.css">
<script src="/rrweb/rrweb.umd.cjs"></script></head><body><div id="player"></div></body></html>`;
  const { server, url } = await serve({
    '/': ['text/html', page],
    '/rrweb/rrweb.umd.cjs': ['text/javascript', readFileSync(join(modules, 'rrweb/dist/rrweb.umd.cjs'))],
    '/rrweb/style.css': ['text/css', readFileSync(join(modules, 'rrweb/dist/style.css'))],
  });
  try {
    return await withBrowser(async (context) => {
      const tab = await context.newPage();
      const errors = [];
      const warnings = [];
      tab.on('pageerror', (e) => errors.push(String(e)));
      tab.on('console', (m) => {
        if (m.type() === 'error') errors.push(`${m.text()} (${m.location().url})`);
        if (m.type() === 'warning') warnings.push(m.text());
      });
      await tab.goto(url, { timeout: STEP_MS });
      const result = await tab.evaluate(async (events) => {
        const replayer = new rrweb.Replayer(events, {
          root: document.getElementById('player'),
          showWarning: true,
          speed: 1,
        });
        let cast = 0;
        replayer.on('event-cast', () => cast++);
        const finished = new Promise((ok) => replayer.on('finish', ok));
        // Plays from the start to the end at once (the same code path, without the waiting).
        replayer.play(0);
        replayer.pause(replayer.getMetaData().totalTime);
        replayer.play(replayer.getMetaData().totalTime);
        await Promise.race([finished, new Promise((ok) => setTimeout(ok, 5000))]);
        const doc = replayer.iframe.contentDocument;
        return {
          given: events.length,
          cast,
          total_time_ms: replayer.getMetaData().totalTime,
          input_value: doc.getElementById('name')?.value ?? null,
          items: [...doc.querySelectorAll('li')].map((li) => li.textContent),
          title: doc.title,
        };
      }, recording.events);
      return { ...result, errors, warnings };
    });
  } finally {
    server.close();
  }
}

const [command, ...args] = process.argv.slice(2);
let result;
if (command === 'record' && args.length === 2) {
  result = await record(args[0], args[1]);
} else if (command === 'play' && args.length === 1) {
  result = await play(args[0]);
} else {
  fail('usage: posthog_replay.mjs record <api_host> <project_token> | play <recording.json>');
}
process.stdout.write(JSON.stringify(result) + '\n');
