// The dashboard in a real browser: headless Debian chromium driven by
// playwright-core, against the llmux that tests/test_dashboard.c started
// on a seeded ledger.  A user's way through: open the page, type the admin
// key into the field and click "Use key", read the totals, the provider
// and model tables, provider health and the what-if panel, switch the
// split, watch a new request arrive by the page's own refresh, try a
// wrong key, forget the key.  Every number must equal the seeded one
// (LLMUX_EXPECT, JSON from the C test); no console error or page error
// while the key is good; every load goes to llmux's origin and no URL
// holds the key.  A full-page screenshot goes to LLMUX_SCREENSHOT.
//
// Env: LLMUX_BASE (http://127.0.0.1:PORT), LLMUX_ADMIN_KEY, LLMUX_EXPECT,
// LLMUX_SCREENSHOT, CHROMIUM (default /usr/bin/chromium).
// Exit 0 when every check passed; the failures are printed otherwise.
import { chromium } from 'playwright-core';

const base = process.env.LLMUX_BASE;
const admin = process.env.LLMUX_ADMIN_KEY;
const want = JSON.parse(process.env.LLMUX_EXPECT || '{}');
const shot = process.env.LLMUX_SCREENSHOT;
const fails = [];
let checks = 0;

function check(cond, what) {
  checks++;
  if (!cond) fails.push(what);
}
function eq(got, exp, what) {
  checks++;
  if (JSON.stringify(got) !== JSON.stringify(exp))
    fails.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(exp)}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
         '--disable-background-networking', '--disable-component-update',
         '--disable-sync'],
  timeout: 60000,
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(30000);
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push('page error: ' + e.message));
  const urls = [];
  page.on('request', (r) => urls.push(r.url()));
  const refused = []; // responses >= 400 while the key is good
  page.on('response', (r) => { if (r.status() >= 400) refused.push(r.status() + ' ' + r.url()); });

  const status = page.locator('#status');
  const updated = () => page.waitForFunction(() =>
    document.getElementById('status').textContent.startsWith('Updated'));

  await page.goto(base + '/dashboard');
  await updated();
  eq(await page.locator('header').evaluate((h) => getComputedStyle(h).display),
     'flex', 'the CSP let the style block apply');
  eq(await page.locator('#health').innerText(), 'Provider health needs the admin key.',
     'health without a key');

  // The admin key, typed and submitted as a user does.
  await page.locator('#key').click();
  await page.locator('#key').pressSequentially(admin);
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.locator('#health table').waitFor();
  await updated();

  // Totals.
  const tile = async (label) => page.locator('.tile')
    .filter({ has: page.locator('.label', { hasText: new RegExp('^' + label + '$') }) })
    .locator('.value').innerText();
  for (const [label, v] of Object.entries(want.tiles))
    eq(await tile(label), v, `tile ${label}`);

  // The per-provider table: every seeded provider with its numbers.
  const rows = async (sel) => page.locator(sel + ' tbody tr').evaluateAll((trs) =>
    trs.map((tr) => Array.from(tr.cells).map((td) => td.textContent)));
  const byProvider = await rows('#t-provider');
  eq(byProvider.length, Object.keys(want.providers).length, 'provider rows');
  for (const [name, cells] of Object.entries(want.providers)) {
    const r = byProvider.find((c) => c[0] === name);
    check(r, `provider ${name} listed`);
    if (r) eq(r.slice(1, 7), cells, `provider ${name} (requests, errors, rate, tokens, spend)`);
  }
  // The per-model table, and a model name made of markup shown as text.
  const byModel = await rows('#t-model');
  for (const [name, cells] of Object.entries(want.models)) {
    const r = byModel.find((c) => c[0] === name);
    check(r, `model ${name} listed`);
    if (r) eq(r.slice(1, 3), cells, `model ${name} (requests, errors)`);
  }
  eq(await page.locator('#t-model i').count(), 0, 'no element made from a model name');

  // The charts: spend bars with their tooltips, latency points.
  const spendTitles = await page.locator('#c-spend rect title').allTextContents();
  check(spendTitles.some((t) => t.startsWith('fake \u00b7 ')), 'spend bars of fake');
  check(await page.locator('#c-latency circle').count() > 0, 'latency points');
  eq(await page.locator('#l-spend').innerText().then((t) => t.includes('bad')), true,
     'spend legend names every provider');

  // Provider health: every target, with a state.
  const health = await page.locator('#health').innerText();
  for (const t of want.targets) check(health.includes(t), `health lists ${t}`);

  // What if: the actual spend and the re-priced totals, exact.
  const wiNote = await page.locator('#whatif .note').innerText();
  check(wiNote.includes(want.whatif.note), `what-if note: ${wiNote}`);
  const wiRows = await rows('#whatif');
  for (const [model, cost] of Object.entries(want.whatif.costs)) {
    const r = wiRows.find((c) => c[0] === model);
    check(r, `what-if row ${model}`);
    if (r) eq([r[3], r[4]], cost, `what-if ${model} (cost, vs actual)`);
  }
  const costs = wiRows.map((c) => Number(c[3].replace('$', '')));
  check(costs.every((c, i) => i === 0 || c >= costs[i - 1]), 'what-if cheapest first');

  // The key: in this tab's sessionStorage only, never in a URL.
  eq(await page.evaluate(() => sessionStorage.getItem('llmux.dashboard.key')), admin,
     'key in sessionStorage');
  eq(await page.evaluate(() => [document.getElementById('key').value,
                                localStorage.length, document.cookie]),
     ['', 0, ''], 'key not in the field, localStorage or a cookie');
  const origin = new URL(base).origin;
  const foreign = urls.filter((u) => new URL(u).origin !== origin || u.includes(admin));
  eq(foreign, [], 'every load to llmux, no key in a URL');
  check(urls.some((u) => u.includes('/v1/usage?') && u.includes('what_if=1')),
        'the what-if query was made');

  await page.screenshot({ path: shot, fullPage: true });

  // Split by model: the spend legend names the models.
  await page.locator('#split').selectOption('model');
  await page.waitForFunction(() =>
    document.getElementById('h-spend').textContent === 'by model' &&
    document.getElementById('l-spend').textContent.includes('cheap'));

  // It refreshes by itself: one more request shows up without a click.
  const before = Number((await tile('Requests')).replace(/,/g, ''));
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'cheap', messages: [{ role: 'user', content: 'one more' }] }),
  });
  eq(r.status, 200, 'the extra request');
  await page.waitForFunction((n) => Array.from(document.querySelectorAll('.tile'))
    .some((t) => t.firstChild.textContent === 'Requests' &&
                 t.children[1].textContent === String(n)), before + 1, { timeout: 35000 });

  eq(consoleErrors, [], 'console errors');
  eq(refused, [], 'responses refused');

  // A wrong key is reported instead of showing stale numbers (its 401s
  // are expected in the console from here on).
  await page.locator('#key').pressSequentially('sk-llmux-not-a-real-key');
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.waitForFunction(() => {
    const s = document.getElementById('status');
    return s.className === 'err' && s.textContent.startsWith('Key refused');
  });
  check((await status.innerText()).startsWith('Key refused'), 'wrong key reported');

  // Forget: the key is gone and health asks for it again.
  await page.getByRole('button', { name: 'Forget' }).click();
  await page.waitForFunction(() =>
    sessionStorage.getItem('llmux.dashboard.key') === null &&
    document.getElementById('health').textContent.includes('needs the admin key'));
} catch (e) {
  fails.push('exception: ' + (e && e.stack ? e.stack : e));
} finally {
  await browser.close();
}
for (const f of fails) console.log('FAIL ' + f);
console.log(`dashboard.mjs: ${checks - fails.length} of ${checks} checks passed`);
process.exit(fails.length ? 1 : 0);
