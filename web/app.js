// The admin page: collections, search, explain, duplicate review and ingest, over the REST API.
// Views are sections switched by the URL hash; all state worth keeping lives on the server.

import { api, ApiError, getKey, setKey, seg } from './api.js';
import { el, clear, num, pct } from './dom.js';
import { renderExplanation } from './explain.js';

const $ = (id) => document.getElementById(id);
const VIEWS = ['collections', 'search', 'explain', 'review', 'ingest'];

// ---------------------------------------------------------------- messages and the key

function say(text, kind = 'error') {
  const m = $('message');
  m.textContent = text;
  m.className = kind;
  m.hidden = !text;
}

/** Shows an error; a refused key opens the key dialog with the server's reason. */
function fail(e) {
  if (e instanceof ApiError && e.isAuth) {
    const why = e.status === 401
      ? `The server refused the API key (401 ${e.code}): ${e.message}`
      : `This key may not do that (403 ${e.code}): ${e.message}`;
    say(why);
    askKey(why);
  } else if (e instanceof ApiError) {
    say(`${e.message} (${e.status} ${e.code})`);
  } else {
    say(String(e && e.message ? e.message : e));
    console.error(e);
  }
}

/** Runs an async action, reporting its errors. */
function guard(fn) {
  return async (ev) => {
    if (ev && ev.preventDefault) ev.preventDefault();
    try {
      await fn(ev);
    } catch (e) {
      fail(e);
    }
  };
}

function askKey(reason) {
  const d = $('key-dialog');
  $('key-error').textContent = reason || '';
  $('key-error').hidden = !reason;
  $('key-input').value = getKey();
  if (!d.open) d.showModal();
  $('key-input').focus();
}

function setupKey() {
  $('key-button').addEventListener('click', () => askKey(''));
  $('key-form').addEventListener('submit', guard(async () => {
    setKey($('key-input').value.trim());
    $('key-dialog').close();
    say('');
    // An admin-only read: a wrong key is refused here, before any write is tried.
    await api('GET', '/v1/jobs');
    say('Key accepted.', 'info');
    await loadCollections();
  }));
  $('key-clear').addEventListener('click', () => {
    setKey('');
    $('key-input').value = '';
  });
  $('key-cancel').addEventListener('click', () => $('key-dialog').close());
}

// ---------------------------------------------------------------- navigation

function show() {
  const view = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : 'collections';
  for (const v of VIEWS) $(`view-${v}`).hidden = v !== view;
  for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.dataset.view === view);
  if (view === 'search') loadSearchDefaults().catch(fail);
  if (view === 'review') loadVerdicts().catch(fail);
  if (view === 'ingest') loadJobs().catch(fail);
}

function go(view) {
  if (location.hash !== `#${view}`) location.hash = view;
  else show();
}

const collection = () => $('collection').value;

function needCollection() {
  const c = collection();
  if (!c) throw new Error('No collection yet: create one on the Collections page.');
  return c;
}

// ---------------------------------------------------------------- collections

async function loadCollections() {
  const { collections } = await api('GET', '/v1/collections');
  const pick = $('collection');
  const keep = sessionStorage.getItem('kindred.collection') || pick.value;
  pick.replaceChildren(...collections.map((c) => el('option', { value: c.name, text: c.name })));
  if (collections.some((c) => c.name === keep)) pick.value = keep;
  const body = $('collections-table').tBodies[0];
  const infos = await Promise.all(collections.map((c) => api('GET', `/v1/collections/${seg(c.name)}`).catch((e) => ({ name: c.name, failed: e }))));
  body.replaceChildren(...infos.map(collectionRow));
  if (!$('view-search').hidden) await loadSearchDefaults();
}

