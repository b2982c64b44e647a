// The dashboard shell: sign-in, hash router, and the polling loop that keeps a view live.

import {
  api, ApiError, dagAccess, detectScope, endSsoSession, getToken, hasSsoSession, onUnauthorized, sessionInfo, setToken,
  ssoOffered,
} from "./api.js";
import { fill, h } from "./dom.js";
import auditPage from "./pages/audit.js";
import clusterPage from "./pages/cluster.js";
import dagPage from "./pages/dag.js";
import dagsPage from "./pages/dags.js";
import datasetsPage from "./pages/datasets.js";
import logsPage from "./pages/logs.js";
import poolsPage from "./pages/pools.js";
import runPage from "./pages/run.js";
import tokensPage from "./pages/tokens.js";

const POLL_MS = 2000;
const MAX_BACKOFF_MS = 15000;

// [pattern, page, nav key]; a page is {title(params), mount(root, params, ctx) -> view}.
const ROUTES = [
  [/^\/?$/, dagsPage, "dags"], // where sign-in lands: what a user came for is their DAGs
  [/^\/cluster$/, clusterPage, "cluster"],
  [/^\/dags$/, dagsPage, "dags"],
  [/^\/audit$/, auditPage, "audit"],
  [/^\/pools$/, poolsPage, "pools"],
  [/^\/datasets$/, datasetsPage, "datasets"],
  [/^\/tokens$/, tokensPage, "tokens"],
  [/^\/dags\/([^/]+)$/, dagPage, "dags", ["dagId"]],
  [/^\/dags\/([^/]+)\/runs\/([^/]+)$/, runPage, "dags", ["dagId", "runId"]],
  [/^\/dags\/([^/]+)\/runs\/([^/]+)\/tasks\/([^/]+)$/, logsPage, "dags", ["dagId", "runId", "taskId"]],
];

const session = { scope: null, canWrite: false };
let current = null; // {view, timer, generation}
let generation = 0;

const $ = (id) => document.getElementById(id);

function setLive(state, text) {
  const el = $("live");
  el.className = `live live-${state}`;
  el.textContent = text;
}

function showLogin(message) {
  stopView();
  $("view").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  $("scope").hidden = true;
  const error = $("login-error");
  error.hidden = !message;
  error.textContent = message || "";
  $("sso").hidden = !ssoOffered;
  $("sso-login").href = `/auth/login?next=${encodeURIComponent(location.pathname + location.hash)}`;
  setLive("off", "signed out");
  $("token-input").focus();
}

async function startSession() {
  setLive("off", "connecting…");
  try {
    session.scope = await detectScope();
  } catch (err) {
    setLive("error", "API unreachable");
    fill($("view"), h("p", { class: "error" }, `Cannot reach the API: ${err.message}. Retrying…`));
    setTimeout(startSession, 3000);
    return;
  }
  if (!session.scope) {
    const rejected = Boolean(getToken());
    setToken(""); // never keep a token the server refused
    showLogin(rejected ? "That token was not accepted." : "");
    return;
  }
  session.canWrite = session.scope === "admin";
  // The highest role held anywhere: an operator or editor (of some team, or of every DAG) gets the
  // write buttons of the DAGs it may operate, asked per DAG when a page opens (dagAccess).
  session.role = session.canWrite ? "admin" : sessionInfo.role || "viewer";
  document.body.classList.toggle("read-only", !session.canWrite);
  $("login").hidden = true;
  $("view").hidden = false;
  $("signout").hidden = !getToken() && !hasSsoSession();
  const scopeEl = $("scope");
  scopeEl.hidden = false;
  scopeEl.textContent = session.canWrite ? "admin" : session.role === "viewer" ? "read-only" : session.role;
  scopeEl.className = `scope scope-${session.canWrite ? "admin" : "read"}`;
  route();
}

function match(path) {
  for (const [pattern, page, nav, names = []] of ROUTES) {
    const m = pattern.exec(path);
    if (m) {
      const params = {};
      names.forEach((name, i) => (params[name] = decodeURIComponent(m[i + 1])));
      return { page, nav, params };
    }
  }
  return null;
}

function stopView() {
  if (!current) return;
  clearTimeout(current.timer);
  if (current.view && current.view.unmount) current.view.unmount();
  current = null;
}

