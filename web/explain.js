// Renders an RCMD explanation: the two directions' scores, the phrase alignment (chunk boxes
// linked by relation type), the word alignment drawn between the sentences, the word-pair
// contribution heatmap (colour legend; hover shows both words, their cosine and their
// contribution) and how the contributions add up to the score.
// Sized to stay readable at 40×40 words.

import { el, svg, num } from './dom.js';

// Sequential scale (light yellow → dark blue; ColorBrewer YlGnBu) for contributions ≥ 0.
const POSITIVE = ['#ffffd9', '#edf8b1', '#c7e9b4', '#7fcdbb', '#41b6c4', '#1d91c0', '#225ea8', '#0c2c84'];
// Negative contributions (a pair with negative cosine), white → red.
const NEGATIVE = ['#fff5f0', '#fcbba1', '#fb6a4a', '#cb181d', '#67000d'];
const ZERO = '#f7f7f7';
// Aligned pairs listed before "show all".
const SHOWN_PAIRS = 12;
// Relation types of aligned chunks (SemEval-2016 Task 2), in the legend's order; their colours
// are `.rel-*` in style.css.
const RELATIONS = {
  EQUI: 'same meaning',
  OPPO: 'opposite meaning',
  SPE1: 'a more specific',
  SPE2: 'b more specific',
  SIMI: 'similar meaning',
  REL: 'related',
};

function hex(c) {
  return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
}

function lerp(stops, t) {
  t = Math.min(1, Math.max(0, t));
  const x = t * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [hex(stops[i]), hex(stops[i + 1])];
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(',')})`;
}

/** The fill of a cell whose contribution is `v`, with `max` the largest |contribution|. */
export function colour(v, max) {
  if (v === 0 || max <= 0) return ZERO;
  return v > 0 ? lerp(POSITIVE, v / max) : lerp(NEGATIVE, -v / max);
}

function short(word, n = 14) {
  return word.length > n ? `${word.slice(0, n - 1)}…` : word;
}

let tooltip;
function tip() {
  if (!tooltip) {
    tooltip = el('div', { class: 'tooltip', id: 'tooltip', role: 'tooltip' });
    tooltip.hidden = true;
    document.body.append(tooltip);
  }
  return tooltip;
}

function showTip(ev, lines) {
  const t = tip();
  t.replaceChildren(...lines.map((l) => el('div', { text: l })));
  t.hidden = false;
  t.style.left = `${ev.pageX + 14}px`;
  t.style.top = `${ev.pageY + 14}px`;
}

function hideTip() {
  tip().hidden = true;
}

/** The heatmap of word-pair contributions, rows = words of a, columns = words of b. */
function heatmap(e) {
  const wa = e.a.words.map((w) => w.text);
  const wb = e.b.words.map((w) => w.text);
  const m = e.word_contributions;
  const cos = e.word_cosines;
  const max = Math.max(1e-12, ...m.values.map(Math.abs));
  const cell = Math.max(14, Math.min(36, Math.floor(760 / Math.max(m.rows, m.cols, 1))));
  const longest = (ws) => Math.max(1, ...ws.map((w) => short(w).length));
  const left = longest(wa) * 7 + 10;
  const top = Math.ceil(longest(wb) * 7 * 0.8) + 14;
  const font = cell < 18 ? 10 : 12;
  const width = left + m.cols * cell + 2;
  const height = top + m.rows * cell + 2;
  const aligned = new Set(e.word_alignments.map((l) => `${l.a},${l.b}`));
  const root = svg('svg', {
    class: 'heatmap', width, height, viewBox: `0 0 ${width} ${height}`,
    role: 'img', 'aria-label': `contribution heatmap, ${m.rows} × ${m.cols} words`,
    dataset: { rows: m.rows, cols: m.cols },
  });
  wa.forEach((w, i) => root.append(svg('text', {
    class: 'row-label', x: left - 6, y: top + i * cell + cell / 2, 'font-size': font,
    'text-anchor': 'end', 'dominant-baseline': 'middle', text: short(w),
  }, svg('title', { text: w }))));
  wb.forEach((w, j) => {
    const x = left + j * cell + cell / 2;
    root.append(svg('text', {
      class: 'col-label', x, y: top - 6, 'font-size': font,
      transform: `rotate(-55 ${x} ${top - 6})`, text: short(w),
    }, svg('title', { text: w })));
  });
  for (let i = 0; i < m.rows; i++) {
    for (let j = 0; j < m.cols; j++) {
      const v = m.values[i * m.cols + j];
      const c = cos.values[i * cos.cols + j];
      const r = svg('rect', {
        class: aligned.has(`${i},${j}`) ? 'cell aligned' : 'cell',
        x: left + j * cell, y: top + i * cell, width: cell, height: cell,
        fill: colour(v, max),
        dataset: { i, j, contribution: v, cosine: c },
      });
      r.addEventListener('mousemove', (ev) => showTip(ev, [
        `${wa[i]}  ↔  ${wb[j]}`,
        `cosine ${num(c, 3)}`,
        `contribution ${num(v, 4)} (${num((100 * v) / (e.score || 1), 1)}% of the score)`,
      ]));
      r.addEventListener('mouseleave', hideTip);
      root.append(r);
    }
  }
  return root;
}

/** The colour legend for contributions in [min(0, lo), max]. */
function legend(e) {
  const values = e.word_contributions.values;
  const max = Math.max(1e-12, ...values.map(Math.abs));
  const hasNegative = values.some((v) => v < 0);
  const w = 260;
  const id = `grad-${Math.random().toString(36).slice(2)}`;
  const stops = POSITIVE.map((c, k) => svg('stop', { offset: `${(100 * k) / (POSITIVE.length - 1)}%`, 'stop-color': c }));
  const root = svg('svg', { class: 'legend', width: w + 80, height: 44 },
    svg('defs', {}, svg('linearGradient', { id }, ...stops)),
    svg('rect', { x: 40, y: 4, width: w, height: 14, fill: `url(#${id})`, stroke: '#999' }),
    svg('rect', { x: 4, y: 4, width: 14, height: 14, fill: ZERO, stroke: '#999' }),
    svg('text', { x: 11, y: 34, 'text-anchor': 'middle', 'font-size': 11, text: '0' }),
  );
  for (const f of [0.25, 0.5, 1]) {
    root.append(svg('text', { x: 40 + f * w, y: 34, 'text-anchor': 'middle', 'font-size': 11, text: num(f * max, 3) }));
  }
  return el('div', { class: 'legend-row' },
    el('span', { text: 'contribution' }), root,
    hasNegative ? el('span', { class: 'note', text: 'red: negative (cosine < 0)' }) : null,
    el('span', { class: 'note', text: 'outlined: aligned word pairs' }));
}