function collectionRow(info) {
  if (info.failed) {
    return el('tr', { dataset: { name: info.name } }, el('td', { text: info.name }),
      el('td', { colspan: 10, class: 'error', text: info.failed.message }));
  }
  const ix = info.index;
  const docs = info.stats.documents;
  const live = ix.cosine_points - ix.tombstones;
  const healthy = live === docs && ix.lexical_documents === docs;
  const drop = el('button', { type: 'button', class: 'drop', text: 'Delete' });
  drop.addEventListener('click', guard(async () => {
    if (!confirm(`Delete collection ${info.name} and its ${docs} documents? This cannot be undone.`)) return;
    await api('DELETE', `/v1/collections/${seg(info.name)}`);
    say(`Deleted ${info.name}.`, 'info');
    await loadCollections();
  }));
  return el('tr', { dataset: { name: info.name } },
    el('td', { text: info.name }),
    el('td', { class: 'n docs', text: docs }),
    el('td', { text: info.settings.model.id, title: info.settings.model.fingerprint }),
    el('td', { class: 'n', text: info.format_version }),
    el('td', { class: 'n', text: ix.cosine_points }),
    el('td', { class: 'n', text: ix.w2_points }),
    el('td', { class: 'n', text: ix.tombstones }),
    el('td', { class: 'n', text: ix.lexical_documents }),
    el('td', { class: healthy ? 'health ok' : 'health error', text: healthy ? 'ok' : `indexes hold ${live} live points for ${docs} documents` }),
    defaultsCell(info),
    el('td', {}, drop));
}

// ---------------------------------------------------------------- search defaults

/** The four settings, e.g. "mode cosine · rerank none · weights uniform · fusion 1/1/1, k0 60". */
function settingsText(s) {
  const f = s.fusion;
  return `mode ${s.mode} · rerank ${s.rerank} · weights ${s.weights} · fusion cosine ${f.cosine}, w2 ${f.w2}, lexical ${f.lexical}, k0 ${f.k0}`;
}

/** The collections table's cell: the defaults in short, why, and a stale warning. */
function defaultsCell(info) {
  const d = info.search_defaults;
  if (!d) return el('td', { class: 'defaults none', text: 'none (server defaults)' });
  return el('td', { class: d.stale ? 'defaults stale' : 'defaults' },
    el('div', { class: 'settings', text: `${d.mode} · ${d.rerank} · ${d.weights}` }),
    el('div', { class: 'source', text: `${d.source} ${d.chosen_at}` }),
    el('div', { class: 'reason', text: d.reason }),
    d.stale ? el('div', { class: 'stale error', text: 'stale: chosen for another model; not applied' }) : null);
}

/** The search page's panel: the collection's search defaults and why, or that it has none. */
async function loadSearchDefaults() {
  const c = collection();
  const box = $('search-defaults');
  if (!c) {
    clear(box);
    return;
  }
  const info = await api('GET', `/v1/collections/${seg(c)}`);
  const d = info.search_defaults;
  if (!d) {
    box.className = 'defaults note none';
    box.replaceChildren(el('span', { text: `${c} has no search defaults: searches use the server's unless they say otherwise.` }));
    return;
  }
  box.className = d.stale ? 'defaults note stale' : 'defaults note';
  const parts = [
    el('div', { class: 'settings', text: `Search defaults of ${c} (${d.source} ${d.chosen_at}): ${settingsText(d)}` }),
    el('div', { class: 'reason', text: `Why: ${d.reason}` }),
  ];
  if (d.stale) {
    parts.push(el('div', { class: 'stale error', text: `Stale: chosen for model ${d.model_fingerprint}, but ${c} now uses ${info.settings.model.fingerprint}; not applied until tuned or set again.` }));
  }
  box.replaceChildren(...parts);
}

function setupCollections() {
  $('collection').addEventListener('change', () => {
    sessionStorage.setItem('kindred.collection', collection());
    if (!$('view-search').hidden) loadSearchDefaults().catch(fail);
  });
  $('create-form').addEventListener('submit', guard(async () => {
    const name = $('create-name').value.trim();
    await api('POST', '/v1/collections', { name });
    sessionStorage.setItem('kindred.collection', name);
    $('create-name').value = '';
    say(`Created ${name}.`, 'info');
    await loadCollections();
  }));
}