function route() {
  if (session.scope === null || !$("login").hidden) return;
  stopView();
  const raw = location.hash.replace(/^#/, "");
  const [path, queryString] = raw.split("?");
  const found = match(path || "/");
  const root = $("view");
  root.replaceChildren();
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("active", found !== null && a.dataset.nav === found.nav);
  }
  if (!found) {
    document.title = "Not found · Leoflow";
    fill(root, h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/dags" }, "Go to DAGs")));
    return;
  }
  const query = new URLSearchParams(queryString || "");
  const myGeneration = ++generation;
  const ctx = {
    canWrite: session.canWrite,
    /** The DAG ids of `ids` this caller may operate (trigger, clear, pause…): all for an admin. */
    operable: async (ids) => {
      if (session.canWrite) return new Set(ids);
      if (session.role === "viewer" || !ids.length) return new Set();
      const access = await dagAccess(ids);
      return new Set(ids.filter((id) => access[id] && access[id].operate));
    },
    query,
    /** Re-fetch at once (after a write), instead of waiting for the next poll. */
    refresh: () => poll(myGeneration, true),
    /** Set the page title. */
    title: (text) => (document.title = `${text} · Leoflow`),
    isCurrent: () => generation === myGeneration,
  };
  ctx.title(found.page.title(found.params));
  const content = h("div", { class: "view-content" });
  // Why the view is stale (API unreachable, not found, ...): shown above it, cleared on success.
  const problem = h("p", { class: "notice notice-error", role: "alert", "data-testid": "view-error", hidden: true });
  root.append(problem, content);
  const start = () => {
    current = { view: found.page.mount(content, found.params, ctx), timer: null, generation: myGeneration,
      failures: 0, inFlight: false, again: false, problem };
    poll(myGeneration, false);
  };
  if (!found.params.dagId || session.canWrite) {
    start();
    return;
  }
  // A DAG's pages: their write buttons follow the caller's role on that DAG's team.
  ctx.operable([found.params.dagId]).then((ids) => {
    ctx.canWrite = ids.has(found.params.dagId);
    if (generation === myGeneration) start();
  });
}

async function poll(myGeneration, immediate) {
  const view = current;
  if (!view || view.generation !== myGeneration) return;
  if (view.inFlight) {
    // A refresh of this view is running; an immediate one goes right after it.
    if (immediate) view.again = true;
    return;
  }
  clearTimeout(view.timer);
  view.inFlight = true;
  let delay = POLL_MS;
  try {
    await current.view.refresh();
    if (!current || current.generation !== myGeneration) return;
    current.failures = 0;
    current.problem.hidden = true;
    setLive("ok", "live");
    if (current.view.pollMs) delay = current.view.pollMs();
  } catch (err) {
    if (!current || current.generation !== myGeneration) return;
    if (err instanceof ApiError && err.status === 401) return; // the login form takes over
    current.failures += 1;
    delay = Math.min(POLL_MS * 2 ** current.failures, MAX_BACKOFF_MS);
    const offline = err instanceof ApiError && err.status === 0;
    setLive("error", offline ? "offline — retrying" : "error — retrying");
    current.problem.hidden = false;
    current.problem.textContent = offline
      ? "The server cannot be reached; showing the last data received. Retrying…"
      : err instanceof ApiError && err.status === 404 ? `Not found: ${err.message}.` : `Error: ${err.message}. Retrying…`;
  } finally {
    view.inFlight = false;
  }
  if (view.again) {
    view.again = false;
    delay = 0;
  }
  if (current && current.generation === myGeneration) {
    current.timer = setTimeout(() => poll(myGeneration, false), document.hidden ? delay * 5 : delay);
  }
}

onUnauthorized(() => {
  const rejected = Boolean(getToken());
  setToken("");
  session.scope = null;
  showLogin(rejected ? "The token was rejected (expired or revoked)." : "");
});

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && current) poll(current.generation, true);
});

window.addEventListener("hashchange", route);

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  setToken(token);
  $("token-input").value = "";
  $("login").hidden = true;
  session.scope = null;
  startSession();
});

$("signout").addEventListener("click", async () => {
  if (!getToken()) await endSsoSession();
  setToken("");
  session.scope = null;
  showLogin("");
});

// Expose the API client for debugging from the browser console.
window.leoflow = { api };

startSession();