/** The two sentences with lines between aligned words (width ∝ contribution). */
function alignment(e) {
  const line = (side, words) => el('div', { class: `sentence side-${side}` },
    ...words.map((w, i) => el('span', { class: 'word', dataset: { side, index: i }, text: w.text })));
  const rowA = line('a', e.a.words);
  const rowB = line('b', e.b.words);
  const links = svg('svg', { class: 'links' });
  const box = el('div', { class: 'alignment' }, links, rowA, el('div', { class: 'gap' }), rowB);
  const max = Math.max(1e-12, ...e.word_alignments.map((l) => Math.abs(l.contribution)));
  const draw = () => {
    const origin = box.getBoundingClientRect();
    if (origin.width === 0) return;
    links.setAttribute('width', origin.width);
    links.setAttribute('height', origin.height);
    links.replaceChildren();
    for (const l of e.word_alignments) {
      const a = rowA.children[l.a]?.getBoundingClientRect();
      const b = rowB.children[l.b]?.getBoundingClientRect();
      if (!a || !b) continue;
      const path = svg('line', {
        class: `link dir-${l.direction}`,
        x1: a.left + a.width / 2 - origin.left, y1: a.bottom - origin.top,
        x2: b.left + b.width / 2 - origin.left, y2: b.top - origin.top,
        'stroke-width': 1 + 5 * Math.abs(l.contribution) / max,
        dataset: { a: l.a, b: l.b },
      });
      links.append(path);
    }
  };
  new ResizeObserver(draw).observe(box);
  box.addEventListener('mouseover', (ev) => {
    const w = ev.target.closest('.word');
    if (!w) return;
    const { side, index } = w.dataset;
    for (const p of links.children) p.classList.toggle('hot', p.dataset[side] === index);
  });
  box.addEventListener('mouseout', () => { for (const p of links.children) p.classList.remove('hot'); });
  return el('div', {},
    box,
    el('div', { class: 'note' }, 'solid: chosen by both directions · dashed blue: a→b only · dashed orange: b→a only'));
}

/** A chunk link as one line: relation, 0–5 score, probability, contribution. */
function linkText(l) {
  return `${l.relation} ${num(l.score, 1)}/5 · probability ${num(l.probability, 2)} · contribution ${num(l.contribution, 4)}`;
}

/** For each link, where it leaves its box on `side` (a fraction of the box's width): a box's
 * links are spread along it in the order of their partners, so they do not start in one point. */
function ports(links, side, other) {
  const byBox = new Map();
  links.forEach((l, k) => byBox.set(l[side], [...(byBox.get(l[side]) ?? []), k]));
  const at = [];
  for (const ks of byBox.values()) {
    ks.sort((x, y) => links[x][other] - links[y][other]).forEach((k, r) => { at[k] = (r + 1) / (ks.length + 1); });
  }
  return at;
}