// ---------------------------------------------------------------- search

const STAGES = [['cosine', 'cosine'], ['w2', 'W2'], ['lexical', 'lexical'], ['fused', 'fused'], ['rcmd', 'RCMD']];

function stageTable(hit) {
  const s = hit.stages;
  // With rerank "context": the query's cosine to the hit's context (a score, no rank).
  const stages = s.context != null ? [...STAGES, ['context', 'context']] : STAGES;
  const cell = (st, key) => {
    if (typeof st === 'number') return el('td', { class: 'n', text: key === 'rank' ? '–' : num(st, 4) });
    return el('td', { class: 'n', text: st ? (key === 'rank' ? (st.rank ?? '–') : num(st.score, 4)) : '–' });
  };
  return el('table', { class: 'stages' },
    el('thead', {}, el('tr', {}, el('th'), ...stages.map(([, label]) => el('th', { class: 'n', text: label })), el('th', { class: 'n', text: 'final' }))),
    el('tbody', {},
      el('tr', {}, el('th', { text: 'score' }), ...stages.map(([k]) => cell(s[k], 'score')), el('td', { class: 'n', text: num(hit.score, 4) })),
      el('tr', {}, el('th', { text: 'rank' }), ...stages.map(([k]) => cell(s[k], 'rank')), el('td'))));
}

function badge(p, threshold) {
  return el('span', {
    class: p >= threshold ? 'badge prob dup' : 'badge prob',
    title: `P(duplicate); the calibrated threshold is ${num(threshold, 3)}`,
    text: `P(dup) ${pct(p)}`,
  });
}

function metadataLine(meta) {
  const entries = Object.entries(meta || {});
  if (!entries.length) return null;
  return el('div', { class: 'meta' }, ...entries.map(([k, v], i) =>
    el('span', { text: `${i ? ' · ' : ''}${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}` })));
}

async function search() {
  const c = needCollection();
  const text = $('q').value.trim();
  const body = { text, k: Number($('k').value) || 10, explain: true };
  // Left at "collection's default", mode and rerank come from the collection's search defaults.
  if ($('mode').value) body.mode = $('mode').value;
  if ($('rerank').value) body.rerank = $('rerank').value;
  if ($('ask-compound').checked) body.compound = true;
  const out = await api('POST', `/v1/collections/${seg(c)}/search`, body);
  say('');
  $('search-compound').replaceChildren(...(out.compound ? [compoundBox(out.compound, 'search-covers')] : []));
  const st = out.settings;
  $('search-settings').textContent = st
    ? `settings in force: mode ${st.mode} (${st.source.mode}) · rerank ${st.rerank} (${st.source.rerank}) · weights ${st.weights} (${st.source.weights}) · fusion (${st.source.fusion})` +
      (st.stale_defaults ? ' · the collection\'s search defaults are stale and were not applied' : '')
    : '';
  $('search-meta').textContent = `${out.hits.length} hits from ${out.candidates} candidates in ${num(out.timings.total_ms, 1)} ms ` +
    `(encode ${num(out.timings.encode_ms, 1)}, candidates ${num(out.timings.candidates_ms, 1)}, rerank ${num(out.timings.rerank_ms, 1)}); probabilities: ${out.calibration}`;
  $('hits').replaceChildren(...out.hits.map((h) => {
    const explain = el('button', { type: 'button', class: 'explain', text: 'Explain' });
    explain.addEventListener('click', () => {
      go('explain');
      $('explain-a').value = text;
      $('explain-b').value = h.text;
      renderExplanation($('explanation'), { explanation: h.explanation, cosine: h.stages.cosine?.score, probability: h.probability });
    });
    return el('li', { class: 'hit', dataset: { id: h.id } },
      el('p', { class: 'qtext' }, el('span', { class: 'text', text: h.text }), badge(h.probability, out.threshold)),
      el('div', { class: 'meta', text: `id ${h.id}` }),
      metadataLine(h.metadata),
      stageTable(h),
      explain);
  }));
}

