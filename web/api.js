// The REST API client: every request carries the admin key kept in sessionStorage (asked for
// once per browser session); errors arrive as ApiError with the server's code and message.

const KEY = 'kindred.adminKey';

export function getKey() {
  return sessionStorage.getItem(KEY) || '';
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** True when the key is missing or wrong (401) or lacks the rights (403). */
  get isAuth() {
    return this.status === 401 || this.status === 403;
  }
}

/**
 * Calls the API. `body`: an object (sent as JSON), a File/Blob (sent as is) or undefined.
 * `opts.raw`: return the Response instead of parsed JSON.
 */
export async function api(method, path, body, opts = {}) {
  const headers = {};
  const key = getKey();
  if (key) headers['Authorization'] = `Bearer ${key}`;
  let payload;
  if (body instanceof Blob) {
    payload = body;
    headers['Content-Type'] = 'application/octet-stream';
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  let r;
  try {
    r = await fetch(path, { method, headers, body: payload });
  } catch (e) {
    throw new ApiError(0, 'network', `cannot reach the server (${e.message}); is kindred serve running?`);
  }
  if (!r.ok) {
    let code = 'http_error';
    let message = `${r.status} ${r.statusText}`;
    try {
      const e = (await r.json()).error;
      code = e.code;
      message = e.message;
    } catch (_) { /* not our JSON */ }
    throw new ApiError(r.status, code, message);
  }
  return opts.raw ? r : r.json();
}

/** A path segment, escaped. */
export function seg(s) {
  return encodeURIComponent(s);
}