/**
 * The phrase alignment: each side's chunks as boxes (a on top, b below; dashed when unaligned),
 * curves between linked boxes coloured by relation (width ∝ score), hover details and the same
 * as a list. Null for an explanation without chunks (an older server).
 */
function phrases(e) {
  const links = e.chunk_alignments;
  if (!links || !e.a.chunks || !e.b.chunks) return null;
  const chunks = { a: e.a.chunks, b: e.b.chunks };
  const row = (side) => el('div', { class: `chunk-row side-${side}`, dataset: { side } },
    ...chunks[side].map((c) => el('span', { class: c.aligned ? 'chunk' : 'chunk unaligned', text: c.text })));
  const rows = { a: row('a'), b: row('b') };
  const paths = links.map((l) => svg('path', {
    class: `chunk-link rel-${l.relation}`, 'stroke-width': 1.5 + 0.7 * l.score,
    dataset: { a: l.a, b: l.b, relation: l.relation },
  }));
  const lines = svg('svg', { class: 'chunk-links', 'aria-hidden': 'true' }, ...paths);
  const track = el('div', { class: 'phrase-track' }, lines, rows.a, el('div', { class: 'gap' }), rows.b);
  const from = { a: ports(links, 'a', 'b'), b: ports(links, 'b', 'a') };
  const draw = () => {
    const origin = track.getBoundingClientRect();
    if (origin.width === 0) return;
    lines.setAttribute('width', origin.width);
    lines.setAttribute('height', origin.height);
    links.forEach((l, k) => {
      const a = rows.a.children[l.a].getBoundingClientRect();
      const b = rows.b.children[l.b].getBoundingClientRect();
      const [x1, y1] = [a.left + a.width * from.a[k] - origin.left, a.bottom - origin.top];
      const [x2, y2] = [b.left + b.width * from.b[k] - origin.left, b.top - origin.top];
      const ym = (y1 + y2) / 2;
      paths[k].setAttribute('d', `M${x1},${y1} C${x1},${ym} ${x2},${ym} ${x2},${y2}`);
    });
  };
  new ResizeObserver(draw).observe(track);

  // Hover: the hovered link, or a box's links, with the boxes they join; the rest fades.
  const focus = (hot) => {
    track.classList.toggle('focus', Boolean(hot));
    const on = { a: new Set(), b: new Set() };
    links.forEach((l, k) => {
      const h = Boolean(hot?.(l));
      paths[k].classList.toggle('hot', h);
      if (h) { on.a.add(l.a); on.b.add(l.b); }
    });
    for (const side of ['a', 'b']) [...rows[side].children].forEach((c, i) => c.classList.toggle('hot', on[side].has(i)));
  };
  const hover = (node, tipLines, hot) => {
    node.addEventListener('mouseenter', () => focus(hot));
    node.addEventListener('mousemove', (ev) => showTip(ev, tipLines));
    node.addEventListener('mouseleave', () => { focus(null); hideTip(); });
  };
  links.forEach((l, k) => hover(paths[k], [
    `${chunks.a[l.a].text}  ↔  ${chunks.b[l.b].text}`,
    `${l.relation} (${RELATIONS[l.relation] ?? 'unknown'}) · score ${num(l.score, 1)}/5`,
    `probability ${num(l.probability, 2)}`,
    `contribution ${num(l.contribution, 4)} (${num((100 * l.contribution) / (e.score || 1), 1)}% of the score)`,
  ], (m) => m === l));
  for (const [side, other] of [['a', 'b'], ['b', 'a']]) {
    chunks[side].forEach((c, i) => {
      const mine = links.filter((l) => l[side] === i);
      hover(rows[side].children[i], mine.length
        ? [c.text, ...mine.map((l) => `↔ ${chunks[other][l[other]].text}: ${linkText(l)}`)]
        : [c.text, `unaligned: no chunk of ${other} matches it`], (l) => l[side] === i);
    });
  }

  const unaligned = (side) => chunks[side].filter((c) => !c.aligned).map((c) => `“${c.text}”`);
  const list = el('ul', { class: 'phrase-list', 'aria-label': 'phrase alignment as text' },
    links.length ? null : el('li', { text: 'no chunk pairs aligned' }),
    ...links.map((l) => el('li', { text: `${chunks.a[l.a].text} ↔ ${chunks.b[l.b].text} — ${linkText(l)}` })),
    ...['a', 'b'].map((side) => unaligned(side).length
      ? el('li', { class: 'unaligned', text: `unaligned in ${side}: ${unaligned(side).join(', ')}` }) : null));
  const legend = el('div', { class: 'legend-row relations' },
    ...Object.entries(RELATIONS).map(([r, meaning]) => el('span', { class: `rel rel-${r}` },
      el('span', { class: 'swatch' }), el('b', { text: r }), ` ${meaning}`)),
    el('span', { class: 'chunk unaligned', text: 'unaligned' }),
    el('span', { class: 'note', text: 'line width ∝ score (0–5)' }));
  return el('div', { class: 'phrases' },
    legend, el('div', { class: 'phrase-scroll' }, track), list);
}

