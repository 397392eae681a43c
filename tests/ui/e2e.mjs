// End-to-end test of the admin UI in Debian's headless chromium, against a real `kindred serve`
// that tests/it/ui.rs started and filled with real QQP questions. Every step asserts; the first
// failure exits non-zero with its message. Screenshots go to $SCREENSHOT_DIR.
//
// Env: KINDRED_URL, KINDRED_ADMIN_KEY, KINDRED_COLLECTION, SCREENSHOT_DIR, UPLOAD_FILE (a TSV),
// UPLOAD_ROWS (its data rows), QUERY (a stored question's paraphrase), COMPOUND (a question that
// asks two stored ones, COMPOUND_COVERS their ids as JSON), LONG_A/LONG_B (~40 words),
// DEFAULTS_REASON (the reason of the collection's search defaults, set before the browser starts).

import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { readFile } from 'node:fs/promises';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`missing env ${k}`);
  return v;
};
const base = env('KINDRED_URL');
const key = env('KINDRED_ADMIN_KEY');
const shots = env('SCREENSHOT_DIR');
const collection = env('KINDRED_COLLECTION');

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
const dialogs = [];
// Only the delete-collection step expects a dialog (its confirm); any other is recorded.
let acceptConfirm = false;
page.on('dialog', async (d) => {
  if (acceptConfirm && d.type() === 'confirm') {
    await d.accept();
    return;
  }
  dialogs.push(`${d.type()}: ${d.message()}`);
  await d.dismiss();
});
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));

/** A GET to the API with the admin key, from the test (not the page). */
const apiGet = (path) => fetch(`${base}${path}`, { headers: { Authorization: `Bearer ${key}` } });
/** A POST to the API with the admin key, from the test; the answer's JSON. */
const apiPost = async (path, body) => (await fetch(`${base}${path}`, {
  method: 'POST', body: JSON.stringify(body),
  headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
})).json();

const RELATION = /^(EQUI|OPPO|SPE1|SPE2|SIMI|REL)$/;

/** The tooltip's text, once it shows. */
async function tipText() {
  await page.waitForSelector('#tooltip:not([hidden])');
  return page.textContent('#tooltip');
}

/** The phrase view as drawn: its boxes, links and the page's horizontal overflow. */
const phraseView = () => page.evaluate(() => {
  const box = (c) => ({ text: c.textContent, unaligned: c.classList.contains('unaligned'), rect: c.getBoundingClientRect().toJSON() });
  const links = [...document.querySelectorAll('#explanation .phrases path.chunk-link')];
  return {
    a: [...document.querySelectorAll('#explanation .chunk-row.side-a .chunk')].map(box),
    b: [...document.querySelectorAll('#explanation .chunk-row.side-b .chunk')].map(box),
    links: links.map((p) => ({ a: Number(p.dataset.a), b: Number(p.dataset.b), relation: p.dataset.relation,
      classes: p.getAttribute('class'), width: Number(p.getAttribute('stroke-width')), drawn: (p.getAttribute('d') || '').startsWith('M') })),
    listed: document.querySelectorAll('#explanation .phrase-list li').length,
    pageOverflow: document.documentElement.scrollWidth - window.innerWidth,
  };
});

/**
 * Checks the drawn phrase view against an explanation from the API: one box per chunk with its
 * text, a box dashed exactly when no link touches it, links coloured by relation. `sameLinks`:
 * the explanation is the one drawn (else only its chunks, which depend on the text alone, match).
 */
