// DOM helpers. User text only ever enters the page through textContent or attribute values
// (never innerHTML, never href/src), so questions are always shown as text.

const SVG_NS = 'http://www.w3.org/2000/svg';

function fill(node, props, children) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') node.textContent = String(v);
    else if (k === 'class') node.setAttribute('class', v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'href' || k === 'src') throw new Error(`unsafe attribute ${k}`);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** An HTML element: el('div', {class: 'x', text: userText}, ...children). */
export function el(tag, props, ...children) {
  return fill(document.createElement(tag), props, children);
}

/** An SVG element. */
export function svg(tag, props, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), props, children);
}

/** Removes every child. */
export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

/** A number with `d` decimals ('–' when absent). */
export function num(x, d = 3) {
  return x === undefined || x === null || Number.isNaN(x) ? '–' : Number(x).toFixed(d);
}

/** A probability as a percentage. */
export function pct(p) {
  return `${(100 * p).toFixed(1)}%`;
}