/** How the word-pair contributions add up to the score. */
function sum(e) {
  const wa = e.a.words.map((w) => w.text);
  const wb = e.b.words.map((w) => w.text);
  const total = e.word_contributions.values.reduce((s, v) => s + v, 0);
  let running = 0;
  const rows = e.word_alignments.map((l, k) => {
    running += l.contribution;
    return el('tr', { class: k < SHOWN_PAIRS ? 'pair-row' : 'pair-row more' },
      el('td', { text: wa[l.a] }), el('td', { text: wb[l.b] }),
      el('td', { class: 'n', text: num(l.cosine, 3) }),
      el('td', { class: 'n', text: num(l.contribution, 4) }),
      el('td', { class: 'n', text: num(running, 4) }),
      el('td', { text: l.direction.replaceAll('_', ' ') }));
  });
  const rest = total - running;
  const hidden = Math.max(0, rows.length - SHOWN_PAIRS);
  const table = el('table', { class: 'collapsed' },
      el('thead', {}, el('tr', {}, ...['word in a', 'word in b', 'cosine', 'contribution', 'running sum', 'chosen by']
        .map((h) => el('th', { text: h })))),
      el('tbody', {}, ...rows),
      el('tfoot', {},
        el('tr', {}, el('td', { colspan: 3, text: 'every other cell' }), el('td', { class: 'n', text: num(rest, 4) }), el('td'), el('td'))));
  const toggle = hidden
    ? el('button', { type: 'button', class: 'show-all', text: `show all ${rows.length} aligned pairs (${hidden} more)` })
    : null;
  toggle?.addEventListener('click', () => {
    table.classList.toggle('collapsed');
    toggle.textContent = table.classList.contains('collapsed') ? `show all ${rows.length} aligned pairs (${hidden} more)` : `show the top ${SHOWN_PAIRS}`;
  });
  return el('div', { class: 'sum' },
    table,
    toggle,
    el('p', { class: 'total', id: 'explain-total', dataset: { sum: total, score: e.score } },
      `Σ of all ${e.word_contributions.rows} × ${e.word_contributions.cols} cells = ${num(total, 4)}`,
      ` = (a→b ${num(e.forward, 4)} + b→a ${num(e.backward, 4)}) / 2 = s_RCMD ${num(e.score, 4)}`));
}

/**
 * Renders a pair explanation into `container`.
 * `pair`: { explanation, cosine?, w2?, probability? }.
 */
export function renderExplanation(container, pair) {
  const e = pair.explanation;
  const view = phrases(e);
  const scores = el('dl', { class: 'scores' },
    el('dt', { text: 's_RCMD' }), el('dd', { id: 'explain-score', text: num(e.score, 4) }),
    el('dt', { text: 'a → b (RCMD₁)' }), el('dd', { id: 'explain-forward', text: num(e.forward, 4) }),
    el('dt', { text: 'b → a (RCMD₂)' }), el('dd', { id: 'explain-backward', text: num(e.backward, 4) }),
    pair.cosine !== undefined ? [el('dt', { text: 'cosine' }), el('dd', { text: num(pair.cosine, 4) })] : null,
    pair.w2 !== undefined ? [el('dt', { text: 'W2 distance' }), el('dd', { text: num(pair.w2, 4) })] : null,
    pair.probability !== undefined ? [el('dt', { text: 'P(duplicate)' }), el('dd', { text: num(pair.probability, 3) })] : null);
  container.replaceChildren(
    el('div', { class: 'pair' },
      el('div', {}, el('h4', { text: 'a' }), el('p', { class: 'qtext', text: e.a.text })),
      el('div', {}, el('h4', { text: 'b' }), el('p', { class: 'qtext', text: e.b.text }))),
    scores,
    ...(view ? [el('h3', { text: 'Phrase alignment (top: chunks of a, bottom: chunks of b)' }), view] : []),
    el('h3', { text: 'Word alignment' }),
    alignment(e),
    el('h3', { text: 'Contributions (rows: words of a, columns: words of b)' }),
    legend(e),
    el('div', { class: 'heatmap-wrap' }, heatmap(e)),
    el('h3', { text: 'How the contributions add up' }),
    sum(e));
}