function samePhrases(view, e, where, sameLinks) {
  for (const side of ['a', 'b']) {
    assert.deepEqual(view[side].map((x) => x.text), e[side].chunks.map((c) => c.text), `${where}: one box per chunk of ${side}`);
    view[side].forEach((box, i) => {
      const linked = view.links.some((l) => l[side] === i);
      assert.equal(box.unaligned, !linked, `${where}: box ${side}${i} is marked unaligned iff no link touches it`);
      if (sameLinks) assert.equal(box.unaligned, !e[side].chunks[i].aligned, `${where}: box ${side}${i} as the API says`);
    });
    // Boxes in a row never overlap (many chunks scroll sideways instead).
    view[side].slice(1).forEach((box, i) => assert.ok(box.rect.left >= view[side][i].rect.right - 0.5, `${where}: boxes ${side}${i}, ${side}${i + 1} overlap`));
  }
  assert.ok(view.links.length >= 1, `${where}: at least one phrase link`);
  if (sameLinks) {
    assert.deepEqual(view.links.map((l) => [l.a, l.b, l.relation]), e.chunk_alignments.map((l) => [l.a, l.b, l.relation]),
      `${where}: one curve per chunk alignment`);
  }
  for (const l of view.links) {
    assert.match(l.relation, RELATION);
    assert.ok(l.classes.split(' ').includes(`rel-${l.relation}`), `${where}: link coloured by its relation (${l.classes})`);
    assert.ok(l.drawn, `${where}: link ${l.a}-${l.b} drawn`);
  }
  const unalignedSides = ['a', 'b'].filter((side) => view[side].some((x) => x.unaligned)).length;
  assert.equal(view.listed, view.links.length + unalignedSides, `${where}: the text list names every link and the unaligned chunks`);
  assert.ok(view.pageOverflow <= 0, `${where}: the page scrolls sideways by ${view.pageOverflow}px`);
}

let step = '';
async function check(name, fn) {
  step = name;
  const t = Date.now();
  await fn();
  console.log(`ok  ${name} (${Date.now() - t} ms)`);
}

