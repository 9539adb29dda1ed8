// The dashboard in headless Chromium (driven by tests/dashboard.rs, which starts `sextant dev`
// and ingests the data this script expects). Controls are found by role and accessible name.
// Every page is screenshotted into $SCREENSHOT_DIR. Exits non-zero on the first failure.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`missing ${k}`);
  return v;
};
const URL_ = env('SEXTANT_URL');
const shots = env('SCREENSHOT_DIR');
const expect = JSON.parse(env('DASHBOARD_EXPECT'));
const TIMEOUT = 15_000;

// Debian's Chromium now and then dies with SIGSEGV while it starts in a container (before any
// page exists): such a launch is tried again, twice at most.
async function launch() {
  for (let attempt = 1; ; attempt++) {
    const profile = mkdtempSync(join(tmpdir(), 'sextant-chromium-'));
    try {
      const context = await chromium.launchPersistentContext(profile, {
        executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
        headless: true,
        args: [
          '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
          '--disable-background-networking', '--disable-component-update', '--disable-sync',
        ],
        viewport: { width: 1440, height: 900 },
        colorScheme: 'dark',
      });
      return { context, profile };
    } catch (e) {
      rmSync(profile, { recursive: true, force: true });
      if (attempt === 3 || !String(e).includes('has been closed')) throw e;
      console.error(`Chromium died while starting (attempt ${attempt}); starting it again`);
    }
  }
}
const { context, profile } = await launch();
context.setDefaultTimeout(TIMEOUT);
const page = await context.newPage();
const problems = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => m.type() === 'error' && !m.text().startsWith('Failed to load resource') && problems.push(`console error: ${m.text()}`));
// Failed requests, but for the expected ones: the session probe while signed out, and the
// favicon the sandbox payment page (not the dashboard) does not have.
page.on('response', (r) => {
  const path = new URL(r.url()).pathname;
  const expected = (path === '/auth/refresh' && r.status() === 401) || path === '/favicon.ico' || (step === 'sign up' && path === '/api/retention' && r.status() === 403);
  if (r.status() >= 400 && !expected) {
    problems.push(`${r.request().method()} ${path}: ${r.status()}`);
  }
});

let apiRequests = 0;
page.on('request', (r) => new URL(r.url()).pathname.startsWith('/api/') && apiRequests++);
/** A page that has loaded asks nothing more until told to (no refetch loop). */
const settles = async () => {
  const before = apiRequests;
  await page.waitForTimeout(1000);
  check(apiRequests === before, `the page kept requesting: ${apiRequests - before} requests in 1 s`);
};

/** Text whose contrast with its background is below WCAG AA (4.5:1), in the visible page. */
const lowContrast = () =>
  page.evaluate(() => {
    const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => {
      const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    // The colour behind an element: its ancestors' backgrounds, blended from the page up.
    const behind = (el) => {
      const layers = [];
      for (let e = el; e; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c.length >= 3 && (c[3] ?? 1) > 0) layers.push(c);
        if ((c[3] ?? 1) === 1 && c.length >= 3 && (c[3] === undefined || c[3] === 1)) break;
      }
      let out = [255, 255, 255];
      for (const c of layers.reverse()) {
        const a = c[3] ?? 1;
        out = out.map((v, i) => v * (1 - a) + c[i] * a);
      }
      return out;
    };
    const bad = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const el = n.parentElement;
      if (!el || !n.textContent.trim() || el.closest('svg, iframe, .sr-only, .skip, option, .rr-player')) continue;
      const r = el.getBoundingClientRect();
      if (!r.width || r.bottom < 0 || r.top > innerHeight) continue;
      const st = getComputedStyle(el);
      if (st.visibility === 'hidden' || Number(st.opacity) < 1 || el.closest('button:disabled, input::placeholder')) continue;
      const fg = rgb(st.color);
      const bg = behind(el);
      const [a, b] = [lum(fg.slice(0, 3)), lum(bg)].sort((x, y) => y - x);
      const ratio = (a + 0.05) / (b + 0.05);
      if (ratio < 4.5) bad.push(`"${n.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}:1`);
    }
    return bad;
  });