// ---------------------------------------------------------------- explain

async function explainTexts() {
  const a = $('explain-a').value.trim();
  const b = $('explain-b').value.trim();
  const out = await api('POST', '/v1/explain', { a, b });
  say('');
  renderExplanation($('explanation'), out);
}

// ---------------------------------------------------------------- review

let queue = [];
let nextBefore = null;
let selected = null;
let threshold = null;

function queueItem(item) {
  const li = el('li', { dataset: { key: item.key } },
    el('div', { class: 'qtext', text: item.document.text }),
    el('div', { class: 'small' }, '≈ ', el('span', { text: item.matched.text }), badge(item.matched.probability, threshold ?? 0.5)),
    item.compound
      ? el('div', { class: 'small covers-two', text: `covers two entries (P ${pct(item.compound.probability)}): ${item.compound.covers.map((c) => c.text).join(' · ')}` })
      : null,
    item.beyond ? el('div', { class: 'small also-asks', text: `also asks: ${item.beyond.phrases.join(' · ')}` }) : null,
    item.document.id ? null : el('div', { class: 'small', text: 'submitted, not stored' }));
  li.addEventListener('click', () => select(item));
  return li;
}

function renderQueue() {
  $('review-list').replaceChildren(...queue.map(queueItem));
  if (!queue.length) clear($('review-detail')).append(el('p', { class: 'note', text: 'Nothing to review here.' }));
  else if (!queue.includes(selected)) select(queue[0]);
  else select(selected);
}

function select(item) {
  selected = item;
  for (const li of $('review-list').children) li.classList.toggle('selected', li.dataset.key === item.key);
  const detail = $('review-detail');
  const mark = (duplicate) => guard(async () => {
    await api('POST', `/v1/collections/${seg(needCollection())}/verdicts`, {
      a: item.document, b: { id: item.matched.id, text: item.matched.text }, duplicate, probability: item.matched.probability,
    });
    say(`Marked ${duplicate ? 'duplicate' : 'not duplicate'}.`, 'info');
    queue = queue.filter((q) => q !== item);
    renderQueue();
    await loadVerdicts();
  });
  const explanation = el('div', { class: 'review-explanation' });
  detail.replaceChildren(
    el('div', { class: 'verdict-buttons' },
      el('button', { type: 'button', class: 'yes', id: 'mark-duplicate', text: 'Duplicate', onclick: mark(true) }),
      el('button', { type: 'button', class: 'no', id: 'mark-different', text: 'Not duplicate', onclick: mark(false) }),
      badge(item.matched.probability, threshold ?? 0.5)),
    el('div', { class: 'note', text: `new: ${item.document.id ? `id ${item.document.id}` : 'submitted text'} · stored: id ${item.matched.id}` }),
    ...insights(item),
    explanation);
  renderExplanation(explanation, { explanation: item.matched.explanation, cosine: item.matched.stages.cosine?.score, probability: item.matched.probability });
}

// The two stored entries a compound question covers, each with the phrases it explains.
function compoundBox(c, id) {
  return el('div', { class: 'compound', id },
    el('strong', { text: `Covers these two entries at once (P ${pct(c.probability)})` }),
    el('ul', { class: 'covers' }, ...c.covers.map((p) => el('li', { dataset: { id: p.id } },
      el('span', { class: 'qtext', text: p.text }),
      el('div', { class: 'small', text: `id ${p.id} · explains: ${p.phrases.join(' · ') || '–'}` })))));
}