/** What an attack could have left behind. */
async function noInjection(where) {
  const found = await page.evaluate(() => ({
    xss: window.__xss ?? null,
    scripts: [...document.querySelectorAll('script')].map((s) => s.getAttribute('src')),
    imgs: document.querySelectorAll('main img, #tooltip img').length,
    jsLinks: document.querySelectorAll('a[href^="javascript" i]').length,
    handlers: [...document.querySelectorAll('main *')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
  }));
  assert.equal(found.xss, null, `${where}: injected code ran (window.__xss = ${found.xss})`);
  assert.deepEqual(found.scripts, ['app.js'], `${where}: an injected <script> element exists`);
  assert.equal(found.imgs, 0, `${where}: an injected <img> exists`);
  assert.equal(found.jsLinks, 0, `${where}: a javascript: link exists`);
  assert.equal(found.handlers, 0, `${where}: an element carries an inline event handler`);
  assert.deepEqual(dialogs, [], `${where}: a dialog opened`);
  assert.ok(page.url().startsWith(`${base}/ui/`), `${where}: navigated away to ${page.url()}`);
}

try {
  await check('a wrong key shows a clear message and asks again', async () => {
    await page.goto(`${base}/ui/`);
    await page.waitForSelector('#key-dialog[open]');
    await page.fill('#key-input', 'not-the-right-key-at-all');
    await page.click('#key-save');
    await page.waitForSelector('#key-dialog[open] #key-error:not([hidden])');
    const msg = await page.textContent('#message');
    assert.match(msg, /refused the API key \(401/, `message was ${msg}`);
  });

  await check('the right key is kept in sessionStorage and lists collections', async () => {
    await page.fill('#key-input', key);
    await page.click('#key-save');
    // The table may already list the collection (collections are readable without the key),
    // so wait for the key check's answer itself, not for the table.
    await page.waitForFunction(() => document.querySelector('#message').textContent === 'Key accepted.', null, { timeout: 10000 })
      .catch(async () => assert.fail(`message was ${JSON.stringify(await page.textContent('#message'))}, not "Key accepted."`));
    await page.waitForSelector(`#collections-table tr[data-name="${collection}"]`);
    const stored = await page.evaluate(() => sessionStorage.getItem('kindred.adminKey'));
    assert.equal(stored, key);
    const row = page.locator(`#collections-table tr[data-name="${collection}"]`);
    assert.ok(Number(await row.locator('.docs').textContent()) > 100);
    assert.equal(await row.locator('.health').textContent(), 'ok');
    // A reload keeps the key: no dialog this time.
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    assert.equal(await page.locator('#key-dialog[open]').count(), 0);
    await page.screenshot({ path: `${shots}/collections.png` });
  });

  await check('create and delete a collection', async () => {
    await page.fill('#create-name', 'scratch');
    await page.click('#create-form button[type=submit]');
    const row = page.locator('#collections-table tr[data-name="scratch"]');
    await row.waitFor();
    assert.equal(await row.locator('.docs').textContent(), '0');
    assert.equal(await row.locator('.health').textContent(), 'ok');
    const r = await apiGet('/v1/collections/scratch');
    assert.equal(r.status, 200);
    // A bad name is refused with the server's message.
    await page.fill('#create-name', 'no spaces allowed');
    await page.click('#create-form button[type=submit]');
    await page.waitForFunction(() => /invalid_request|422/.test(document.getElementById('message').textContent));
    acceptConfirm = true;
    await row.locator('button.drop').click();
    await row.waitFor({ state: 'detached' });
    acceptConfirm = false;
    assert.equal((await apiGet('/v1/collections/scratch')).status, 404);
    await page.selectOption('#collection', collection);
  });

  await check('search shows hits with every stage and the probability badge', async () => {
    await page.click('a[data-view="search"]');
    await page.fill('#q', env('QUERY'));
    await page.click('#search-form button[type=submit]');
    await page.waitForSelector('#hits li.hit');
    const hits = page.locator('#hits li.hit');
    assert.equal(await hits.count(), 10);
    const first = hits.first();
    const head = await first.locator('table.stages thead').textContent();
    for (const s of ['cosine', 'W2', 'lexical', 'fused', 'RCMD', 'final']) assert.ok(head.includes(s), `stage ${s} missing`);
    assert.match(await first.locator('.badge.prob').textContent(), /P\(dup\) \d+\.\d%/);
    assert.equal(await page.locator('#search-covers').count(), 0, 'no compound unless asked');
    await page.screenshot({ path: `${shots}/search.png`, fullPage: false });
  });

  await check('search: asked to, a compound question shows the two entries it covers', async () => {
    await page.fill('#q', env('COMPOUND'));
    await page.check('#ask-compound');
    await page.click('#search-form button[type=submit]');
    await page.waitForSelector('#search-covers .covers li');
    const ids = await page.locator('#search-covers .covers li').evaluateAll((lis) => lis.map((li) => li.dataset.id));
    assert.deepEqual(ids.sort(), JSON.parse(env('COMPOUND_COVERS')).sort());
    await page.screenshot({ path: `${shots}/search-compound.png`, fullPage: false });
    // Unticked, the same search says nothing of compounds.
    await page.uncheck('#ask-compound');
    await page.click('#search-form button[type=submit]');
    await page.waitForFunction(() => !document.querySelector('#search-covers'));
    await page.fill('#q', env('QUERY'));
  });

  await check('the collection\'s search defaults show with their reason, on the collections and search pages', async () => {
    const reason = env('DEFAULTS_REASON');
    const cell = page.locator(`#collections-table tr[data-name="${collection}"] td.defaults`);
    await page.click('a[data-view="collections"]');
    assert.equal(await cell.locator('.reason').textContent(), reason);
    assert.match(await cell.locator('.source').textContent(), /^set \d{4}-\d\d-\d\dT/);
    assert.equal(await cell.locator('.settings').textContent(), 'hybrid · rcmd · uniform');
    assert.equal(await cell.locator('.stale').count(), 0);
    await page.click('a[data-view="search"]');
    await page.waitForSelector('#search-defaults .reason');
    assert.equal(await page.textContent('#search-defaults .reason'), `Why: ${reason}`);
    assert.match(await page.textContent('#search-defaults .settings'), /\(set .*\): mode hybrid · rerank rcmd · weights uniform/);
    assert.equal(await page.textContent('#search-defaults'), `${await page.textContent('#search-defaults .settings')}Why: ${reason}`,
      'the panel holds the settings and the reason, nothing else (no stale line)');
    // The search above left mode and rerank at the collection's default: the answer says so.
    const inForce = await page.textContent('#search-settings');
    assert.match(inForce, /mode hybrid \(collection\) · rerank rcmd \(collection\) · weights uniform \(collection\)/, inForce);
    // A mode picked in the form is the request's.
    await page.selectOption('#mode', 'cosine');
    await page.click('#search-form button[type=submit]');
    await page.waitForFunction(() => document.getElementById('search-settings').textContent.includes('mode cosine (request)'));
    await page.selectOption('#mode', '');
    await page.click('#search-form button[type=submit]');
    await page.waitForFunction(() => document.getElementById('search-settings').textContent.includes('mode hybrid (collection)'));
  });

  await check('an explanation from a hit: heatmap cells add up to the score; hover shows words', async () => {
    await page.locator('#hits li.hit').first().locator('button.explain').click();
    await page.waitForSelector('#view-explain:not([hidden]) svg.heatmap');
    // The word links are drawn by a ResizeObserver once the alignment box has its layout,
    // after the heatmap: wait for them (on a busy machine the first count could be 0).
    await page.waitForSelector('#explanation .alignment line.link', { state: 'attached' });
    const m = await page.evaluate(() => {
      const svg = document.querySelector('#explanation svg.heatmap');
      const cells = [...svg.querySelectorAll('rect.cell')];
      const total = document.getElementById('explain-total');
      return {
        rows: Number(svg.dataset.rows), cols: Number(svg.dataset.cols), cells: cells.length,
        sum: cells.reduce((s, c) => s + Number(c.dataset.contribution), 0),
        score: Number(total.dataset.score), shown: Number(document.getElementById('explain-score').textContent),
        links: document.querySelectorAll('#explanation .alignment line.link').length,
      };
    });
    assert.equal(m.cells, m.rows * m.cols);
    assert.ok(m.rows > 2 && m.cols > 2);
    assert.ok(Math.abs(m.sum - m.score) < 1e-4, `cells sum ${m.sum} vs score ${m.score}`);
    assert.ok(Math.abs(m.shown - m.score) < 1e-4);
    assert.ok(m.links > 0, 'alignment lines drawn');
    const cell = page.locator('#explanation rect.cell.aligned').first();
    await cell.hover();
    const tip = await page.textContent('#tooltip');
    const [i, j] = [await cell.getAttribute('data-i'), await cell.getAttribute('data-j')];
    const words = await page.evaluate(([i, j]) => [
      document.querySelectorAll('#explanation .side-a .word')[i].textContent,
      document.querySelectorAll('#explanation .side-b .word')[j].textContent], [Number(i), Number(j)]);
    assert.ok(tip.includes(`${words[0]}  ↔  ${words[1]}`), `tooltip ${tip}`);
    assert.match(tip, /cosine -?\d\.\d{3}/);
    assert.match(tip, /contribution -?\d\.\d{4}/);
    await page.screenshot({ path: `${shots}/explain.png`, fullPage: true });
  });

  await check('the phrase alignment: a box per chunk, links by relation, hover shows the score', async () => {
    // Chunks depend on the text alone, so /v1/explain on the same texts has the same ones.
    const [a, b] = await page.locator('#explanation .pair .qtext').allTextContents();
    const e = (await apiPost('/v1/explain', { a, b })).explanation;
    const view = await phraseView();
    samePhrases(view, e, 'hit', false);
    // Hovering an aligned box of a shows each of its links with a 0–5 score and highlights them.
    const box = page.locator('#explanation .chunk-row.side-a .chunk:not(.unaligned)').first();
    await box.hover();
    const tip = await tipText();
    assert.match(tip, /↔ .+: (EQUI|OPPO|SPE1|SPE2|SIMI|REL) \d\.\d\/5 · probability \d\.\d{2} · contribution -?\d\.\d{4}/, `tooltip ${tip}`);
    assert.ok(await page.locator('#explanation .phrase-track.focus path.chunk-link.hot').count() >= 1, 'its links are highlighted');
    // Hovering the strongest link (at its midpoint, with the real mouse: a vertical curve has
    // no width for locator.hover) shows its relation, score, probability and contribution.
    const strongest = view.links.reduce((k, l, i, all) => (l.width > all[k].width ? i : k), 0);
    await page.evaluate(() => window.scrollTo(0, 0));
    const hoverLink = async () => {
      const at = await page.locator('#explanation path.chunk-link').nth(strongest).evaluate((p) => {
        const m = p.getPointAtLength(p.getTotalLength() / 2);
        const r = p.ownerSVGElement.getBoundingClientRect();
        return { x: r.left + m.x, y: r.top + m.y };
      });
      await page.mouse.move(at.x, at.y);
    };
    await hoverLink();
    const linkTip = await tipText();
    assert.match(linkTip, / ↔ .*(EQUI|OPPO|SPE1|SPE2|SIMI|REL) \(.+\) · score \d\.\d\/5/, `link tooltip ${linkTip}`);
    assert.match(linkTip, /probability \d\.\d{2}/);
    assert.match(linkTip, /contribution -?\d\.\d{4}/);
    assert.equal(await page.locator('#explanation path.chunk-link.hot').count(), 1, 'the hovered link is highlighted');
    const unaligned = page.locator('#explanation .chunk-row .chunk.unaligned');
    if (await unaligned.count()) {
      await unaligned.first().hover();
      assert.match(await tipText(), /unaligned: no chunk of [ab] matches it/);
    }
    await hoverLink();
    await page.screenshot({ path: `${shots}/phrases.png` });
    await page.mouse.move(0, 0);
  });

  await check('an older server without chunks: the phrase view is left out', async () => {
    await page.route('**/v1/explain', async (route) => {
      const r = await route.fetch();
      const out = await r.json();
      delete out.explanation.chunk_alignments;
      delete out.explanation.chunk_contributions;
      delete out.explanation.a.chunks;
      delete out.explanation.b.chunks;
      await route.fulfill({ response: r, json: out });
    });
    await page.fill('#explain-a', 'How do I learn to cook rice?');
    await page.fill('#explain-b', 'What is the best way to cook rice?');
    await page.click('#explain-form button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#explanation .qtext')?.textContent === 'How do I learn to cook rice?');
    await page.waitForSelector('#explanation svg.heatmap');
    assert.equal(await page.locator('#explanation .phrases').count(), 0, 'no phrase view without chunks');
    assert.ok(await page.locator('#explanation .alignment line.link').count() > 0, 'the word alignment still shows');
    await page.unroute('**/v1/explain');
  });

  await check('two typed 40-word texts: a 40×40 heatmap stays readable', async () => {
    await page.fill('#explain-a', env('LONG_A'));
    await page.fill('#explain-b', env('LONG_B'));
    await page.click('#explain-form button[type=submit]');
    await page.waitForFunction(() => Number(document.querySelector('#explanation svg.heatmap')?.dataset.rows) >= 38);
    const m = await page.evaluate(() => {
      const svg = document.querySelector('#explanation svg.heatmap');
      const cells = [...svg.querySelectorAll('rect.cell')];
      const labels = [...svg.querySelectorAll('text.row-label')].map((t) => t.getBoundingClientRect());
      return {
        rows: Number(svg.dataset.rows), cols: Number(svg.dataset.cols), cells: cells.length,
        size: Number(cells[0].getAttribute('width')),
        sum: cells.reduce((s, c) => s + Number(c.dataset.contribution), 0),
        score: Number(document.getElementById('explain-total').dataset.score),
        overlap: labels.slice(1).some((r, k) => r.top < labels[k].bottom - 1),
        fontSize: Number(svg.querySelector('text.row-label').getAttribute('font-size')),
      };
    });
    assert.ok(m.rows >= 38 && m.cols >= 38, `${m.rows}×${m.cols}`);
    assert.equal(m.cells, m.rows * m.cols);
    assert.ok(m.size >= 14, `cells ${m.size}px`);
    assert.ok(m.fontSize >= 10);
    assert.ok(!m.overlap, 'row labels overlap');
    assert.ok(Math.abs(m.sum - m.score) < 1e-4);
    // The page asked /v1/explain for these very texts: the same chunks and links.
    const e = (await apiPost('/v1/explain', { a: env('LONG_A'), b: env('LONG_B') })).explanation;
    samePhrases(await phraseView(), e, '40 words', true);
    await page.screenshot({ path: `${shots}/explain-40x40.png`, fullPage: true });
  });

  await check('review: mark a queued pair as duplicate; the verdict is in the API', async () => {
    await page.click('a[data-view="review"]');
    await page.click('#review-form button[type=submit]');
    await page.waitForSelector('#review-list li');
    const count = await page.locator('#review-list li').count();
    assert.ok(count >= 1);
    // The queue's pairs that ask something beyond their match say so in the list.
    const queued = await (await apiGet(`/v1/collections/${collection}/review?explain=true&scan=100`)).json();
    const beyond = queued.items.filter((i) => i.beyond);
    assert.equal(await page.locator('#review-list li .also-asks').count(), beyond.length);
    if (beyond.length) {
      const li = page.locator(`#review-list li[data-key="${beyond[0].key}"]`);
      assert.ok((await li.locator('.also-asks').textContent()).includes(beyond[0].beyond.phrases[0]));
    }
    // A stored compound question is queued with the two entries it covers, named in the list.
    const compounds = queued.items.filter((i) => i.compound);
    assert.equal(await page.locator('#review-list li .covers-two').count(), compounds.length);
    const stored = compounds.find((i) => i.document.id === env('REVIEW_COMPOUND'));
    assert.ok(stored, `${env('REVIEW_COMPOUND')} is queued as a compound`);
    assert.deepEqual(stored.compound.covers.map((c) => c.id).sort(), JSON.parse(env('REVIEW_COMPOUND_COVERS')).sort());
    const covers = await page.locator(`#review-list li[data-key="${stored.key}"] .covers-two`).textContent();
    for (const c of stored.compound.covers) assert.ok(covers.includes(c.text), covers);
    await page.waitForSelector('#review-detail svg.heatmap');
    const pairKey = await page.locator('#review-list li.selected').getAttribute('data-key');
    await page.screenshot({ path: `${shots}/review.png` });
    await page.click('#mark-duplicate');
    await page.waitForSelector(`#verdicts-table tr[data-key="${pairKey}"]`);
    assert.equal(await page.locator('#review-list li').count(), count - 1);
    const verdicts = await (await apiGet(`/v1/collections/${collection}/verdicts`)).json();
    const v = verdicts.find((x) => x.key === pairKey);
    assert.ok(v, 'verdict stored');
    assert.equal(v.duplicate, true);
    const tsv = await (await apiGet(`/v1/collections/${collection}/verdicts?format=tsv`)).text();
    assert.ok(tsv.split('\n').some((l) => l.startsWith('1\t') && l.endsWith(`\t${pairKey}`)), 'TSV export holds the verdict');
  });

  await check('review: a submitted question can be judged "not duplicate"', async () => {
    await page.fill('#submit-text', env('QUERY'));
    await page.click('#submit-form button[type=submit]');
    await page.waitForSelector('#review-list li[data-key^="submitted-"].selected');
    await page.waitForSelector('#review-detail svg.heatmap');
    const before = await page.locator('#verdicts-table tbody tr').count();
    await page.click('#mark-different');
    await page.waitForFunction((n) => document.querySelectorAll('#verdicts-table tbody tr').length === n + 1, before);
    const row = page.locator('#verdicts-table tbody tr[data-duplicate="false"]', { hasText: env('QUERY') });
    assert.equal(await row.count(), 1, 'the "not duplicate" verdict is listed');
  });

  await check('review: a compound question shows the two entries it covers', async () => {
    await page.fill('#submit-text', env('COMPOUND'));
    await page.click('#submit-form button[type=submit]');
    await page.waitForSelector('#review-detail #compound');
    const ids = await page.locator('#compound .covers li').evaluateAll((lis) => lis.map((li) => li.dataset.id));
    assert.deepEqual(ids.sort(), JSON.parse(env('COMPOUND_COVERS')).sort());
    assert.match(await page.textContent('#compound'), /Covers these two entries/);
    assert.match(await page.textContent('#message'), /two stored questions at once/);
    await page.screenshot({ path: `${shots}/compound.png` });
  });

  await check('ingest: upload a TSV and watch it finish', async () => {
    await page.click('a[data-view="ingest"]');
    await page.setInputFiles('#ingest-file', env('UPLOAD_FILE'));
    await page.fill('#ingest-context-fields', 'answer');
    await page.click('#ingest-form button[type=submit]');
    await page.waitForSelector('#ingest-status[data-state="running"], #ingest-status[data-state="done"]');
    await page.waitForSelector('#ingest-status[data-state="done"]', { timeout: 120_000 });
    const text = await page.textContent('#ingest-text');
    assert.match(text, new RegExp(`${env('UPLOAD_ROWS')} documents`), text);
    assert.equal(await page.getAttribute('#ingest-progress', 'value'), await page.getAttribute('#ingest-progress', 'max'));
    assert.match(await page.textContent('#message'), /Ingested/);
    assert.ok(await page.locator('#jobs-table tbody tr').count() >= 1);
    await page.screenshot({ path: `${shots}/ingest.png` });
  });

  await check('export: the collection downloads as JSONL, the upload with its context', async () => {
    const [file] = await Promise.all([page.waitForEvent('download'), page.click('#export-jsonl')]);
    assert.equal(file.suggestedFilename(), `${env('KINDRED_COLLECTION')}.jsonl`);
    const lines = (await readFile(await file.path(), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    const up0 = lines.find((d) => d.id === 'up0');
    assert.ok(up0, 'the uploaded up0 is in the export');
    assert.deepEqual(up0.context, ['answer 0'], JSON.stringify(up0));
    assert.ok(lines.length >= Number(env('UPLOAD_ROWS')), `${lines.length} lines`);
  });

  await check('questions with <script>, <img onerror> and javascript: links stay text', async () => {
    await page.click('a[data-view="search"]');
    // The stored attack questions (tests/it/ui.rs), each searched by its own text: its hit must
    // show the exact characters, and nothing may run.
    for (const q of JSON.parse(env('ATTACKS'))) {
      await page.fill('#q', q);
      await page.click('#search-form button[type=submit]');
      await page.waitForFunction((q) => [...document.querySelectorAll('#hits .text')].some((t) => t.textContent === q), q);
      await noInjection(`search "${q}"`);
    }
    const meta = await page.locator('#hits .meta').allTextContents();
    assert.ok(meta.some((t) => t.includes('<img src=x onerror=alert(1)>')), 'metadata shows as text');
    // Click every hit's text and explain the attack questions.
    for (const t of await page.locator('#hits .text').all()) await t.click();
    await noInjection('clicking hits');
    await page.locator('#hits li.hit').first().locator('button.explain').click();
    await page.waitForSelector('#explanation svg.heatmap');
    await page.locator('#explanation .word').first().hover();
    await page.locator('#explanation .chunk-row .chunk').first().hover();
    await page.locator('#explanation rect.cell').first().hover();
    await noInjection('explaining an attack question');
    await page.fill('#explain-a', '<a href="javascript:window.__xss=2">javascript:alert(1)</a>');
    await page.fill('#explain-b', '<img src=x onerror="window.__xss=3"><script>window.__xss=4</script>');
    await page.click('#explain-form button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#explanation .qtext')?.textContent.startsWith('<a href'));
    for (const w of await page.locator('#explanation .word').all()) await w.click();
    await noInjection('typed attack texts');
    await page.click('a[data-view="review"]');
    await page.click('#review-form button[type=submit]');
    await page.waitForTimeout(300);
    await noInjection('review view');
  });

  assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
  console.log('all UI checks passed');
} catch (e) {
  console.error(`FAILED at "${step}": ${e.stack || e}`);
  await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
