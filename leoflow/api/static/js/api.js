// The JSON API client: bearer token from sessionStorage, typed errors, scope detection.

const TOKEN_KEY = "leoflow.token";
const BASE = "/api/v2";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

const listeners = new Set();
/** Called with the ApiError whenever the API answers 401 (token missing or revoked). */
export function onUnauthorized(fn) {
  listeners.add(fn);
}

/** The CSRF value of a single-sign-on session (a cookie the server set beside its HttpOnly session). */
function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)leoflow_csrf=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

/** Whether this browser holds a single-sign-on session (its CSRF cookie is readable; the session is not). */
export function hasSsoSession() {
  return Boolean(csrfToken());
}

/** Whether the server offers "sign in with single sign-on" (set by detectScope). */
export let ssoOffered = false;

function headers(extra) {
  const result = { Accept: "application/json", ...extra };
  const token = getToken();
  if (token) result.Authorization = `Bearer ${token}`;
  else if (csrfToken()) result["X-CSRF-Token"] = csrfToken(); // the session cookie is the credential
  return result;
}

/** Ends a single-sign-on session (its cookies); a pasted token is simply forgotten by the caller. */
export async function endSsoSession() {
  if (!csrfToken()) return;
  try {
    await fetch("/auth/logout", { method: "POST", headers: { "X-CSRF-Token": csrfToken() } });
  } catch {
    // Unreachable: the cookie expires with the ID token anyway.
  }
}

async function errorFrom(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText}`;
  let details = null;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      details = body.error.details ?? null;
    }
  } catch {
    // Not JSON (a proxy's error page): keep the status line.
  }
  return new ApiError(response.status, code, message, details);
}

/**
 * Call the API. path is relative to /api/v2 ("/dags"). Options: method, body (JSON), query
 * (object), text (return the body as text), withHeaders (return {body, headers}), signal.
 */
export async function api(path, { method = "GET", body, query, text = false, blob = false, withHeaders = false,
  signal } = {}) {
  let url = BASE + path;
  if (query) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") params.set(k, v);
    const qs = params.toString();
    if (qs) url += "?" + qs;
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
      body: body !== undefined ? JSON.stringify(body) : undefined,
      signal,
      cache: "no-store",
    });
  } catch (err) {
    if (err && err.name === "AbortError") throw err;
    throw new ApiError(0, "unreachable", "the server is unreachable");
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401) for (const fn of listeners) fn(error);
    throw error;
  }
  let result;
  if (blob) result = await response.blob(); // a download (an artifact's .tar.gz)
  else if (text) result = await response.text();
  else if (response.status === 204) result = null;
  else result = await response.json();
  return withHeaders ? { body: result, headers: response.headers } : result;
}

/** The list inside a paginated response ({items: [...]}) or a bare array. */
export function items(response, ...keys) {
  if (Array.isArray(response)) return response;
  if (!response || typeof response !== "object") return [];
  for (const key of [...keys, "items", "data", "results"]) {
    if (Array.isArray(response[key])) return response[key];
  }
  return [];
}

export const enc = encodeURIComponent;

/** The last /dashboard/session answer: role (highest held anywhere) and admin (cluster writes). */
export let sessionInfo = {};

/**
 * The caller's access to these DAGs: {dag_id: {role, operate, edit}}, for the DAGs it may read
 * (asked of GET /dashboard/session?dag_id=…; a failed ask grants nothing: no write buttons).
 */
export async function dagAccess(ids) {
  const query = new URLSearchParams();
  for (const id of ids.slice(0, 100)) query.append("dag_id", id);
  try {
    const response = await fetch(`/dashboard/session?${query}`, { headers: headers({}), cache: "no-store" });
    return response.ok ? (await response.json()).dags || {} : {};
  } catch {
    return {};
  }
}

/**
 * What the current token may do: "admin", "read", or "" when the server does not accept it.
 *
 * Asks GET /dashboard/session, served beside this page by leoflow/api/dashboard.py. It always
 * answers 200, so a wrong token leaves no failed request in the browser console, and it uses
 * the API's own authenticator, so it cannot disagree with what the API enforces.
 */
export async function detectScope() {
  let response;
  try {
    response = await fetch("/dashboard/session", { headers: headers({}), cache: "no-store" });
  } catch {
    throw new ApiError(0, "unreachable", "the server is unreachable");
  }
  if (!response.ok) throw await errorFrom(response);
  const info = await response.json();
  ssoOffered = Boolean(info.sso);
  sessionInfo = info;
  return info.authenticated ? info.scope || "read" : "";
}