// What the duplicate check says besides the best match: the two entries a compound question
// covers, and what the question asks beyond its match (docs/operations-on-questions.md).
function insights(item) {
  const out = [];
  if (item.compound) out.push(compoundBox(item.compound, 'compound'));
  // A queued pair carries it on the item, a submitted question's match on the match.
  const b = item.beyond ?? item.matched.beyond;
  if (b) {
    out.push(el('div', { class: 'beyond', id: 'beyond' },
      el('strong', { text: 'Also asks: ' }), el('span', { class: 'phrases', text: b.phrases.join(' · ') }),
      b.nearest?.length
        ? el('div', { class: 'small' }, 'closest stored questions to the rest: ', el('span', { text: b.nearest.map((n) => n.text).join(' · ') }))
        : null,
      b.words?.length
        ? el('div', { class: 'small' }, 'the rest read back as words: ', el('span', { class: 'words', text: b.words.join(' ') }))
        : null));
  }
  return out;
}

async function loadQueue(more) {
  const c = needCollection();
  const params = new URLSearchParams({ explain: 'true', scan: $('review-scan').value || '100' });
  const t = $('review-threshold').value;
  if (t !== '') params.set('threshold', t);
  if (more && nextBefore !== null) params.set('before', nextBefore);
  const page = await api('GET', `/v1/collections/${seg(c)}/review?${params}`);
  threshold = page.threshold;
  nextBefore = page.next_before ?? null;
  $('review-more').hidden = nextBefore === null;
  queue = more ? queue.concat(page.items) : page.items;
  $('review-meta').textContent = `${page.items.length} pairs at P(dup) ≥ ${num(page.threshold, 3)} among the ${page.scanned} ${more ? 'next ' : ''}newest documents`;
  say('');
  renderQueue();
}

async function submitQuestion() {
  const c = needCollection();
  const text = $('submit-text').value.trim();
  const v = await api('POST', `/v1/collections/${seg(c)}/duplicates`, { text, k: 1, explain: true });
  threshold = v.threshold;
  if (!v.matches.length) {
    say('The collection is empty: nothing to compare with.', 'info');
    return;
  }
  const m = v.matches[0];
  const item = { key: `submitted-${Date.now()}`, document: { text }, matched: m, compound: v.compound };
  queue = [item, ...queue];
  say(v.compound
    ? `It asks two stored questions at once (P ${pct(v.compound.probability)}): review it below.`
    : v.is_duplicate
    ? `Likely a duplicate (P ${pct(v.probability)} ≥ ${num(v.threshold, 3)}): review it below.`
    : `Best match P ${pct(v.probability)} is below the threshold ${num(v.threshold, 3)}; shown below for review anyway.`, 'info');
  $('submit-text').value = '';
  renderQueue();
  select(item);
}

async function loadVerdicts() {
  const c = collection();
  if (!c) return;
  const all = await api('GET', `/v1/collections/${seg(c)}/verdicts`);
  $('verdicts-table').tBodies[0].replaceChildren(...all.slice().reverse().map((v) => {
    const undo = el('button', { type: 'button', text: 'Withdraw' });
    undo.addEventListener('click', guard(async () => {
      await api('DELETE', `/v1/collections/${seg(c)}/verdicts/${seg(v.key)}`);
      await loadVerdicts();
    }));
    return el('tr', { dataset: { key: v.key, duplicate: v.duplicate } },
      el('td', { text: v.duplicate ? 'duplicate' : 'not duplicate' }),
      el('td', { class: 'qtext', text: v.a.text }),
      el('td', { class: 'qtext', text: v.b.text }),
      el('td', { class: 'n', text: v.probability === undefined ? '–' : num(v.probability, 3) }),
      el('td', { text: new Date(v.at * 1000).toLocaleString() }),
      el('td', {}, undo));
  }));
}

async function exportTsv() {
  const c = needCollection();
  await download(`/v1/collections/${seg(c)}/verdicts?format=tsv`, `${c}-verdicts.tsv`);
}

// Every document of the collection, as the JSONL ingest reads (GET /v1/collections/{c}/export).
async function exportJsonl() {
  const c = needCollection();
  await download(`/v1/collections/${seg(c)}/export`, `${c}.jsonl`);
}