const contrastOk = async (where) => {
  const bad = await lowContrast();
  check(bad.length === 0, `text below 4.5:1 on ${where}: ${bad.slice(0, 5).join(', ')}`);
};

let step = '';
const check = (cond, what) => {
  if (!cond) throw new Error(`${step}: ${what}`);
};
/** Polls `f` until it is true (for values no locator waits on). */
const until = async (f, what) => {
  const end = Date.now() + TIMEOUT;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`${step}: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};
const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: false });
const nav = (name) => page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name, exact: true }).click();
const heading = (name) => page.getByRole('heading', { level: 1, name }).waitFor();
const started = Date.now();

try {
  step = 'sign in';
  await page.goto(URL_ + '/');
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await shot('01-sign-in');
  await page.getByLabel('Email', { exact: true }).fill(expect.email);
  await page.getByLabel('Password', { exact: true }).fill(expect.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await heading('Traces');
  await until(async () => (await page.getByRole('combobox', { name: 'Project' }).inputValue()) !== '', 'a project is chosen');

  step = 'traces list';
  const traces = page.getByRole('table', { name: 'Traces' });
  await traces.getByRole('row').filter({ hasText: expect.trace_root }).first().waitFor();
  await contrastOk('traces (dark)');
  await settles();
  await shot('02-traces');

  step = 'trace waterfall';
  await traces.getByRole('link', { name: expect.trace_id.slice(0, 16) }).click();
  const tree = page.getByRole('tree', { name: 'Waterfall' });
  await tree.waitFor();
  const items = tree.getByRole('treeitem');
  await items.nth(expect.trace_spans - 1).waitFor();
  check((await items.count()) === expect.trace_spans, `${expect.trace_spans} spans in the waterfall`);
  const errorSpan = tree.getByRole('treeitem', { name: /, error,/ });
  check((await errorSpan.count()) === 1, 'one span marked as an error');
  await errorSpan.click();
  const details = page.getByRole('complementary', { name: 'Span details' });
  await details.getByText(expect.exception_message).waitFor();
  await page.getByRole('list', { name: 'Logs of this trace' }).getByText(expect.log_word, { exact: false }).first().waitFor();
  check(page.url().includes('span='), 'the selected span is in the URL');
  // Keyboard: arrows move between spans, Enter selects.
  await items.first().focus();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await tree.getByRole('treeitem', { selected: true, name: /^payments POST \/charge/ }).waitFor();
  await contrastOk('waterfall (dark)');
  await shot('03-trace-waterfall');

  step = 'log search';
  await nav('Logs');
  await heading('Logs');
  await page.getByLabel('Query', { exact: true }).fill(expect.log_word);
  await page.getByRole('button', { name: 'Search' }).click();
  const logs = page.getByRole('table', { name: 'Log lines' });
  await until(async () => (await logs.getAttribute('aria-rowcount')) === String(expect.log_matches + 1), `${expect.log_matches} matching lines`);
  check((await logs.getByRole('row').count()) === expect.log_matches + 1, 'every match is in the table');
  const marks = logs.locator('mark');
  check((await marks.count()) >= expect.log_matches, 'the match is highlighted');
  check((await marks.first().innerText()).toLowerCase() === expect.log_word, 'the highlighted word is the one searched');
  check(new URL(page.url()).searchParams.get('q') === expect.log_word, 'the query is in the URL');
  await page.getByRole('img', { name: /Histogram/ }).waitFor();
  await logs.getByRole('row').filter({ hasText: 'retrying' }).click();
  await page.getByRole('region', { name: 'Log line details' }).getByText('attempt').waitFor();
  await contrastOk('logs (dark)');
  await settles();
  await shot('04-logs');

  step = 'long tables';
  // 1,500 lines: the first page (1,000) is in the table, only the rows in view are in the page.
  await page.getByLabel('Query', { exact: true }).fill(expect.bulk_word);
  await page.getByRole('button', { name: 'Search' }).click();
  await until(async () => (await logs.getAttribute('aria-rowcount')) === '1001', 'a page of 1,000 lines');
  const rendered = await logs.getByRole('row').count();
  check(rendered < 80, `only the rows in view are rendered, not ${rendered}`);
  await logs.getByRole('button', { name: 'Load older' }).click();
  await until(async () => (await logs.getAttribute('aria-rowcount')) === String(expect.bulk_lines + 1), 'every line after Load older');
  await page.getByLabel('Query', { exact: true }).fill(expect.log_word);
  await page.getByRole('button', { name: 'Search' }).click();
  await until(async () => (await logs.getAttribute('aria-rowcount')) === String(expect.log_matches + 1), 'back to the matches');

  step = 'live tail';
  await page.getByRole('button', { name: /Live tail/ }).click();
  check((await page.getByRole('button', { name: /Live tail/ }).getAttribute('aria-pressed')) === 'true', 'live tail is on');
  const res = await fetch(URL_ + '/api/v1/ingest/logs', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-API-Key': expect.api_key },
    body: JSON.stringify({ logs: [{ timestamp: Date.now(), level: 'error', service: 'api', message: `${expect.log_word} again, live` }] }),
  });
  check(res.ok, 'live log ingested');
  await logs.getByText('again, live').waitFor();
  await page.getByRole('button', { name: /Live tail/ }).click();

  step = 'APM';
  await nav('APM');
  const apm = page.getByRole('table', { name: 'Endpoints' });
  await apm.getByRole('row', { name: new RegExp(expect.apm_operation.replace(/[/]/g, '\\/')) }).first().waitFor();
  await page.getByRole('columnheader', { name: 'p95' }).waitFor();
  await shot('05-apm');

  step = 'service map';
  await nav('Service map');
  await page.getByRole('img', { name: /Service map: 3 services, 2 dependencies/ }).waitFor();
  await page.getByRole('table', { name: 'Dependencies' }).getByRole('row').nth(2).waitFor();
  await settles();
  await shot('06-service-map');

  step = 'errors';
  await nav('Errors');
  const groups = page.getByRole('table', { name: 'Error groups' });
  await groups.getByRole('row').filter({ hasText: expect.error_type }).first().click();
  await heading('Error group');
  await page.getByRole('table', { name: 'Samples' }).getByRole('row').nth(1).waitFor();
  await shot('07-error-group');

  step = 'hosts';
  await nav('Hosts');
  const hosts = page.getByRole('table', { name: 'Hosts' });
  await hosts.getByRole('row').filter({ hasText: expect.host }).waitFor();
  await hosts.getByRole('img', { name: `CPU of ${expect.host}` }).waitFor();
  await hosts.getByRole('row').filter({ hasText: expect.host }).click();
  await page.getByRole('img', { name: `CPU and disk of ${expect.host}` }).waitFor();
  await shot('08-hosts');

  step = 'events';
  await nav('Events');
  await page.getByRole('img', { name: /Events per/ }).waitFor();
  await page.getByText(`${expect.event_total} events in`).waitFor();
  await page.getByLabel('Events (comma-separated; empty: all)').fill('signup, purchase');
  await page.getByRole('checkbox', { name: 'Break down by event' }).check();
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByText('Table', { exact: true }).click();
  const buckets = page.getByRole('table', { name: 'Events per bucket' });
  await buckets.getByRole('columnheader', { name: 'purchase' }).waitFor();
  const sums = [0, 0];
  for (const row of await buckets.getByRole('row').all()) {
    const cells = await row.getByRole('cell').allInnerTexts();
    if (cells.length === 5) [3, 4].forEach((c, i) => (sums[i] += Number(cells[c].replace(/,/g, ''))));
  }
  check(sums[0] === expect.funnel_counts[0] && sums[1] === expect.purchases, `signup and purchase per bucket add up: ${sums}`);
  await shot('09-events');

  step = 'funnel';
  await nav('Funnels');
  await page.getByLabel('Step 1', { exact: true }).fill(expect.funnel_steps[0]);
  await page.getByLabel('Step 2', { exact: true }).fill(expect.funnel_steps[1]);
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByLabel('Step 3', { exact: true }).fill(expect.funnel_steps[2]);
  await page.getByRole('button', { name: 'Calculate' }).click();
  const ftable = page.getByRole('table', { name: 'Funnel steps' });
  await ftable.getByRole('row').nth(3).waitFor();
  for (let i = 0; i < 3; i++) {
    const cells = await ftable.getByRole('row').nth(i + 1).getByRole('cell').allInnerTexts();
    check(Number(cells[1].replace(/,/g, '')) === expect.funnel_counts[i], `step ${i + 1}: ${cells[1]} users, the API says ${expect.funnel_counts[i]}`);
  }
  check(new URL(page.url()).searchParams.get('steps') === expect.funnel_steps.join(','), 'the steps are in the URL');
  await contrastOk('funnel (dark)');
  await shot('10-funnel');

  step = 'retention';
  await nav('Retention');
  await page.getByLabel('Start event', { exact: true }).fill(expect.funnel_steps[0]);
  await page.getByLabel('Return event', { exact: true }).fill(expect.funnel_steps[2]);
  await page.getByRole('button', { name: 'Calculate' }).click();
  const ret = page.getByRole('table', { name: 'Retention' });
  await ret.getByRole('row').nth(1).waitFor();
  await contrastOk('retention (dark)');
  await shot('11-retention');

  step = 'active users';
  await nav('Active users');
  await page.getByRole('img', { name: 'Daily, weekly and monthly active users' }).waitFor();
  await page.getByRole('list', { name: 'Latest day' }).getByText(String(expect.users)).first().waitFor();
  await shot('12-active-users');

  step = 'cohorts';
  await nav('Cohorts');
  await page.getByLabel('Name', { exact: true }).fill('Buyers');
  await page.getByLabel('Condition 1 event', { exact: true }).fill(expect.funnel_steps[2]);
  await page.getByRole('button', { name: 'Create cohort' }).click();
  await page.getByRole('heading', { name: 'Cohort: Buyers' }).waitFor();
  const members = page.getByRole('table', { name: 'Cohort members' });
  await members.getByRole('row').nth(expect.funnel_counts[2]).waitFor();
  check((await members.getByRole('row').count()) - 1 === expect.funnel_counts[2], 'the cohort holds the buyers');
  await shot('13-cohort');

  step = 'replay';
  await nav('Session replays');
  await page.getByRole('table', { name: 'Sessions' }).getByRole('link', { name: expect.replay_id }).click();
  const playback = page.getByRole('status', { name: 'Playback' });
  await playback.getByText(/Playing/).waitFor();
  const frame = page.frameLocator('iframe');
  await frame.getByText(expect.replay_first_text).waitFor();
  // The recording changes its heading two seconds in: seen only if it plays.
  await frame.getByText(expect.replay_later_text).waitFor();
  check(!/ 00:00 \//.test(await playback.innerText()), 'the playback clock advanced');
  await shot('14-replay');

  step = 'webhooks';
  await nav('Webhooks');
  await page.getByLabel('URL', { exact: true }).fill(expect.hook_url);
  await page.getByLabel('Events (comma-separated)').fill('purchase, system.alert_triggered');
  await page.getByRole('button', { name: 'Create webhook' }).click();
  const hookSecret = page.getByRole('dialog', { name: `Signing secret of ${expect.hook_url}` });
  check((await hookSecret.getByRole('textbox').inputValue()).startsWith('whsec_'), 'the signing secret is shown once');
  await hookSecret.getByRole('button', { name: 'Done' }).click();
  await page.getByRole('button', { name: `Send a test to ${expect.hook_url}` }).click();
  await page.getByRole('status').filter({ hasText: 'Test delivery succeeded' }).waitFor();

  step = 'alerts';
  await nav('Alerts');
  await page.getByLabel('Name', { exact: true }).fill('Database errors');
  await page.getByRole('combobox', { name: 'Metric' }).selectOption('error_count');
  await page.getByLabel('Service', { exact: true }).fill('postgres');
  await page.getByLabel('Threshold').fill('0');
  await page.getByLabel('Window (minutes)').fill('60');
  await page.getByRole('combobox', { name: 'Notify webhook' }).selectOption({ label: expect.hook_url });
  await page.getByRole('button', { name: 'Create rule' }).click();
  const rules = page.getByRole('table', { name: 'Alert rules' });
  const rule = rules.getByRole('row').filter({ hasText: 'Database errors' });
  await rule.waitFor();
  // Evaluated every second here (--alert-interval 1): refresh until it fires.
  await until(async () => {
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForTimeout(300);
    return (await rule.getByRole('cell').first().innerText()) === 'firing';
  }, 'the rule fires on the failing database span');
  await rule.getByRole('button', { name: 'Database errors', exact: true }).click();
  await page.getByRole('table', { name: 'State changes' }).getByRole('cell', { name: 'firing' }).waitFor();
  await shot('15-alerts');

  step = 'webhook deliveries';
  await nav('Webhooks');
  await page.getByRole('button', { name: expect.hook_url, exact: true }).click();
  const deliveries = page.getByRole('table', { name: 'Delivery history' });
  await until(async () => {
    await page.getByRole('button', { name: 'Refresh deliveries' }).click();
    await page.waitForTimeout(300);
    return (await deliveries.getByRole('row').filter({ hasText: 'system.alert_triggered' }).filter({ hasText: 'succeeded' }).count()) > 0;
  }, 'the alert was delivered to the webhook');
  await shot('16-webhooks');

  step = 'API keys';
  await nav('API keys');
  await page.getByLabel('Key name', { exact: true }).fill('browser-test');
  await page.getByRole('button', { name: 'Create key' }).click();
  const secret = page.getByRole('dialog', { name: 'API key browser-test' });
  check((await secret.getByRole('textbox').inputValue()).startsWith('sxk_'), 'the new key is shown once');
  await shot('17-api-keys');
  await secret.getByRole('button', { name: 'Done' }).click();
  await page.getByRole('table', { name: 'API keys' }).getByRole('cell', { name: 'browser-test', exact: true }).waitFor();

  step = 'usage';
  await nav('Usage');
  await page.getByRole('progressbar', { name: 'Observability data' }).or(page.getByText('unlimited').first()).first().waitFor();
  await page.getByRole('table', { name: 'Usage by project' }).waitFor();
  await shot('18-usage');

  step = 'members';
  await nav('Members');
  await page.getByLabel('Email', { exact: true }).fill('bob@example.com');
  await page.getByRole('button', { name: 'Invite' }).click();
  const link = page.getByRole('dialog', { name: 'Invitation link for bob@example.com' });
  const inviteLink = await link.getByRole('textbox').inputValue();
  check(inviteLink.includes('/login?invite=sxi_'), 'the invitation link is shown once');
  await link.getByRole('button', { name: 'Done' }).click();
  await page.getByRole('table', { name: 'Members' }).getByRole('row').filter({ hasText: 'bob@example.com' }).filter({ hasText: 'invited' }).waitFor();

  step = 'projects';
  await nav('Projects');
  await page.getByLabel('New project name').fill('shop');
  await page.getByRole('button', { name: 'Create project' }).click();
  const token = page.getByRole('dialog', { name: 'Ingest token of shop' });
  check((await token.getByRole('textbox').inputValue()).startsWith('sxp_'), 'the ingest token is shown once');
  await token.getByRole('button', { name: 'Done' }).click();
  await page.getByRole('table', { name: 'Projects' }).getByRole('cell', { name: 'shop', exact: true }).waitFor();
  // Another project sees none of the default project's data.
  await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Traces', exact: true }).click();
  await page.reload();
  await page.getByRole('combobox', { name: 'Project' }).selectOption({ label: 'shop' });
  await page.getByText('No traces start in this range.').waitFor();
  check(new URL(page.url()).searchParams.get('project') !== null, 'the project is in the URL');
  await page.getByRole('combobox', { name: 'Project' }).selectOption({ label: 'default' });
  await page.getByRole('table', { name: 'Traces' }).waitFor();

  step = 'billing';
  await nav('Billing');
  await page.getByRole('combobox', { name: 'Plan' }).selectOption('growth');
  await page.getByRole('button', { name: 'Subscribe' }).click();
  // The sandbox provider's payment page, then back to the dashboard.
  await page.getByRole('button', { name: 'Pay' }).click();
  await page.getByRole('link', { name: 'Continue' }).click();
  await heading('Billing');
  await page.getByRole('status').filter({ hasText: 'Payment done' }).waitFor();
  const sub = page.getByRole('definition').filter({ hasText: /^growth/ });
  await until(async () => {
    if ((await sub.count()) > 0 && /active/.test(await sub.first().innerText())) return true;
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForTimeout(300);
    return false;
  }, 'the growth plan is active once paid');
  await page.getByRole('table', { name: 'Payments' }).getByRole('row').filter({ hasText: 'growth' }).filter({ hasText: 'paid' }).waitFor();
  await contrastOk('billing (dark)');
  await shot('19-billing');

  step = 'light theme and shared URLs';
  await page.getByRole('button', { name: 'Use light theme' }).click();
  await page.goto(URL_ + `/logs?q=${encodeURIComponent(expect.log_word)}&range=24h`);
  await page.getByRole('table', { name: 'Log lines' }).locator('mark').first().waitFor();
  check((await page.getByRole('combobox', { name: 'Time range' }).inputValue()) === '24h', 'the range comes from the URL');
  await contrastOk('logs (light)');
  await shot('20-logs-light');

  step = 'keyboard shortcuts';
  await page.getByRole('heading', { level: 1 }).click();
  await page.keyboard.press('g');
  await page.keyboard.press('t');
  await heading('Traces');
  await page.keyboard.press('/');
  check(await page.getByLabel('Service', { exact: true }).evaluate((el) => el === document.activeElement), '/ focuses the search field');

  step = 'sign out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.goto(URL_ + '/traces');
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();

  step = 'accept an invitation';
  await page.goto(inviteLink);
  await page.getByRole('heading', { name: 'Join your team' }).waitFor();
  await page.getByLabel('Password', { exact: true }).fill('bobs secret pass');
  await page.getByLabel('Your name').fill('Bob');
  await page.getByRole('button', { name: 'Join your team' }).click();
  await heading('Traces');
  await page.getByText('member', { exact: true }).waitFor();
  await nav('Members');
  await page.getByText('Only owners and admins see and invite members.').waitFor();
  await page.getByRole('button', { name: 'Sign out' }).click();

  step = 'sign up';
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.getByRole('button', { name: 'Create an account' }).click();
  await page.getByLabel('Email', { exact: true }).fill('ada@example.com');
  await page.getByLabel('Password', { exact: true }).fill('correct horse battery');
  await page.getByLabel('Your name').fill('Ada');
  await page.getByLabel('Organization name').fill('Acme');
  await page.getByRole('button', { name: 'Create an account' }).click();
  await heading('Traces');
  await page.getByText('No traces start in this range.').waitFor();
  await page.getByText('owner', { exact: true }).waitFor();
  // A new organization is on the pro trial, which has no retention analytics.
  await nav('Retention');
  await page.getByLabel('Start event', { exact: true }).fill('signup');
  await page.getByLabel('Return event', { exact: true }).fill('login');
  await page.getByRole('button', { name: 'Calculate' }).click();
  await page.getByRole('alert').filter({ hasText: 'Not on this plan' }).waitFor();
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();

  check(problems.length === 0, `no script errors or failed requests: ${problems.join('; ')}`);
  console.log(`dashboard: all pages passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(`dashboard: FAILED at "${step}": ${e.message}`);
  if (problems.length) console.error(problems.join('\n'));
  process.exitCode = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