// Fetches `path` with the admin key and saves the body as `name`.
async function download(path, name) {
  const r = await api('GET', path, undefined, { raw: true });
  const url = URL.createObjectURL(await r.blob());
  const a = document.createElement('a');
  a.download = name;
  a.href = url; // a blob: URL we made, never user text
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

// ---------------------------------------------------------------- ingest

async function upload() {
  const c = needCollection();
  const file = $('ingest-file').files[0];
  if (!file) throw new Error('Choose a file first.');
  const params = new URLSearchParams({ name: file.name });
  for (const [id, key] of [['ingest-format', 'format'], ['ingest-id-field', 'id_field'], ['ingest-text-field', 'text_field'], ['ingest-meta-fields', 'meta_fields'], ['ingest-context-fields', 'context_fields'], ['ingest-text-format', 'text_format']]) {
    const v = $(id).value.trim();
    if (v) params.set(key, v);
  }
  $('ingest-status').hidden = false;
  $('ingest-text').textContent = `uploading ${file.name} (${(file.size / 1024).toFixed(0)} KiB)…`;
  let job = await api('POST', `/v1/collections/${seg(c)}/ingest?${params}`, file);
  say('');
  while (job.state === 'running') {
    showJob(job);
    await new Promise((r) => setTimeout(r, 400));
    job = await api('GET', `/v1/jobs/${job.id}`);
  }
  showJob(job);
  await Promise.all([loadJobs(), loadCollections()]);
  if (job.state === 'failed') say(`Ingest failed: ${job.error}`);
  else say(`Ingested ${file.name}: ${job.summary.ingested} new, ${job.summary.updated} updated, ${job.summary.rejected} rejected.`, 'info');
}

function showJob(job) {
  const p = $('ingest-progress');
  p.max = Math.max(1, job.total_lines);
  p.value = job.line;
  $('ingest-status').dataset.state = job.state;
  $('ingest-text').textContent = `${job.state}: line ${job.line} of ${job.total_lines} · ${job.written} documents (${num(job.docs_per_sec, 0)}/s) · ${job.rejected} rejected`;
  $('ingest-rejects').replaceChildren(...job.rejects.slice(0, 20).map((r) => el('li', { text: `line ${r.line}: ${r.reason}` })));
}

async function loadJobs() {
  const jobs = await api('GET', '/v1/jobs');
  $('jobs-table').tBodies[0].replaceChildren(...jobs.map((j) => el('tr', {},
    el('td', { class: 'n', text: j.id }), el('td', { text: j.collection }), el('td', { text: j.file }),
    el('td', { text: j.state }), el('td', { class: 'n', text: j.written }), el('td', { class: 'n', text: j.rejected }),
    el('td', { class: 'n', text: num(j.docs_per_sec, 0) }))));
}

// ---------------------------------------------------------------- start

async function start() {
  setupKey();
  setupCollections();
  $('search-form').addEventListener('submit', guard(search));
  $('explain-form').addEventListener('submit', guard(explainTexts));
  $('review-form').addEventListener('submit', guard(() => loadQueue(false)));
  $('review-more').addEventListener('click', guard(() => loadQueue(true)));
  $('submit-form').addEventListener('submit', guard(submitQuestion));
  $('export-tsv').addEventListener('click', guard(exportTsv));
  $('ingest-form').addEventListener('submit', guard(upload));
  $('export-jsonl').addEventListener('click', guard(exportJsonl));
  window.addEventListener('hashchange', show);
  show();
  // The admin key is asked for once per browser session (kept in sessionStorage), unless
  // the server runs without one (an admin-only read succeeds without a key).
  if (!getKey()) {
    try {
      await api('GET', '/v1/jobs');
      say('This server has no admin key: anyone who can reach it may write.', 'info');
    } catch (e) {
      askKey('');
    }
  }
  try {
    await loadCollections();
  } catch (e) {
    if (!(e instanceof ApiError && e.isAuth && !getKey())) fail(e);
  }
  document.body.dataset.ready = 'true';
}

start();
